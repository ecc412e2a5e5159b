-- Nexmark q16, channel statistics report per (channel, day) (nexmark-flink queries/q16.sql): q15
-- per channel, with the day's latest minute as max(DATE_FORMAT(dateTime, 'HH:mm')), a max over
-- strings; an updating result: an upsert sink keyed by (channel, day). Flink's planner
-- defaults, as in q15.sql; uncomment the SET lines for nexmark-flink's split and mini-batch.
-- SET 'table.optimizer.distinct-agg.split.enabled' = 'true';
-- SET 'table.exec.mini-batch.enabled' = 'true';
-- SET 'table.exec.mini-batch.allow-latency' = '2s';
-- SET 'table.exec.mini-batch.size' = '50000';
CREATE TABLE nexmark_q16 (
  channel STRING, `day` STRING, `minute` STRING,
  total_bids BIGINT, rank1_bids BIGINT, rank2_bids BIGINT, rank3_bids BIGINT,
  total_bidders BIGINT, rank1_bidders BIGINT, rank2_bidders BIGINT, rank3_bidders BIGINT,
  total_auctions BIGINT, rank1_auctions BIGINT, rank2_auctions BIGINT, rank3_auctions BIGINT,
  PRIMARY KEY (channel, `day`) NOT ENFORCED
) WITH (
${UPSERT_SINK}
);
INSERT INTO nexmark_q16
SELECT channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
  max(DATE_FORMAT(`dateTime`, 'HH:mm')) AS `minute`,
  count(*) AS total_bids,
  count(*) FILTER (WHERE price < 10000) AS rank1_bids,
  count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
  count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
  count(DISTINCT bidder) AS total_bidders,
  count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
  count(DISTINCT auction) AS total_auctions,
  count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd');
