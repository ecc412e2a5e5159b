-- Nexmark q7, highest bid (nexmark-flink queries/q7.sql), with a bid's own window [start, end)
-- as sluice's q7 (Nexmark's BETWEEN also takes a bid at exactly the window's end).
CREATE TABLE nexmark_q7 (
  auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra STRING
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q7
SELECT B.auction, B.bidder, B.price, B.`dateTime`, B.extra
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS `dateTime`
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` >= B1.`dateTime` - INTERVAL '10' SECOND AND B.`dateTime` < B1.`dateTime`;
