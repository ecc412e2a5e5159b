package e2e

import (
	"context"
	"fmt"
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
	var hourly, big string
	p := stagedPipeline(t, brokers, parts, "totals", "20ms", func(orders, sink string) string {
		hourly, big = sink+"-hourly", sink+"-big"
		return fmt.Sprintf(`sources:
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
`, orders, bigOrder, sink, hourly, big)
	})
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
	kept, lost, dup := checkKept(ctx, t, brokers, big, bigOrder, nil, s)
	if lost+dup > 0 {
		t.Fatalf("the filter's sink: %d big orders missing, %d duplicated or not big (of %d)", lost, dup, kept)
	}
	t.Logf("%d orders: %d totals exact, %d hourly finals and %d big orders each exactly once; %d task starts resumed branches from their own progress",
		s.Records, len(want), len(finals), kept, resumed)
}

// checkKept reads topic (read_committed), the sink of a filter that keeps the orders of specs
// of at least minCents, and counts, by order id (ids repeat across specs: they are counted),
// the orders it should hold, those missing, and the records beyond them (a duplicate or an
// order it should not have kept).
func checkKept(ctx context.Context, t *testing.T, brokers, topic string, minCents int64, copies []inputCopy, specs ...workload.Spec) (kept, lost, dup int) {
	t.Helper()
	want := map[string]int{}
	for _, c := range copies { // each copy in the input is kept like its original
		cents, err := orderCents(c.value)
		if err != nil {
			t.Fatal(err)
		}
		if cents >= minCents {
			v, _ := fastjson.ParseBytes(c.value)
			want[string(v.GetStringBytes("order_id"))]++
		}
	}
	for _, s := range specs {
		if err := s.Each(func(_, value []byte, _ int64) error {
			v, err := fastjson.ParseBytes(value)
			if err != nil {
				return err
			}
			cents, err := workload.ParseCents(v.Get("amount").MarshalTo(nil))
			if err != nil {
				return err
			}
			if cents >= minCents {
				want[string(v.GetStringBytes("order_id"))]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	if err := workload.ReadEach(ctx, kafkatest.SplitBrokers(brokers), topic, func(r *kgo.Record) error {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			return err
		}
		got[string(v.GetStringBytes("order_id"))]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		kept += w
		lost += max(w-got[id], 0)
		dup += max(got[id]-w, 0)
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			dup += g
		}
	}
	return kept, lost, dup
}
