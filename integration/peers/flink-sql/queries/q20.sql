-- Nexmark q20, expand bid with auction (nexmark-flink queries/q20.sql): a regular inner join.
CREATE TABLE nexmark_q20 (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  bid_dateTime TIMESTAMP(3), bid_extra STRING,
  itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
  auction_dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT,
  auction_extra STRING
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q20
SELECT auction, bidder, price, channel, url, B.`dateTime`, B.extra,
       itemName, description, initialBid, reserve, A.`dateTime`, expires, seller, category, A.extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10;
