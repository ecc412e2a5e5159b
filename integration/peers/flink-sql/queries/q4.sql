-- Nexmark q4, average price for a category (nexmark-flink queries/q4.sql): each auction's highest
-- bid while it was open (a regular join, the interval as a filter on the row, MAX per auction),
-- averaged per category over those maxima, which change as bids arrive (retractions): an
-- updating result, an upsert sink keyed by the category. The sink's first column is `id`, as in
-- Nexmark's sink (it holds the category; sluice names it `category`).
-- Beside Nexmark's AVG(final), which Flink computes as SUM / COUNT in BIGINT (truncated toward
-- zero), the same aggregate also writes that SUM and COUNT (final_sum, final_count): sluice's
-- `final` is the exact average rounded half to even to 9 places, and nexmarkcmp checks it against
-- final_sum / final_count divided exactly and rounded the same way, and Flink's own truncated
-- `final` against sluice's truncated. Both are the same group's accumulators AVG keeps anyway.
CREATE TABLE nexmark_q4 (
  id BIGINT, final BIGINT, final_sum BIGINT, final_count BIGINT,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
${UPSERT_SINK}
);
INSERT INTO nexmark_q4
SELECT Q.category, AVG(Q.final), SUM(Q.final), COUNT(Q.final)
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
  GROUP BY A.id, A.category
) Q
GROUP BY Q.category;
