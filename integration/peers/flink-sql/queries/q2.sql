-- Nexmark q2, selection (nexmark-flink queries/q2.sql).
CREATE TABLE nexmark_q2 (auction BIGINT, price BIGINT) WITH (
${KAFKA_SINK}
);
INSERT INTO nexmark_q2 SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
