package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestBranchesFake runs three operators reading one input on the in-process broker: a plain
// aggregate, tumbling windows with emit: final, and a filter whose records go straight to a
// sink. While the aggregates sort their backlog, the filter's outputs are committed with its
// own progress (the offset stays at the aggregates'); after a kill -9 during the backlog and
// a restart, each branch resumes where it left off: every total exact, every final and every
// big order exactly once.
func TestBranchesFake(t *testing.T) {
	branchesScenario(t, kafkatest.Fake(t, 4), 200_000, 3_000)
}

// TestBranchesKill9 is TestBranchesFake on the real broker, with two kills.
func TestBranchesKill9(t *testing.T) {
	branchesScenario(t, kafkatest.Brokers(t), 200_000, 10_000)
}

// bigOrder is the filter's threshold in cents.
const bigOrder = 50_000

func branchesScenario(t *testing.T, brokers string, records int64, keys int) {
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	const parts = 4
	s := workload.Spec{Records: records, Keys: keys, Partitions: parts, Seed: 61, Span: 6 * time.Hour}
	p := &pipeline{
		t: t, brokers: brokers,
		topic:   kafkatest.UniqueName(t, "orders"),
		sink:    kafkatest.UniqueName(t, "totals"),
		group:   kafkatest.UniqueName(t, "g"),
		cfgPath: filepath.Join(t.TempDir(), "sluice.yaml"),
		nudged:  map[string]workload.Total{},
	}
	hourly, big := p.sink+"-hourly", p.sink+"-big"
	kafkatest.CreateTopic(t, brokers, p.topic, parts, nil)
	cfg := fmt.Sprintf(`# written by the e2e test %s
kafka:
  brokers: [%s]
group: %s
instance_id: unset
processing: {guarantee: exactly_once, commit_interval: 20ms, state_dir: ./unset}
backlog: {enter_lag: 5000, exit_lag: 500, sort_memory: 64MiB, mode: auto}
http: {listen: "off"}
log: {level: info, format: json}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
operators:
  - name: totals
    aggregate:
      input: orders
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: totals
  - name: hourly
    aggregate:
      input: orders
      window: {tumbling: 1h}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: hourly
  - name: big
    filter:
      input: orders
      expr: amount * 100 >= %d
    output: big
sinks:
  totals: {topic: %s}
  hourly: {topic: %s}
  big: {topic: %s}
`, t.Name(), strings.Join(kafkatest.SplitBrokers(brokers), ", "), p.group, p.topic, bigOrder, p.sink, hourly, big)
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.produce(ctx, s); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
	// One record per partition two hours past the last order closes every order's window.
	if err := workload.ProduceClosers(ctx, cl, p.topic, s, s.MaxTS()+2*time.Hour.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	in := p.newInstance("i0", true)
	adm := p.admin()
	// ahead reports whether a commit left the filter ahead of the topic's offset (the
	// aggregates still sorting their backlog): the offsets' metadata carries its progress.
	// A commit of this run, not the last one's: the metadata differs from what it was.
	progress := func() string {
		rs, err := adm.FetchOffsets(ctx, p.group)
		if err != nil {
			return "" // no group yet
		}
		var ms []string
		rs.Each(func(o kadm.OffsetResponse) {
			if strings.HasPrefix(o.Metadata, "sluice-progress:") {
				ms = append(ms, fmt.Sprintf("%d:%s", o.Partition, o.Metadata))
			}
		})
		slices.Sort(ms)
		return strings.Join(ms, " ")
	}
	for kill := range 2 {
		before := progress()
		in.start()
		poll(ctx, t, "a commit with the filter ahead of the aggregates' backlog", time.Millisecond, func() (bool, error) {
			in.checkAlive()
			now := progress()
			return now != "" && now != before, nil
		})
		in.kill()
		t.Logf("kill -9 %d during the backlog, the filter's progress committed ahead of the offset", kill+1)
	}
	in.start()
	want := s.Expected()
	for p := range s.Partitions { // the closers count as orders of their own keys
		want[string(workload.CloserKey(p, s.Partitions))] = workload.Total{SumCents: 1, Count: 1}
	}
	pollf(ctx, t, func() string { return "the totals to be exact" }, 500*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		got, err := workload.ReadTotals(ctx, kafkatest.SplitBrokers(brokers), p.sink, "amount", "orders")
		if err != nil {
			return false, err
		}
		return workload.Diff(want, got, 5) == nil, nil
	})
	p.waitCommitted(ctx, 60*time.Second, false, in)
	resumed := len(in.logLines(0, "branches resume where each left off"))
	in.term()
	p.checkTransactions(ctx, "i0")

	finals, problems, err := workload.ReadWindows(ctx, kafkatest.SplitBrokers(brokers), hourly, "amount", "orders", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("the hourly finals:\n%s", strings.Join(problems, "\n"))
	}
	if d := workload.Diff(s.ExpectedWindows(time.Hour), finals, 10); d != nil {
		t.Fatalf("the hourly finals:\n%s", strings.Join(d, "\n"))
	}
	// The filter's sink: each big order exactly once.
	wantBig := map[string]bool{}
	if err := s.Each(func(_, value []byte, _ int64) error {
		v, err := fastjson.ParseBytes(value)
		if err != nil {
			return err
		}
		cents, err := workload.ParseCents(v.Get("amount").MarshalTo(nil))
		if err != nil {
			return err
		}
		if cents >= bigOrder {
			wantBig[string(v.GetStringBytes("order_id"))] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	if err := workload.ReadEach(ctx, kafkatest.SplitBrokers(brokers), big, func(r *kgo.Record) error {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			return err
		}
		seen[string(v.GetStringBytes("order_id"))]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var dup, missing, extra int
	for id, n := range seen {
		if !wantBig[id] {
			extra++
		} else if n > 1 {
			dup++
		}
	}
	for id := range wantBig {
		if seen[id] == 0 {
			missing++
		}
	}
	if dup+missing+extra > 0 {
		t.Fatalf("the filter's sink: %d big orders duplicated, %d missing, %d not big (of %d)", dup, missing, extra, len(wantBig))
	}
	t.Logf("%d orders: %d totals exact, %d hourly finals and %d big orders each exactly once; %d task starts resumed branches from their own progress",
		s.Records, len(want), len(finals), len(wantBig), resumed)
}
