-- Nexmark q13, bounded side input join (nexmark-flink queries/q13.sql): a processing-time
-- temporal join with the side input. Nexmark's side input is a file; here it is the topic
-- nexmark-gen writes (10,000 rows {key, value}), as a Kafka table.
CREATE TABLE side_input (
  `key` BIGINT, `value` STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '${TOPIC_PREFIX}side-input',
  'properties.bootstrap.servers' = '${BROKERS}',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset',
  'format' = 'json'
);
CREATE TABLE nexmark_q13 (
  auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), `value` STRING
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q13
SELECT B.auction, B.bidder, B.price, B.`dateTime`, S.`value`
FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.`key`;
