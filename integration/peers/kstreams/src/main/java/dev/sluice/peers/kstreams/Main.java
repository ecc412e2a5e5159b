package dev.sluice.peers.kstreams;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams contender of the sluice peer benchmark: per customer_id (the record key) the
 * exact sum of "amount" and the count of orders, written to the output topic as
 * {"key":"c-0000042","amount":12345.67,"orders":42}.
 *
 * <p>Topology: stream(input).groupByKey().aggregate(sum BigDecimal, count long) backed by the
 * default persistent (RocksDB) store with its record cache, then toStream().to(output).
 * exactly_once_v2, commit.interval.ms=100, state dir in a fresh temp directory that is removed
 * on exit. Runs until SIGTERM.
 *
 * <p>With the "windows" workload: per customer_id and tumbling window of windowMs of event time
 * (the value's "ts", read by a TimestampExtractor), grace 0, the same sum and count, emitted once
 * when the window closes (emitStrategy(onWindowClose()): when the task's stream time reaches the
 * window's end) as {"key":"c-0000042","window_start":..,"window_end":..,"amount":..,"orders":..}.
 * Kafka Streams checks for closed windows while it processes a record, at most once per
 * emitIntervalMs of wall time (its internal config
 * __emit.interval.ms.kstreams.windowed.aggregation__, 1000 ms by default; -1 keeps the default):
 * a window closed by the last record of a backlog is emitted only if that check is due.
 *
 * <p>With the "join" workload (class Join): the orders of inputTopic joined (KStream#join(KTable),
 * inner) with the customers table of tableTopic; maxTaskIdleMs sets max.task.idle.ms ("default"
 * keeps Kafka Streams' default, 0).
 *
 * <p>Args: brokers inputTopic outputTopic applicationId cacheMaxBytes [streamThreads=2]
 * [commitIntervalMs=100] [workload=totals|windows|join] then, for windows, [windowMs=3600000]
 * [emitIntervalMs=-1], for join, tableTopic [maxTaskIdleMs=default].
 *
 * <p>Every JVM system property {@code peers.streams.<name>=<value>} is added to the Streams
 * properties as {@code <name>=<value>} after the settings above (so it overrides them), e.g.
 * {@code -Dpeers.streams.producer.batch.size=524288}: the harness's tuned contender uses them.
 */
public final class Main {
  private Main() {}

  /** Running totals of one customer. Immutable. */
  static final class Totals {
    final BigDecimal amount;
    final long orders;

    Totals(BigDecimal amount, long orders) {
      this.amount = amount;
      this.orders = orders;
    }
  }

  static final Totals ZERO = new Totals(BigDecimal.ZERO, 0);

  /** The prefix of the system properties passed to Kafka Streams as they are. */
  static final String EXTRA = "peers.streams.";

  /** Binary serde: 8 bytes count, 4 bytes scale, then the unscaled value's two's complement bytes. */
  static final class TotalsSerde implements Serde<Totals>, Serializer<Totals>, Deserializer<Totals> {
    @Override
    public byte[] serialize(String topic, Totals t) {
      if (t == null) {
        return null;
      }
      byte[] unscaled = t.amount.unscaledValue().toByteArray();
      return ByteBuffer.allocate(12 + unscaled.length)
          .putLong(t.orders)
          .putInt(t.amount.scale())
          .put(unscaled)
          .array();
    }

    @Override
    public Totals deserialize(String topic, byte[] b) {
      if (b == null) {
        return null;
      }
      ByteBuffer buf = ByteBuffer.wrap(b);
      long orders = buf.getLong();
      int scale = buf.getInt();
      byte[] unscaled = new byte[buf.remaining()];
      buf.get(unscaled);
      return new Totals(new BigDecimal(new java.math.BigInteger(unscaled), scale), orders);
    }

    @Override
    public void configure(java.util.Map<String, ?> configs, boolean isKey) {}

    @Override
    public void close() {}

    @Override
    public Serializer<Totals> serializer() {
      return this;
    }

    @Override
    public Deserializer<Totals> deserializer() {
      return this;
    }
  }

  private static final byte[] AMOUNT = "\"amount\"".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] TS = "\"ts\"".getBytes(StandardCharsets.US_ASCII);

  /** Parses the top-level "ts" field (epoch ms, a JSON integer); -1 when there is none. */
  static long ts(byte[] v) {
    int i = indexOf(v, TS);
    if (i < 0) {
      return -1;
    }
    i += TS.length;
    while (i < v.length && (v[i] == ' ' || v[i] == ':')) {
      i++;
    }
    long ts = 0;
    int digits = 0;
    for (; i < v.length && v[i] >= '0' && v[i] <= '9'; i++) {
      ts = ts * 10 + (v[i] - '0');
      digits++;
    }
    return digits == 0 || digits > 18 ? -1 : ts;
  }

  /** The record's event time is its value's "ts"; a record without one fails the task. */
  static final class OrderTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> r, long partitionTime) {
      long ts = r.value() instanceof byte[] ? ts((byte[]) r.value()) : -1;
      if (ts < 0) {
        throw new IllegalArgumentException(
            "no ts in the record at " + r.topic() + "-" + r.partition() + "@" + r.offset());
      }
      return ts;
    }
  }

  /**
   * Parses the JSON number of the top-level "amount" field exactly. A hand-written scanner (no
   * JSON library) so the peer is not slowed down by parsing: the workload's values are flat
   * objects written by integration/workload.
   */
  static BigDecimal amount(byte[] v) {
    int i = indexOf(v, AMOUNT);
    if (i < 0) {
      throw new IllegalArgumentException("no amount field in " + new String(v, StandardCharsets.UTF_8));
    }
    i += AMOUNT.length;
    while (i < v.length && (v[i] == ' ' || v[i] == ':')) {
      i++;
    }
    int start = i;
    boolean neg = false;
    if (i < v.length && v[i] == '-') {
      neg = true;
      i++;
    }
    long unscaled = 0;
    int scale = -1;
    int digits = 0;
    for (; i < v.length; i++) {
      byte c = v[i];
      if (c >= '0' && c <= '9') {
        unscaled = unscaled * 10 + (c - '0');
        digits++;
        if (scale >= 0) {
          scale++;
        }
      } else if (c == '.' && scale < 0) {
        scale = 0;
      } else {
        break;
      }
    }
    boolean exotic = i < v.length && (v[i] == 'e' || v[i] == 'E');
    if (exotic || digits == 0 || digits > 18) {
      int end = i;
      while (end < v.length && v[end] != ',' && v[end] != '}' && v[end] != ' ') {
        end++;
      }
      return new BigDecimal(new String(v, start, end - start, StandardCharsets.US_ASCII));
    }
    return BigDecimal.valueOf(neg ? -unscaled : unscaled, Math.max(scale, 0));
  }

  private static int indexOf(byte[] hay, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= hay.length; i++) {
      for (int j = 0; j < needle.length; j++) {
        if (hay[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    return -1;
  }

  static String json(String key, Totals t) {
    return fields(keyJson(key), t);
  }

  /** {"key":..,"window_start":..,"window_end":..,"amount":..,"orders":..}: sluice's windowed output. */
  static String windowJson(String key, long start, long end, Totals t) {
    return fields(keyJson(key).append(",\"window_start\":").append(start).append(",\"window_end\":").append(end), t);
  }

  private static StringBuilder keyJson(String key) {
    StringBuilder sb = new StringBuilder(96);
    sb.append("{\"key\":\"");
    for (int i = 0; i < key.length(); i++) {
      char c = key.charAt(i);
      if (c == '"' || c == '\\') {
        sb.append('\\');
      }
      sb.append(c);
    }
    return sb.append('"');
  }

  private static String fields(StringBuilder sb, Totals t) {
    return sb.append(",\"amount\":")
        .append(t.amount.toPlainString())
        .append(",\"orders\":")
        .append(t.orders)
        .append('}')
        .toString();
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 5) {
      System.err.println(
          "usage: Main brokers inputTopic outputTopic applicationId cacheMaxBytes [streamThreads=2] [commitIntervalMs=100]"
              + " [workload=totals|windows|join] [windowMs=3600000 [emitIntervalMs=-1] | tableTopic [maxTaskIdleMs=default]]");
      System.exit(2);
    }
    String brokers = args[0];
    String input = args[1];
    String output = args[2];
    String appId = args[3];
    long cacheBytes = Long.parseLong(args[4]);
    int threads = args.length > 5 ? Integer.parseInt(args[5]) : 2;
    long commitMs = args.length > 6 ? Long.parseLong(args[6]) : 100;
    String workload = args.length > 7 ? args[7] : "totals";
    boolean join = workload.equals("join");
    long windowMs = !join && args.length > 8 ? Long.parseLong(args[8]) : 3_600_000L;
    long emitIntervalMs = !join && args.length > 9 ? Long.parseLong(args[9]) : -1;
    String table = join && args.length > 8 ? args[8] : null;
    String idle = join && args.length > 9 ? args[9] : "default";
    if (!workload.equals("totals") && !workload.equals("windows") && !join) {
      System.err.println("kstreams: workload must be totals, windows or join, got " + workload);
      System.exit(2);
    }
    if (join && table == null) {
      System.err.println("kstreams: the join workload needs the table topic");
      System.exit(2);
    }

    Path stateDir = Files.createTempDirectory("kstreams-" + appId + "-");

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, cacheBytes);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    if (join && !idle.equals("default")) {
      p.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, Long.parseLong(idle));
    }
    if (emitIntervalMs >= 0) {
      p.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, emitIntervalMs);
    }
    StringBuilder extra = new StringBuilder();
    for (String name : new java.util.TreeSet<>(System.getProperties().stringPropertyNames())) {
      if (name.startsWith(EXTRA) && name.length() > EXTRA.length()) {
        String key = name.substring(EXTRA.length());
        p.put(key, System.getProperty(name));
        extra.append(' ').append(key).append('=').append(System.getProperty(name));
      }
    }

    TotalsSerde totalsSerde = new TotalsSerde();
    StreamsBuilder b = new StreamsBuilder();
    if (join) {
      Join.build(b, input, table, output);
    } else if (workload.equals("windows")) {
      b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()).withTimestampExtractor(new OrderTime()))
          .groupByKey()
          .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ZERO))
          .emitStrategy(EmitStrategy.onWindowClose())
          .aggregate(
              () -> ZERO,
              (key, value, agg) -> new Totals(agg.amount.add(amount(value)), agg.orders + 1),
              Materialized.<String, Totals, WindowStore<Bytes, byte[]>>as("windows")
                  .withKeySerde(Serdes.String())
                  .withValueSerde(totalsSerde))
          .toStream()
          .map((w, t) -> KeyValue.pair(w.key(), windowJson(w.key(), w.window().start(), w.window().end(), t)))
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
    } else {
      b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
          .groupByKey()
          .aggregate(
              () -> ZERO,
              (key, value, agg) -> new Totals(agg.amount.add(amount(value)), agg.orders + 1),
              Materialized.<String, Totals, KeyValueStore<Bytes, byte[]>>as("totals")
                  .withKeySerde(Serdes.String())
                  .withValueSerde(totalsSerde))
          .toStream()
          .mapValues(Main::json)
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
    }

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    int[] exit = {0};
    streams.setUncaughtExceptionHandler(
        e -> {
          System.err.println("kstreams: stream thread failed: " + e);
          e.printStackTrace();
          exit[0] = 1;
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.setStateListener(
        (now, before) -> {
          System.err.println("kstreams: state " + before + " -> " + now);
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            done.countDown();
          }
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(20));
                  deleteTree(stateDir);
                  done.countDown();
                }));
    System.err.printf(
        "kstreams: kafka-streams %s app=%s in=%s out=%s cache=%d threads=%d commit=%dms workload=%s%s state=%s%s%n",
        kafkaVersion(), appId, input, output, cacheBytes, threads, commitMs, workload,
        workload.equals("windows")
            ? " window=" + windowMs + "ms emitInterval=" + emitIntervalMs + "ms"
            : join ? " table=" + table + " max.task.idle.ms=" + idle : "",
        stateDir,
        extra.length() > 0 ? " extra:" + extra : "");
    streams.start();
    done.await();
    System.exit(exit[0]);
  }

  /** The kafka-clients version on the classpath, from the properties file the jar carries. */
  private static String kafkaVersion() {
    try (java.io.InputStream in = Main.class.getResourceAsStream("/kafka/kafka-version.properties")) {
      Properties v = new Properties();
      if (in != null) {
        v.load(in);
      }
      return v.getProperty("version", "unknown");
    } catch (IOException e) {
      return "unknown";
    }
  }

  /**
   * Removes dir and everything below it, best effort: files that vanish meanwhile (the runtime
   * cleans up after itself concurrently) or cannot be removed are skipped.
   */
  private static void deleteTree(Path dir) {
    java.io.File[] children = dir.toFile().listFiles();
    if (children != null) {
      for (java.io.File c : children) {
        if (c.isDirectory() && !Files.isSymbolicLink(c.toPath())) {
          deleteTree(c.toPath());
        } else {
          c.delete();
        }
      }
    }
    dir.toFile().delete();
  }

}
