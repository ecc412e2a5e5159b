-- Nexmark q18, the last bid of each bidder on each auction (nexmark-flink queries/q18.sql): a
-- deduplication keeping the last row, an upsert sink keyed by (bidder, auction).
CREATE TABLE nexmark_q18 (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  `dateTime` TIMESTAMP(3), extra STRING,
  PRIMARY KEY (bidder, auction) NOT ENFORCED
) WITH (
${UPSERT_SINK}
);
INSERT INTO nexmark_q18
SELECT auction, bidder, price, channel, url, `dateTime`, extra
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
  FROM bid
)
WHERE rank_number <= 1;
