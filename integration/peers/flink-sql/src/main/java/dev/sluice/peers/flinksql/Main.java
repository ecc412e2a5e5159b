package dev.sluice.peers.flinksql;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.config.TableConfigOptions;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * The Flink SQL contender of sluice's Nexmark comparison (integration/peers/README.md, "Nexmark
 * against Flink SQL"): one Nexmark query, written in Flink SQL (queries/qN.sql), run over the
 * topics nexmark-gen fills, as a bounded job on a local MiniCluster.
 *
 * <p>The source tables person, auction and bid are Kafka tables over {prefix}person,
 * {prefix}auction and {prefix}bid (JSON, read_committed, from the earliest offsets, bounded at
 * the latest offsets seen at start, in both modes): the topics carry times as epoch-ms BIGINTs,
 * so each table has a computed column, the event time as a TIMESTAMP(3) in UTC (the session
 * time zone), with Nexmark's watermark (4 s behind), and a view gives the query Nexmark's
 * columns (dateTime, and expires for auctions, as TIMESTAMP(3)) as nexmark-flink's
 * ddl_kafka.sql and ddl_views.sql do. The UDF count_char (q14) is Nexmark's CountChar.
 *
 * <p>The query file holds the sink table and the INSERT (and any table of its own, with
 * ${TOPIC_PREFIX} and ${BROKERS} replaced), and may set table options with SET 'key' = 'value'
 * (which TableEnvironment.executeSql refuses: Main applies it to the table config, before the
 * statements after it are planned). The sink's WITH clause is ${KAFKA_SINK}
 * (an append-only Kafka table, JSON) or ${UPSERT_SINK} (upsert-kafka: the primary key as the JSON
 * key, deletes as tombstones) over the output topic. STREAMING runs with heap state, checkpoints
 * every checkpointMs and an exactly-once (transactional) sink; the bounded job ends after the
 * final checkpoint that commits it. BATCH has no checkpoints, its sink is at-least-once.
 *
 * <p>Args: query brokers mode(streaming|batch) sqlFile outTopic topicPrefix group
 * [parallelism=2] [checkpointMs=1000]. Prints "flink-sql: job finished in N ms" (the job's net
 * runtime, JobExecutionResult.getNetRuntime) to stderr. Exit 0 done, 1 the job failed, 3 the
 * planner refused the query in this mode (the reason on stderr), 2 usage.
 */
public final class Main {
  private Main() {}

  /** Nexmark's UDF: the number of occurrences of a character in a string (q14). */
  public static final class CountChar extends ScalarFunction {
    public long eval(String s, String character) {
      long count = 0;
      if (s != null && character != null && !character.isEmpty()) {
        char want = character.charAt(0);
        for (int i = 0; i < s.length(); i++) {
          if (s.charAt(i) == want) {
            count++;
          }
        }
      }
      return count;
    }
  }

  static String source(String name, String columns, String computed, String topic, String brokers,
      String group) {
    return "CREATE TABLE " + name + "_src (\n" + columns + ",\n" + computed + ",\n"
        + "  WATERMARK FOR rt AS rt - INTERVAL '4' SECOND\n) WITH (\n"
        + "  'connector' = 'kafka',\n"
        + "  'topic' = '" + topic + "',\n"
        + "  'properties.bootstrap.servers' = '" + brokers + "',\n"
        + "  'properties.group.id' = '" + group + "',\n"
        + "  'properties.isolation.level' = 'read_committed',\n"
        + "  'scan.startup.mode' = 'earliest-offset',\n"
        + "  'scan.bounded.mode' = 'latest-offset',\n"
        + "  'format' = 'json',\n"
        + "  'json.fail-on-missing-field' = 'false',\n"
        + "  'json.ignore-parse-errors' = 'false'\n)";
  }

  /** A query file's option: SET 'key' = 'value'. */
  static final Pattern SET = Pattern.compile("(?is)SET\\s+'([^']+)'\\s*=\\s*'([^']*)'\\s*");

  static final String RT = "  rt AS CAST(TO_TIMESTAMP_LTZ(`dateTime`, 3) AS TIMESTAMP(3))";

  static List<String> ddl(String prefix, String brokers, String group) {
    List<String> out = new ArrayList<>();
    out.add(source("person",
        "  id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING,"
            + " `dateTime` BIGINT, extra STRING",
        RT, prefix + "person", brokers, group));
    out.add("CREATE VIEW person AS SELECT id, name, emailAddress, creditCard, city, state,"
        + " rt AS `dateTime`, extra FROM person_src");
    out.add(source("auction",
        "  id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,"
            + " `dateTime` BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING",
        RT, prefix + "auction", brokers, group));
    out.add("CREATE VIEW auction AS SELECT id, itemName, description, initialBid, reserve,"
        + " rt AS `dateTime`, CAST(TO_TIMESTAMP_LTZ(expires, 3) AS TIMESTAMP(3)) AS expires,"
        + " seller, category, extra FROM auction_src");
    out.add(source("bid",
        "  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,"
            + " `dateTime` BIGINT, extra STRING",
        RT, prefix + "bid", brokers, group));
    out.add("CREATE VIEW bid AS SELECT auction, bidder, price, channel, url, rt AS `dateTime`,"
        + " extra FROM bid_src");
    return out;
  }

  /** Splits a SQL file into statements: ';' at the end of a line ends one; "--" lines dropped. */
  static List<String> statements(String text) {
    List<String> out = new ArrayList<>();
    StringBuilder cur = new StringBuilder();
    for (String line : text.split("\n", -1)) {
      String t = line.strip();
      if (t.startsWith("--") || t.isEmpty()) {
        continue;
      }
      if (t.endsWith(";")) {
        cur.append(t, 0, t.length() - 1);
        out.add(cur.toString());
        cur.setLength(0);
      } else {
        cur.append(line).append('\n');
      }
    }
    if (!cur.toString().isBlank()) {
      out.add(cur.toString());
    }
    return out;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 7) {
      System.err.println("usage: Main query brokers streaming|batch sqlFile outTopic topicPrefix group"
          + " [parallelism=2] [checkpointMs=1000]");
      System.exit(2);
    }
    String query = args[0];
    String brokers = args[1];
    String mode = args[2];
    Path sqlFile = Path.of(args[3]);
    String outTopic = args[4];
    String prefix = args[5];
    String group = args[6];
    int parallelism = args.length > 7 ? Integer.parseInt(args[7]) : 2;
    long checkpointMs = args.length > 8 ? Long.parseLong(args[8]) : 1000;
    if (!mode.equals("streaming") && !mode.equals("batch")) {
      System.err.println("flink-sql: mode must be streaming or batch, got " + mode);
      System.exit(2);
    }
    boolean batch = mode.equals("batch");

    Path tmp = Files.createTempDirectory("flink-sql-" + query + "-");
    Configuration conf = new Configuration();
    conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism);
    conf.set(CoreOptions.TMP_DIRS, tmp.resolve("io").toString());
    conf.set(TableConfigOptions.LOCAL_TIME_ZONE, "UTC");
    conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
    if (!batch) {
      conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(checkpointMs));
      conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
      conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve("checkpoints").toUri().toString());
    }
    EnvironmentSettings.Builder settings = EnvironmentSettings.newInstance().withConfiguration(conf);
    TableEnvironment tEnv =
        TableEnvironment.create((batch ? settings.inBatchMode() : settings.inStreamingMode()).build());
    tEnv.createTemporarySystemFunction("count_char", CountChar.class);

    String guarantee = batch ? "at-least-once" : "exactly-once";
    String common = "  'topic' = '" + outTopic + "',\n"
        + "  'properties.bootstrap.servers' = '" + brokers + "',\n"
        + "  'properties.transaction.timeout.ms' = '600000',\n"
        + "  'sink.delivery-guarantee' = '" + guarantee + "',\n"
        + "  'sink.transactional-id-prefix' = '" + group + "'";
    String kafkaSink = "  'connector' = 'kafka',\n" + common + ",\n"
        + "  'format' = 'json',\n  'json.timestamp-format.standard' = 'ISO-8601'";
    String upsertSink = "  'connector' = 'upsert-kafka',\n" + common + ",\n"
        + "  'key.format' = 'json',\n  'key.json.timestamp-format.standard' = 'ISO-8601',\n"
        + "  'value.format' = 'json',\n  'value.json.timestamp-format.standard' = 'ISO-8601'";

    String text = Files.readString(sqlFile, StandardCharsets.UTF_8)
        .replace("${KAFKA_SINK}", kafkaSink)
        .replace("${UPSERT_SINK}", upsertSink)
        .replace("${TOPIC_PREFIX}", prefix)
        .replace("${BROKERS}", brokers);
    List<String> stmts = new ArrayList<>(ddl(prefix, brokers, group));
    stmts.addAll(statements(text));
    System.err.printf("flink-sql: query=%s mode=%s parallelism=%d checkpoint=%s prefix=%s out=%s tmp=%s%n",
        query, batch ? "BATCH" : "STREAMING", parallelism, batch ? "none" : checkpointMs + "ms",
        prefix, outTopic, tmp);

    int exit = 0;
    TableResult insert = null;
    try {
      for (String s : stmts) {
        Matcher set = SET.matcher(s.strip());
        if (set.matches()) {
          tEnv.getConfig().set(set.group(1), set.group(2));
          System.err.printf("flink-sql: set %s = %s%n", set.group(1), set.group(2));
        } else if (s.strip().toUpperCase().startsWith("INSERT")) {
          insert = tEnv.executeSql(s);
        } else {
          tEnv.executeSql(s);
        }
      }
    } catch (Exception e) {
      // Validation and planning happen in executeSql, before any job runs.
      System.err.println("flink-sql: UNSUPPORTED: " + oneLine(e));
      e.printStackTrace();
      System.exit(3);
    }
    if (insert == null) {
      System.err.println("flink-sql: no INSERT in " + sqlFile);
      System.exit(2);
    }
    try {
      JobExecutionResult r = insert.getJobClient().orElseThrow().getJobExecutionResult().get();
      System.err.printf("flink-sql: job finished in %d ms%n", r.getNetRuntime());
    } catch (Exception e) {
      System.err.println("flink-sql: job failed: " + oneLine(e));
      e.printStackTrace();
      exit = 1;
    }
    System.exit(exit);
  }

  /** The exception's chain of messages on one line (the root cause last). */
  static String oneLine(Throwable e) {
    StringBuilder b = new StringBuilder();
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (b.length() > 0) {
        b.append(" <- ");
      }
      b.append(t.getClass().getSimpleName()).append(": ")
          .append(String.valueOf(t.getMessage()).replace('\n', ' '));
      if (t.getCause() == t) {
        break;
      }
    }
    return b.toString();
  }
}
