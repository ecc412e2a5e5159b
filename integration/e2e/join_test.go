package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// The FLIP-326 scenario: a backlog of orders, then the customers table produced after every
// order, all before sluice starts. A stream-table join that did not wait for the table would
// join the early orders against nothing (Kafka Streams' KAFKA-4113); sluice's streams wait
// until each task's table partition has loaded its snapshot, so every order is joined.

// TestJoinWaitsForTableKill9 runs the inner join on the real broker with one then three
// instances and kill -9s while tasks wait for their table, while they stream the backlog and
// in real time, and demands every order exactly once with its customer's row.
//
// SLUICE_TEST_JOIN_ORDERS and SLUICE_TEST_JOIN_ROWS scale it (the size: 1000000 and
// 100000, about two minutes here).
func TestJoinWaitsForTableKill9(t *testing.T) {
	orders, rows := int64(200_000), 50_000
	if v, err := strconv.ParseInt(os.Getenv("SLUICE_TEST_JOIN_ORDERS"), 10, 64); err == nil && v > 0 {
		orders = v
	}
	if v, err := strconv.Atoi(os.Getenv("SLUICE_TEST_JOIN_ROWS")); err == nil && v > 0 {
		rows = v
	}
	joinScenario(t, kafkatest.Brokers(t), orders, rows)
}

// TestJoinWaitsForTableFake is the scenario against the in-process kfake cluster.
func TestJoinWaitsForTableFake(t *testing.T) {
	joinScenario(t, kafkatest.Fake(t, 8), 40_000, 10_000)
}

// joinPipeline writes the join pipeline's config: orders joined with customers; with groupBy,
// the joined orders are summed by customers.region (re-keyed through a repartition topic).
func joinPipeline(t *testing.T, brokers string, parts int32, groupBy bool) (p *pipeline, customers string) {
	p = &pipeline{
		t: t, brokers: brokers,
		topic:   kafkatest.UniqueName(t, "orders"),
		sink:    kafkatest.UniqueName(t, "joined"),
		group:   kafkatest.UniqueName(t, "g"),
		cfgPath: filepath.Join(t.TempDir(), "sluice.yaml"),
		nudged:  map[string]workload.Total{},
	}
	customers = kafkatest.UniqueName(t, "customers")
	kafkatest.CreateTopic(t, brokers, p.topic, parts, nil)
	kafkatest.CreateTopic(t, brokers, customers, parts, map[string]*string{"cleanup.policy": ptr("compact")})
	ops := `  - name: enriched
    join: {stream: orders, table: customers, type: inner}
    output: out
`
	if groupBy {
		// enriched also writes every joined order to its own sink (a tap) while by_region
		// reads it.
		ops = `  - name: enriched
    join: {stream: orders, table: customers, type: inner}
    output: tapped
  - name: by_region
    aggregate:
      input: enriched
      group_by: customers.region
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
`
	}
	cfg := fmt.Sprintf(`# written by the e2e test %s
kafka:
  brokers: [%s]
group: %s
instance_id: unset
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./unset}
backlog: {enter_lag: 5000, exit_lag: 500, sort_memory: 64MiB, mode: auto}
http: {listen: "off"}
log: {level: info, format: json}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
tables:
  customers: {topic: %s, key: customer_id}
operators:
%ssinks:
  out: {topic: %s}
  tapped: {topic: %s}
`, t.Name(), strings.Join(kafkatest.SplitBrokers(brokers), ", "), p.group, p.topic, customers, ops, p.sink, p.sink+"-tapped")
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, customers
}

func ptr(s string) *string { return &s }

func joinScenario(t *testing.T, brokers string, orders int64, keys int) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second+time.Duration(orders/10_000)*time.Second)
	defer cancel()
	const parts = 8
	first := workload.Spec{Records: orders, Keys: keys, Partitions: parts, Seed: 31}
	p, customers := joinPipeline(t, brokers, parts, false)
	if err := p.produce(ctx, first); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
	if err := workload.ProduceEach(ctx, cl, customers, first.EachCustomer); err != nil {
		t.Fatal(err)
	}
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true), p.newInstance("i2", true)}
	waitLog := func(in *instance, msg string) {
		t.Helper()
		poll(ctx, t, fmt.Sprintf("instance %s to log %q", in.id, msg), 5*time.Millisecond, func() (bool, error) {
			in.checkAlive()
			return len(in.logLines(in.runs, msg)) > 0, nil
		})
	}
	// 1: killed while its tasks read their table partitions (the streams wait).
	ins[0].start()
	waitLog(ins[0], "table partition: reading its snapshot before the streams")
	ins[0].kill()
	t.Log("kill -9 while waiting for the table")
	// 2: killed while it streams the backlog of joined orders.
	ins[0].start()
	waitLog(ins[0], "table snapshot loaded; its streams go on")
	time.Sleep(300 * time.Millisecond) // into the backlog; where exactly does not matter
	ins[0].kill()
	t.Log("kill -9 during the backlog")
	// 3: three instances; more orders arrive while they run; one is killed in real time.
	for _, in := range ins {
		in.start()
	}
	second := workload.Spec{Records: orders / 4, Keys: keys, Partitions: parts, Seed: 32}
	if err := p.produce(ctx, second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.waitCommitted(ctx, 90*time.Second+time.Duration(orders/10_000)*time.Second, false, ins...)
	t.Logf("caught up %v after the three instances started", time.Since(start).Round(time.Millisecond))
	ins[1].kill()
	t.Log("kill -9 in real time")
	ins[1].start()
	p.waitCommitted(ctx, 60*time.Second, false, ins...)
	for _, in := range ins {
		in.term()
	}
	p.checkTransactions(ctx, "i0", "i1", "i2")
	j, err := workload.VerifyJoined(ctx, kafkatest.SplitBrokers(brokers), p.sink, "customers", first, second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("join output: %v", j)
	if !j.OK() || j.Orders != first.Records+second.Records {
		t.Fatalf("join output: %v; want each of the %d orders exactly once with its customer's row", j, first.Records+second.Records)
	}
}

// TestJoinGroupByRegionFake sums the joined orders by customers.region: the aggregate re-keys
// them through its repartition topic inside the transactions, and the totals per region must be
// exact after a kill -9 and a restart.
func TestJoinGroupByRegionFake(t *testing.T) {
	joinGroupByScenario(t, kafkatest.Fake(t, 8), 30_000, 3_000)
}

// TestJoinGroupByRegionKill9 is TestJoinGroupByRegionFake on the real broker: the repartition
// topic is written in the same transactions as the orders' offsets, read read_committed by the
// aggregate's chain, and purged.
func TestJoinGroupByRegionKill9(t *testing.T) {
	joinGroupByScenario(t, kafkatest.Brokers(t), 100_000, 10_000)
}

func joinGroupByScenario(t *testing.T, brokers string, records int64, keys int) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	const parts = 4
	s := workload.Spec{Records: records, Keys: keys, Partitions: parts, Seed: 41}
	p, customers := joinPipeline(t, brokers, parts, true)
	if err := p.produce(ctx, s); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
	if err := workload.ProduceEach(ctx, cl, customers, s.EachCustomer); err != nil {
		t.Fatal(err)
	}
	in := p.newInstance("i0", true)
	in.start()
	poll(ctx, t, "the first checkpoint", 5*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		return len(in.logLines(in.runs, "table snapshot loaded; its streams go on")) > 0, nil
	})
	time.Sleep(50 * time.Millisecond) // somewhere in the backlog
	in.kill()
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
	p.verify(ctx, want, "i0")
	// In-band RecordAttributes: the re-keying chain reads a backlog of orders and says so in the
	// repartition topic, so the aggregate reading it switches to backlog on its writers' word.
	upstream := 0
	for _, l := range in.logLines(0, "switch to backlog mode") {
		if up, _ := l["upstream_backlog"].(bool); up {
			upstream++
		}
	}
	if upstream == 0 {
		t.Errorf("no switch to backlog mode on the word of the repartition topic's writers (upstream_backlog=true)")
	}
	t.Logf("%d switches to backlog mode on the writers' word", upstream)
	j, err := workload.VerifyJoined(ctx, kafkatest.SplitBrokers(brokers), p.sink+"-tapped", "customers", s)
	if err != nil {
		t.Fatal(err)
	}
	if !j.OK() || j.Orders != s.Records {
		t.Fatalf("the join's own sink: %v; want each of the %d orders exactly once with its row", j, s.Records)
	}
	t.Logf("the join's own sink: %v", j)
}
