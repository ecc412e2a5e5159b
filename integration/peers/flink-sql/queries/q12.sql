-- Nexmark q12, processing-time windows (nexmark-flink queries/q12.sql: the view B of the bids
-- with PROCTIME(), counted per bidder in 10 s tumbling windows of it).
CREATE VIEW B AS SELECT *, PROCTIME() AS p_time FROM bid;
CREATE TABLE nexmark_q12 (
  bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q12
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end;
