-- Nexmark q23, expand bid with person and auction (nexmark-flink queries/q23.sql): a multi-way
-- regular inner join.
CREATE TABLE nexmark_q23 (
  bidder BIGINT, price BIGINT, channel STRING, url STRING, bid_extra STRING,
  person_id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING,
  person_extra STRING,
  itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
  auction_dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT,
  auction_extra STRING
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q23
SELECT bidder, price, channel, url, B.extra,
       P.id, name, emailAddress, creditCard, city, state, P.extra,
       itemName, description, initialBid, reserve, A.`dateTime`, expires, seller, category, A.extra
FROM bid AS B
  JOIN person AS P ON P.id = B.bidder
  JOIN auction AS A ON A.seller = B.bidder;
