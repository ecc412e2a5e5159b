package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestAfterAggregateFake runs operators after an aggregate on the in-process broker: hourly
// totals per customer (tumbling windows, emit: final) go to their own sink and, through the
// aggregate's output topic, to a join with the customers table and a re-keyed total per region.
// After a kill -9 during the backlog and a restart, the hourly finals are each exactly once,
// and the region totals built from them are exact.
func TestAfterAggregateFake(t *testing.T) {
	afterAggregateScenario(t, kafkatest.Fake(t, 4), 30_000, 3_000)
}

// TestAfterAggregateKill9 is TestAfterAggregateFake on the real broker: three transactional
// hops (orders → output topic → repartition topic → sink), each read read_committed.
func TestAfterAggregateKill9(t *testing.T) {
	afterAggregateScenario(t, kafkatest.Brokers(t), 100_000, 10_000)
}

func afterAggregateScenario(t *testing.T, brokers string, records int64, keys int) {
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	const parts = 4
	// Six hours of event time, in order per partition (no late record with max_delay 0).
	s := workload.Spec{Records: records, Keys: keys, Partitions: parts, Seed: 51, Span: 6 * time.Hour}
	customers := kafkatest.UniqueName(t, "customers")
	kafkatest.CreateTopic(t, brokers, customers, parts, map[string]*string{"cleanup.policy": ptr("compact")})
	var hourly string
	p := stagedPipeline(t, brokers, parts, "regions", "100ms", func(orders, sink string) string {
		hourly = sink + "-hourly"
		return fmt.Sprintf(`sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
tables:
  customers: {topic: %s, key: customer_id}
operators:
  - name: hourly
    aggregate:
      input: orders
      window: {tumbling: 1h}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: hourly
  - name: with_region
    join: {stream: hourly, table: customers, type: inner}
  - name: by_region
    aggregate:
      input: with_region
      group_by: customers.region
      fields: {amount: {sum: amount}, orders: {sum: orders}}
    output: out
sinks:
  hourly: {topic: %s}
  out: {topic: %s}
`, orders, customers, hourly, sink)
	})
	if err := p.produce(ctx, s); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
	// One record per partition two hours past the last order closes every order's window.
	if err := workload.ProduceClosers(ctx, cl, p.topic, s, s.MaxTS()+2*time.Hour.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	if err := workload.ProduceEach(ctx, cl, customers, s.EachCustomer); err != nil {
		t.Fatal(err)
	}
	in := p.newInstance("i0", true)
	in.start()
	poll(ctx, t, "the backlog to start", 5*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		return len(in.logLines(in.runs, "table snapshot loaded; its streams go on")) > 0, nil
	})
	time.Sleep(200 * time.Millisecond) // somewhere in the backlog or the switch
	in.kill()
	t.Log("kill -9 during the backlog")
	in.start()
	want := s.RegionTotals()
	pollf(ctx, t, func() string { return "the totals by region to be exact" }, 500*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		got, err := workload.ReadTotals(ctx, kafkatest.SplitBrokers(brokers), p.sink, "amount", "orders")
		if err != nil {
			return false, err
		}
		return workload.Diff(want, got, 5) == nil, nil
	})
	in.term()
	p.checkTransactions(ctx, "i0")
	// In-band RecordAttributes across the hops: the hourly aggregate says it is in backlog in
	// its output topic, the re-keying chain that reads it passes that on in the repartition
	// topic, and by_region switches to backlog on its writers' word.
	upstream := map[string]int{}
	for _, l := range in.logLines(0, "switch to backlog mode") {
		if up, _ := l["upstream_backlog"].(bool); up {
			op, _ := l["operator"].(string)
			upstream[op]++
		}
	}
	t.Logf("switches to backlog mode on the writers' word, by operator: %v", upstream)
	if upstream["by_region"] == 0 {
		t.Errorf("by_region never switched to backlog on its writers' word: the hourly aggregate's backlog did not travel through two internal topics")
	}
	got, err := workload.ReadTotals(ctx, kafkatest.SplitBrokers(brokers), p.sink, "amount", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if d := workload.Diff(want, got, 10); d != nil {
		t.Fatalf("totals by region after the run:\n%s", strings.Join(d, "\n"))
	}
	finals, problems, err := workload.ReadWindows(ctx, kafkatest.SplitBrokers(brokers), hourly, "amount", "orders", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("the hourly sink:\n%s", strings.Join(problems, "\n"))
	}
	if d := workload.Diff(s.ExpectedWindows(time.Hour), finals, 10); d != nil {
		t.Fatalf("the hourly finals:\n%s", strings.Join(d, "\n"))
	}
	t.Logf("%d orders: %d hourly finals each exactly once, %d region totals exact", s.Records, len(finals), len(got))
}
