package dev.sluice.peers.flink;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.SerializableTimestampAssigner;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.api.java.tuple.Tuple5;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The Apache Flink contender of the sluice peer benchmark: per customer_id (the record key) the
 * exact sum of "amount" and the count of orders, written to the output topic as
 * {"key":"c-0000042","amount":12345.67,"orders":42}.
 *
 * <p>A local MiniCluster (getExecutionEnvironment() in a plain java process) runs: a KafkaSource
 * from the earliest offsets, bounded at the latest offsets seen at start (read_committed);
 * keyBy(customer_id).reduce(sum, count); a KafkaSink. STREAMING mode emits every update, with
 * heap (hashmap) state, checkpoints every checkpointMs to a temp directory and an exactly-once
 * (transactional) sink. BATCH mode emits one final result per key; it has no checkpoints, so its
 * sink is at-least-once. The process exits when the bounded job finishes.
 *
 * <p>With the "windows" workload: per customer_id and event-time tumbling window of windowMs
 * (TumblingEventTimeWindows; event time = the value's "ts", watermarks forMonotonousTimestamps per
 * Kafka partition), allowed lateness 0, the same sum and count, one result per key and window
 * when the window fires, written as
 * {"key":"c-0000042","window_start":..,"window_end":..,"amount":..,"orders":..}. BATCH fires each
 * window once at the end of its key's input; STREAMING when the watermark passes the window's
 * end, and every remaining window at the end of the bounded input.
 *
 * <p>Args: brokers inputTopic outputTopic groupId mode(streaming|batch) [parallelism=2]
 * [checkpointMs=1000] [workload=totals|windows] [windowMs=3600000].
 *
 * <p>Every JVM system property {@code peers.flink.conf.<key>=<value>} is set in the job's
 * Configuration as {@code <key>=<value>} (e.g. {@code
 * -Dpeers.flink.conf.taskmanager.memory.managed.size=1g}); {@code -Dpeers.flink.objectReuse=true}
 * calls {@code env.getConfig().enableObjectReuse()}. When the job ends, a line {@code flink: job
 * finished in <ms> ms (net runtime)} gives JobExecutionResult.getNetRuntime(), which the harness
 * reports beside the process time.
 */
public final class Main {
  private Main() {}

  /** The prefix of the system properties set in the job's Configuration as they are. */
  static final String EXTRA = "peers.flink.conf.";

  /** (customer_id, amount, orders). */
  static final TypeInformation<Tuple3<String, BigDecimal, Long>> TYPE =
      Types.TUPLE(Types.STRING, Types.BIG_DEC, Types.LONG);

  private static final byte[] AMOUNT = "\"amount\"".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] TS = "\"ts\"".getBytes(StandardCharsets.US_ASCII);

  /** (customer_id, amount, orders, ts). */
  static final TypeInformation<Tuple4<String, BigDecimal, Long, Long>> ORDER =
      Types.TUPLE(Types.STRING, Types.BIG_DEC, Types.LONG, Types.LONG);

  /** (customer_id, window_start, window_end, amount, orders). */
  static final TypeInformation<Tuple5<String, Long, Long, BigDecimal, Long>> FINAL =
      Types.TUPLE(Types.STRING, Types.LONG, Types.LONG, Types.BIG_DEC, Types.LONG);

  /** Parses the top-level "ts" field (epoch ms, a JSON integer). */
  static long ts(byte[] v) {
    int i = indexOf(v, TS);
    if (i < 0) {
      throw new IllegalArgumentException("no ts field in " + new String(v, StandardCharsets.UTF_8));
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
    if (digits == 0 || digits > 18) {
      throw new IllegalArgumentException("bad ts in " + new String(v, StandardCharsets.UTF_8));
    }
    return ts;
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

  /** Kafka record (key = customer_id, JSON value) to (customer_id, amount, 1). */
  static final class OrderDeserializer
      implements KafkaRecordDeserializationSchema<Tuple3<String, BigDecimal, Long>> {
    @Override
    public void deserialize(
        ConsumerRecord<byte[], byte[]> r, Collector<Tuple3<String, BigDecimal, Long>> out) {
      out.collect(Tuple3.of(new String(r.key(), StandardCharsets.UTF_8), amount(r.value()), 1L));
    }

    @Override
    public TypeInformation<Tuple3<String, BigDecimal, Long>> getProducedType() {
      return TYPE;
    }
  }

  /** (customer_id, sum, count) to key = customer_id, value = the totals JSON. */
  static final class TotalsSerializer
      implements KafkaRecordSerializationSchema<Tuple3<String, BigDecimal, Long>> {
    private final String topic;

    TotalsSerializer(String topic) {
      this.topic = topic;
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(
        Tuple3<String, BigDecimal, Long> t, KafkaSinkContext ctx, Long timestamp) {
      StringBuilder sb = new StringBuilder(64).append("{\"key\":\"");
      for (int i = 0; i < t.f0.length(); i++) {
        char c = t.f0.charAt(i);
        if (c == '"' || c == '\\') {
          sb.append('\\');
        }
        sb.append(c);
      }
      sb.append("\",\"amount\":").append(t.f1.toPlainString()).append(",\"orders\":").append(t.f2).append('}');
      return new ProducerRecord<>(
          topic,
          t.f0.getBytes(StandardCharsets.UTF_8),
          sb.toString().getBytes(StandardCharsets.UTF_8));
    }
  }

  /** Kafka record (key = customer_id, JSON value) to (customer_id, amount, 1, ts). */
  static final class TimedOrderDeserializer
      implements KafkaRecordDeserializationSchema<Tuple4<String, BigDecimal, Long, Long>> {
    @Override
    public void deserialize(
        ConsumerRecord<byte[], byte[]> r, Collector<Tuple4<String, BigDecimal, Long, Long>> out) {
      out.collect(
          Tuple4.of(new String(r.key(), StandardCharsets.UTF_8), amount(r.value()), 1L, ts(r.value())));
    }

    @Override
    public TypeInformation<Tuple4<String, BigDecimal, Long, Long>> getProducedType() {
      return ORDER;
    }
  }

  static final class OrderTime implements SerializableTimestampAssigner<Tuple4<String, BigDecimal, Long, Long>> {
    @Override
    public long extractTimestamp(Tuple4<String, BigDecimal, Long, Long> t, long recordTimestamp) {
      return t.f3;
    }
  }

  static final class ByCustomerTimed implements KeySelector<Tuple4<String, BigDecimal, Long, Long>, String> {
    @Override
    public String getKey(Tuple4<String, BigDecimal, Long, Long> t) {
      return t.f0;
    }
  }

  static final class SumTimed implements ReduceFunction<Tuple4<String, BigDecimal, Long, Long>> {
    @Override
    public Tuple4<String, BigDecimal, Long, Long> reduce(
        Tuple4<String, BigDecimal, Long, Long> a, Tuple4<String, BigDecimal, Long, Long> b) {
      return Tuple4.of(a.f0, a.f1.add(b.f1), a.f2 + b.f2, Math.max(a.f3, b.f3));
    }
  }

  /** The window's reduced (customer, sum, count) with the window's bounds. */
  static final class WithWindow
      extends ProcessWindowFunction<
          Tuple4<String, BigDecimal, Long, Long>, Tuple5<String, Long, Long, BigDecimal, Long>, String, TimeWindow> {
    @Override
    public void process(
        String key,
        Context ctx,
        Iterable<Tuple4<String, BigDecimal, Long, Long>> sums,
        Collector<Tuple5<String, Long, Long, BigDecimal, Long>> out) {
      TimeWindow w = ctx.window();
      for (Tuple4<String, BigDecimal, Long, Long> t : sums) {
        out.collect(Tuple5.of(key, w.getStart(), w.getEnd(), t.f1, t.f2));
      }
    }
  }

  /** (customer_id, start, end, sum, count) to key = customer_id, value = sluice's windowed JSON. */
  static final class FinalSerializer
      implements KafkaRecordSerializationSchema<Tuple5<String, Long, Long, BigDecimal, Long>> {
    private final String topic;

    FinalSerializer(String topic) {
      this.topic = topic;
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(
        Tuple5<String, Long, Long, BigDecimal, Long> t, KafkaSinkContext ctx, Long timestamp) {
      StringBuilder sb = new StringBuilder(112).append("{\"key\":\"");
      for (int i = 0; i < t.f0.length(); i++) {
        char c = t.f0.charAt(i);
        if (c == '"' || c == '\\') {
          sb.append('\\');
        }
        sb.append(c);
      }
      sb.append("\",\"window_start\":").append(t.f1).append(",\"window_end\":").append(t.f2)
          .append(",\"amount\":").append(t.f3.toPlainString()).append(",\"orders\":").append(t.f4).append('}');
      return new ProducerRecord<>(
          topic,
          t.f0.getBytes(StandardCharsets.UTF_8),
          sb.toString().getBytes(StandardCharsets.UTF_8));
    }
  }

  static final class ByCustomer implements KeySelector<Tuple3<String, BigDecimal, Long>, String> {
    @Override
    public String getKey(Tuple3<String, BigDecimal, Long> t) {
      return t.f0;
    }
  }

  static final class Sum implements ReduceFunction<Tuple3<String, BigDecimal, Long>> {
    @Override
    public Tuple3<String, BigDecimal, Long> reduce(
        Tuple3<String, BigDecimal, Long> a, Tuple3<String, BigDecimal, Long> b) {
      return Tuple3.of(a.f0, a.f1.add(b.f1), a.f2 + b.f2);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 5) {
      System.err.println(
          "usage: Main brokers inputTopic outputTopic groupId streaming|batch [parallelism=2] [checkpointMs=1000]"
              + " [workload=totals|windows] [windowMs=3600000]");
      System.exit(2);
    }
    String brokers = args[0];
    String input = args[1];
    String output = args[2];
    String group = args[3];
    boolean batch;
    switch (args[4]) {
      case "streaming":
        batch = false;
        break;
      case "batch":
        batch = true;
        break;
      default:
        System.err.println("flink: mode must be streaming or batch, got " + args[4]);
        System.exit(2);
        return;
    }
    int parallelism = args.length > 5 ? Integer.parseInt(args[5]) : 2;
    long checkpointMs = args.length > 6 ? Long.parseLong(args[6]) : 1000;
    String workload = args.length > 7 ? args[7] : "totals";
    long windowMs = args.length > 8 ? Long.parseLong(args[8]) : 3_600_000L;
    if (!workload.equals("totals") && !workload.equals("windows")) {
      System.err.println("flink: workload must be totals or windows, got " + workload);
      System.exit(2);
    }
    boolean windows = workload.equals("windows");

    Path tmp = Files.createTempDirectory("flink-" + group + "-");
    Configuration conf = new Configuration();
    conf.set(ExecutionOptions.RUNTIME_MODE,
        batch ? RuntimeExecutionMode.BATCH : RuntimeExecutionMode.STREAMING);
    conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism);
    conf.set(CoreOptions.TMP_DIRS, tmp.resolve("io").toString());
    conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
    conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve("checkpoints").toUri().toString());
    java.util.Map<String, String> extra = new java.util.TreeMap<>();
    for (String name : System.getProperties().stringPropertyNames()) {
      if (name.startsWith(EXTRA) && name.length() > EXTRA.length()) {
        extra.put(name.substring(EXTRA.length()), System.getProperty(name));
      }
    }
    conf.addAll(Configuration.fromMap(extra));
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    boolean objectReuse = Boolean.getBoolean("peers.flink.objectReuse");
    if (objectReuse) {
      env.getConfig().enableObjectReuse();
    }
    if (!batch) {
      env.enableCheckpointing(checkpointMs, CheckpointingMode.EXACTLY_ONCE);
    }

    DeliveryGuarantee guarantee = batch ? DeliveryGuarantee.AT_LEAST_ONCE : DeliveryGuarantee.EXACTLY_ONCE;
    if (windows) {
      KafkaSource<Tuple4<String, BigDecimal, Long, Long>> source =
          KafkaSource.<Tuple4<String, BigDecimal, Long, Long>>builder()
              .setBootstrapServers(brokers)
              .setTopics(input)
              .setGroupId(group)
              .setStartingOffsets(OffsetsInitializer.earliest())
              .setBounded(OffsetsInitializer.latest())
              .setProperty("isolation.level", "read_committed")
              .setDeserializer(new TimedOrderDeserializer())
              .build();
      KafkaSink<Tuple5<String, Long, Long, BigDecimal, Long>> sink =
          KafkaSink.<Tuple5<String, Long, Long, BigDecimal, Long>>builder()
              .setBootstrapServers(brokers)
              .setRecordSerializer(new FinalSerializer(output))
              .setDeliveryGuarantee(guarantee)
              .setTransactionalIdPrefix(group)
              .setProperty("transaction.timeout.ms", "600000")
              .build();
      WatermarkStrategy<Tuple4<String, BigDecimal, Long, Long>> watermarks =
          WatermarkStrategy.<Tuple4<String, BigDecimal, Long, Long>>forMonotonousTimestamps()
              .withTimestampAssigner(new OrderTime());
      env.fromSource(source, watermarks, "orders")
          .keyBy(new ByCustomerTimed())
          .window(TumblingEventTimeWindows.of(Duration.ofMillis(windowMs)))
          .reduce(new SumTimed(), new WithWindow(), FINAL)
          .sinkTo(sink);
    } else {
      KafkaSource<Tuple3<String, BigDecimal, Long>> source =
          KafkaSource.<Tuple3<String, BigDecimal, Long>>builder()
              .setBootstrapServers(brokers)
              .setTopics(input)
              .setGroupId(group)
              .setStartingOffsets(OffsetsInitializer.earliest())
              .setBounded(OffsetsInitializer.latest())
              .setProperty("isolation.level", "read_committed")
              .setDeserializer(new OrderDeserializer())
              .build();
      KafkaSink<Tuple3<String, BigDecimal, Long>> sink =
          KafkaSink.<Tuple3<String, BigDecimal, Long>>builder()
              .setBootstrapServers(brokers)
              .setRecordSerializer(new TotalsSerializer(output))
              .setDeliveryGuarantee(guarantee)
              .setTransactionalIdPrefix(group)
              .setProperty("transaction.timeout.ms", "600000")
              .build();

      env.fromSource(source, WatermarkStrategy.noWatermarks(), "orders")
          .keyBy(new ByCustomer())
          .reduce(new Sum())
          .sinkTo(sink);
    }

    System.err.printf(
        "flink: mode=%s parallelism=%d checkpoint=%s in=%s out=%s group=%s workload=%s%s tmp=%s objectReuse=%b conf=%s%n",
        batch ? "BATCH" : "STREAMING", parallelism, batch ? "none" : checkpointMs + "ms", input,
        output, group, workload, windows ? " window=" + windowMs + "ms" : "", tmp, objectReuse, extra);
    int exit = 0;
    try {
      JobExecutionResult r = env.execute(workload + "-" + (batch ? "batch" : "streaming"));
      System.err.printf("flink: job finished in %d ms (net runtime)%n", r.getNetRuntime());
    } catch (Exception e) {
      System.err.println("flink: job failed: " + e);
      e.printStackTrace();
      exit = 1;
    } finally {
      deleteTree(tmp);
    }
    System.exit(exit);
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
