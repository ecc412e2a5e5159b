package dev.sluice.peers.kstreams;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The "join" workload of the peer benchmark (FLIP-326, KAFKA-4113): the orders stream joined
 * (inner) with the customers table, both keyed by customer_id and co-partitioned, written as
 * sluice writes a stream-table join: the order's JSON object with the customer's row added under
 * the table's name, {"order_id":..,"customer_id":..,"amount":..,"ts":..,"customers":{..}}, keyed
 * by customer_id.
 *
 * <p>Topology, all defaults: {@code builder.stream(orders).join(builder.table(customers), ...)}
 * with the record timestamps (the producer set them to "ts"). Kafka Streams does not load the
 * table before it processes the stream: it picks, among the task's partitions that have buffered
 * records, the record with the smallest timestamp, and max.task.idle.ms (set by Main) only makes
 * it wait longer for an empty partition. An order processed before its customer's row is dropped
 * by the inner join.
 */
final class Join {
  private Join() {}

  /** The name the customer row is nested under: the table's name in sluice's config. */
  static final String TABLE = "customers";

  private static final byte[] FIELD = (",\"" + TABLE + "\":").getBytes(java.nio.charset.StandardCharsets.US_ASCII);

  static void build(StreamsBuilder b, String orders, String customers, String output) {
    KTable<String, byte[]> table = b.table(customers, Consumed.with(Serdes.String(), Serdes.ByteArray()));
    b.stream(orders, Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .join(table, Join::enrich)
        .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));
  }

  /** The order object with ,"customers":row inserted before its closing brace. */
  static byte[] enrich(byte[] order, byte[] row) {
    int end = order.length - 1;
    while (end >= 0 && order[end] != '}') {
      end--;
    }
    if (end < 0) {
      throw new IllegalArgumentException("order is not a JSON object: " + new String(order, java.nio.charset.StandardCharsets.UTF_8));
    }
    byte[] out = new byte[end + FIELD.length + row.length + 1];
    System.arraycopy(order, 0, out, 0, end);
    System.arraycopy(FIELD, 0, out, end, FIELD.length);
    System.arraycopy(row, 0, out, end + FIELD.length, row.length);
    out[out.length - 1] = '}';
    return out;
  }
}
