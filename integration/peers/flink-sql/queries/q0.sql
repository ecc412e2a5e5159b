-- Nexmark q0, pass-through (nexmark-flink queries/q0.sql).
CREATE TABLE nexmark_q0 (
  auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra STRING
) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q0 SELECT auction, bidder, price, `dateTime`, extra FROM bid;
