package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestCogroupExactlyOnceKill9 co-groups orders and refunds (two co-partitioned topics) per
// customer on the real broker: one instance killed during the backlog, then three with more
// input arriving and a kill -9 in real time; every customer's spent/orders and
// refunded/refunds must be exact.
func TestCogroupExactlyOnceKill9(t *testing.T) {
	cogroupScenario(t, kafkatest.Brokers(t), 100_000, 5_000)
}

// TestCogroupExactlyOnceKill9Fake is the scenario on the in-process kfake cluster.
func TestCogroupExactlyOnceKill9Fake(t *testing.T) {
	cogroupScenario(t, kafkatest.Fake(t, 8), 30_000, 2_000)
}

func cogroupScenario(t *testing.T, brokers string, records int64, keys int) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	const parts = 8
	p, refunds := twoInputPipeline(t, brokers, parts, "refunds", "balances", ", cache_keys: 500", func(orders, refunds, sink string) string {
		return fmt.Sprintf(`sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
  refunds: {topic: %s, key: customer_id, timestamp: ts}
operators:
  - name: balance
    cogroup:
      inputs: [orders, refunds]
      fields:
        spent: {sum: amount, from: orders}
        orders: {count: {}, from: orders}
        refunded: {sum: amount, from: refunds}
        refunds: {count: {}, from: refunds}
    output: out
sinks:
  out: {topic: %s}
`, orders, refunds, sink)
	})
	ordersA := workload.Spec{Records: records, Keys: keys, Partitions: parts, Seed: 51}
	refundsA := workload.Spec{Records: records / 2, Keys: keys, Partitions: parts, Seed: 52}
	cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
	if err := workload.Produce(ctx, cl, p.topic, ordersA); err != nil {
		t.Fatal(err)
	}
	if err := workload.Produce(ctx, cl, refunds, refundsA); err != nil {
		t.Fatal(err)
	}
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true), p.newInstance("i2", true)}
	ins[0].start()
	poll(ctx, t, "i0 to sort a backlog", 5*time.Millisecond, func() (bool, error) {
		ins[0].checkAlive()
		return len(ins[0].logLines(ins[0].runs, "task starts in backlog mode"))+len(ins[0].logLines(ins[0].runs, "switch to backlog mode")) > 0, nil
	})
	time.Sleep(20 * time.Millisecond) // into the backlog
	ins[0].kill()
	t.Log("kill -9 during the backlog")
	for _, in := range ins {
		in.start()
	}
	ordersB := workload.Spec{Records: records / 4, Keys: keys, Partitions: parts, Seed: 53}
	refundsB := workload.Spec{Records: records / 8, Keys: keys, Partitions: parts, Seed: 54}
	if err := workload.Produce(ctx, cl, p.topic, ordersB); err != nil {
		t.Fatal(err)
	}
	if err := workload.Produce(ctx, cl, refunds, refundsB); err != nil {
		t.Fatal(err)
	}
	waitBoth := func(within time.Duration) { p.waitInputsCommitted(ctx, within, ins, p.topic, refunds) }
	waitBoth(90 * time.Second)
	ins[2].kill()
	t.Log("kill -9 in real time")
	ins[2].start()
	waitBoth(60 * time.Second)
	for _, in := range ins {
		in.term()
	}
	p.checkTransactions(ctx, "i0", "i1", "i2")
	brs := kafkatest.SplitBrokers(brokers)
	for _, side := range []struct {
		sum, count string
		specs      []workload.Spec
	}{{"spent", "orders", []workload.Spec{ordersA, ordersB}}, {"refunded", "refunds", []workload.Spec{refundsA, refundsB}}} {
		got, err := workload.ReadTotals(ctx, brs, p.sink, side.sum, side.count)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range got {
			if v.Count == 0 && v.SumCents == 0 {
				delete(got, k) // a customer with records of the other input only
			}
		}
		want := sum(side.specs...)
		if d := workload.Diff(want, got, 20); d != nil {
			t.Fatalf("%s/%s differ (%d keys expected, %d read):\n%s", side.sum, side.count, len(want), len(got), strings.Join(d, "\n"))
		}
		t.Logf("%s and %s exact for %d customers", side.sum, side.count, len(want))
	}
}

// committedAll reports whether group has committed every partition of topics to its end.
func committedAll(ctx context.Context, adm *kadm.Client, group string, topics ...string) bool {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil {
		return false
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil || committed.Error() != nil {
		return false
	}
	ok := true
	ends.Each(func(lo kadm.ListedOffset) {
		c, found := committed.Lookup(lo.Topic, lo.Partition)
		if lo.Offset > 0 && (!found || c.At < lo.Offset) {
			ok = false
		}
	})
	return ok
}
