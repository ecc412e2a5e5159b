-- Nexmark q15, bidding statistics report per day (nexmark-flink queries/q15.sql): filtered counts
-- and filtered count(distinct) per day, an updating result: an upsert sink keyed by the day.
-- Flink's planner defaults, as for every query here. nexmark-flink's config also enables the
-- two-level split of distinct aggregates and mini-batch (STREAMING only; BATCH ignores both):
-- uncomment the SET lines to run with them (Main applies a file's SET 'key' = 'value'). Measured
-- both ways in BENCHMARKS.md ("Nexmark against Flink SQL: q4, q15, q16"): with them Flink's q15
-- ran faster, its q16 slower; the split alone, without mini-batch, slowed both.
-- SET 'table.optimizer.distinct-agg.split.enabled' = 'true';
-- SET 'table.exec.mini-batch.enabled' = 'true';
-- SET 'table.exec.mini-batch.allow-latency' = '2s';
-- SET 'table.exec.mini-batch.size' = '50000';
CREATE TABLE nexmark_q15 (
  `day` STRING, total_bids BIGINT, rank1_bids BIGINT, rank2_bids BIGINT, rank3_bids BIGINT,
  total_bidders BIGINT, rank1_bidders BIGINT, rank2_bidders BIGINT, rank3_bidders BIGINT,
  total_auctions BIGINT, rank1_auctions BIGINT, rank2_auctions BIGINT, rank3_auctions BIGINT,
  PRIMARY KEY (`day`) NOT ENFORCED
) WITH (
${UPSERT_SINK}
);
INSERT INTO nexmark_q15
SELECT DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
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
GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd');
