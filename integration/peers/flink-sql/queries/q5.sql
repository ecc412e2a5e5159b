-- Nexmark q5, hot items (nexmark-flink queries/q5.sql), with the window bounds in the output
-- (as sluice's q5). The maximum per window is a regular aggregate over the window counts, so in
-- STREAMING the join's result is updating: an upsert sink keyed by (auction, window).
CREATE TABLE nexmark_q5 (
  auction BIGINT, num BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3),
  PRIMARY KEY (auction, starttime, endtime) NOT ENFORCED
) WITH (
${UPSERT_SINK}
);
INSERT INTO nexmark_q5
SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime, AuctionBids.endtime
FROM (
  SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
  SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
  FROM (
    SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
  ) AS CountBids
  GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn;
