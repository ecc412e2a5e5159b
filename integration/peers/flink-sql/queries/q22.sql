-- Nexmark q22, get URL directories (nexmark-flink queries/q22.sql).
CREATE TABLE nexmark_q22 (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING,
  dir1 STRING, dir2 STRING, dir3 STRING
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q22
SELECT auction, bidder, price, channel,
  SPLIT_INDEX(url, '/', 3) AS dir1, SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3
FROM bid;
