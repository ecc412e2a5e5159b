package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/configs"
)

// TestRunBounded runs a windowed pipeline as a batch job (sluice run --bounded) over an
// in-process broker: input written in transactions (so the end offsets lie after commit
// markers), tumbling windows with emit: final. The run must exit by itself, having emitted
// exactly one final per (key, window), including the windows the watermark had not closed (the
// end of input closes them all). A second bounded run over unchanged input exits and emits
// nothing new; after more input, a third one emits the new windows' finals only.
func TestRunBounded(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// 3 partitions, 30 keys, event times over 5 minutes: 1-minute windows.
	const base = int64(1_767_225_600_000)
	want := map[string][2]int64{} // "key@start" -> {sum, count}
	produce := func(from, n int) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(fmt.Sprintf("in-%d", from)), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := from; i < from+n; i++ {
			key := fmt.Sprintf("c-%d", i%30)
			ts := base + int64(i)*100
			amount := int64(i%7 + 1)
			start := ts - ts%60_000
			w := want[fmt.Sprintf("%s@%d", key, start)]
			want[fmt.Sprintf("%s@%d", key, start)] = [2]int64{w[0] + amount, w[1] + 1}
			r := &kgo.Record{Topic: "orders", Key: []byte(key), Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%d,"ts":%d}`, key, amount, ts)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 3000) // 5 minutes of event time

	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: batch
instance_id: i-0
processing: {commit_interval: 50ms, state_dir: %s}
backlog: {enter_lag: 100, exit_lag: 10, progress_interval: 0s}
http: {listen: "off"}
sources:
  orders: {topic: orders, key: customer_id, timestamp: ts}
operators:
  - name: per_minute
    aggregate:
      input: orders
      window: {tumbling: 1m}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
sinks:
  out: {topic: minute-totals}
`, brokers[0], filepath.Join(t.TempDir(), "state"))
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func() {
		t.Helper()
		runBounded(ctx, t, cfg)
	}
	// The sink read back to its end offsets (read_committed, workload.ReadEach): a reader that
	// stopped after a few empty polls missed partitions not fetched yet on a loaded machine.
	finals := func() map[string][2]int64 {
		t.Helper()
		got := map[string][2]int64{}
		err := workload.ReadEach(ctx, brokers, "minute-totals", func(r *kgo.Record) error {
			var v struct {
				Key         string `json:"key"`
				WindowStart int64  `json:"window_start"`
				Amount      int64  `json:"amount"`
				Orders      int64  `json:"orders"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				return fmt.Errorf("output %s: %w", r.Value, err)
			}
			k := fmt.Sprintf("%s@%d", v.Key, v.WindowStart)
			if _, dup := got[k]; dup {
				t.Errorf("window %s emitted twice", k)
			}
			got[k] = [2]int64{v.Amount, v.Orders}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	check := func(what string) {
		t.Helper()
		got := finals()
		if len(got) != len(want) {
			t.Errorf("%s: %d finals, want %d", what, len(got), len(want))
		}
		var bad []string
		for k, w := range want {
			if got[k] != w {
				bad = append(bad, fmt.Sprintf("%s: got %v want %v", k, got[k], w))
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s: %d windows wrong, e.g. %s", what, len(bad), bad[0])
		}
	}
	run()
	check("first run")
	run()
	check("second run over unchanged input")
	produce(3000, 600) // one more minute, later in event time
	run()
	check("third run after more input")
}

// TestRunBoundedCogroup runs a cogroup of two co-partitioned topics as a batch job: the run
// ends once both inputs of every task reached their end offsets, with every customer's balance
// exact on both sides; a second run over unchanged input emits nothing. Windowed (one-hour
// tumbling windows, emit final, every order in the first hour), the finals exist only because
// the end of both inputs closes the window; with session windows (a one-hour gap: every
// customer's orders and refunds, seconds apart, are one session, whose final is the balance), only
// because the end of both inputs closes the sessions.
func TestRunBoundedCogroup(t *testing.T) {
	t.Run("unwindowed", func(t *testing.T) { boundedCogroup(t, "") })
	t.Run("windowed", func(t *testing.T) { boundedCogroup(t, "      window: {tumbling: 1h}\n      emit: final\n") })
	t.Run("sessions", func(t *testing.T) { boundedCogroup(t, "      window: {session: 1h}\n      emit: final\n") })
}

func boundedCogroup(t *testing.T, window string) {
	_, brokers, ctx := fakeCluster(t, "orders", "refunds")
	orders := workload.Spec{Records: 20_000, Keys: 500, Partitions: 3, Seed: 1}
	refunds := workload.Spec{Records: 5_000, Keys: 500, Partitions: 3, Seed: 2}
	produceSpecs(ctx, t, brokers, []string{"orders", "refunds"}, orders, refunds)
	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: batch
instance_id: i-0
processing: {commit_interval: 50ms, state_dir: %s}
backlog: {enter_lag: 100, exit_lag: 10, progress_interval: 0s}
http: {listen: "off"}
`, brokers[0], filepath.Join(t.TempDir(), "state")) +
		strings.Replace(workload.CogroupPipeline("orders", "refunds", "balances"), "      fields:\n", window+"      fields:\n", 1)
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func() {
		t.Helper()
		runBounded(ctx, t, cfg)
	}
	outputs := func() int64 {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "balances")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	run()
	got, _, err := workload.ReadCogroup(ctx, brokers, "balances")
	if err != nil {
		t.Fatal(err)
	}
	if d := workload.Diff(workload.ExpectedCogroup(orders, refunds), got, 10); d != nil {
		t.Fatalf("balances after the bounded run differ:\n%s", strings.Join(d, "\n"))
	}
	before := outputs()
	run()
	if after := outputs(); after != before {
		t.Fatalf("a second bounded run over unchanged input wrote %d more records to the sink (offsets %d → %d)", after-before, before, after)
	}
}

// runBounded runs cfg's pipeline with --bounded and fails t unless it exits by itself, without
// error, before ctx ends.
func runBounded(ctx context.Context, t *testing.T, cfg *configs.Config) {
	t.Helper()
	var w io.Writer = io.Discard
	if testing.Verbose() {
		w = tlog{t}
	}
	log := slog.New(slog.NewTextHandler(w, nil))
	done := make(chan error, 1)
	go func() { done <- runPipeline(ctx, cfg, log, runOpts{bounded: true}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bounded run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the bounded run did not exit by itself")
	}
}

// TestRunBoundedStages runs a pipeline of three stages as a batch job: hourly totals per
// customer (tumbling windows, emit: final) feed, through the aggregate's output topic, a
// re-keying aggregate (group_by, through its repartition topic) that totals them per customer.
// Each internal topic ends once the stage writing it has finished, so the run exits by itself
// with every customer's total exact: every order is in exactly one final, all of which the end
// of input closes. A second run over unchanged input writes nothing new.
func TestRunBoundedStages(t *testing.T) { runBoundedStages(t, nil, 20_000) }

// TestRunBoundedStagesEmpty is TestRunBoundedStages over an empty input: no stage writes a
// record, each internal topic ends at offset 0, and the run must still exit by itself (it
// waited for ever once: an end at offset 0 was taken for no end).
func TestRunBoundedStagesEmpty(t *testing.T) { runBoundedStages(t, nil, 0) }

// TestRunBoundedStagesAborts is TestRunBoundedStages with checkpoints that abort: sluice's k-th
// produce request (outputs, internal topics, changelogs) is refused with a non-retriable error, for k at several points of the run (before, around and after a stage's
// end). The aborted checkpoint rewinds the tasks, which end their inputs again; every internal
// topic must still end once its writers are done, and the run exit by itself with exact totals.
func TestRunBoundedStagesAborts(t *testing.T) {
	for k := 1; k <= 9; k++ {
		t.Run(fmt.Sprintf("refuse=%d", k), func(t *testing.T) {
			runBoundedStages(t, func(c *kfake.Cluster) {
				var mu sync.Mutex
				n, refused := 0, 0
				c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
					mu.Lock()
					defer mu.Unlock()
					c.KeepControl()
					r := req.(*kmsg.ProduceRequest)
					if r.TransactionID == nil { // the test's own input, not sluice's
						return nil, nil, false
					}
					if n++; n != k {
						return nil, nil, false
					}
					refused++
					resp := r.ResponseKind().(*kmsg.ProduceResponse)
					for _, tp := range r.Topics {
						rt := kmsg.NewProduceResponseTopic()
						rt.Topic = tp.Topic
						for _, p := range tp.Partitions {
							rp := kmsg.NewProduceResponseTopicPartition()
							rp.Partition = p.Partition
							rp.ErrorCode = kerr.InvalidRecord.Code
							rt.Partitions = append(rt.Partitions, rp)
						}
						resp.Topics = append(resp.Topics, rt)
					}
					return resp, nil, true
				})
				t.Cleanup(func() {
					mu.Lock()
					defer mu.Unlock()
					t.Logf("sluice's produce requests %d, refused %d", n, refused)
				})
			}, 20_000)
		})
	}
}

// runBoundedStages is TestRunBoundedStages over that many orders, with inject (if not nil)
// applied to its cluster before the runs.
func runBoundedStages(t *testing.T, inject func(*kfake.Cluster), records int64) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := workload.Spec{Records: records, Keys: 500, Partitions: 3, Seed: 3, Span: 6 * time.Hour}
	cl, err := kgo.NewClient(append(workload.ProducerOpts(), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := workload.Produce(ctx, cl, "orders", s); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: stages
instance_id: i-0
processing: {commit_interval: 50ms, state_dir: %s}
backlog: {enter_lag: 100, exit_lag: 10, progress_interval: 0s}
http: {listen: "off"}
sources:
  orders: {topic: orders, key: customer_id, timestamp: ts}
operators:
  - name: hourly
    aggregate:
      input: orders
      window: {tumbling: 1h}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: hourly_out
  - name: totals
    aggregate:
      input: hourly
      group_by: key
      fields: {amount: {sum: amount}, orders: {sum: orders}, hours: {count: {}}}
    output: out
sinks:
  hourly_out: {topic: hourly}
  out: {topic: totals}
`, brokers[0], filepath.Join(t.TempDir(), "state"))
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if inject != nil {
		inject(c)
	}
	runBounded(ctx, t, cfg)
	got, err := workload.ReadTotals(ctx, brokers, "totals", "amount", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if d := workload.Diff(s.Expected(), got, 10); d != nil {
		t.Fatalf("totals after the bounded run differ:\n%s", strings.Join(d, "\n"))
	}
	finals, problems, err := workload.ReadWindows(ctx, brokers, "hourly", "amount", "orders", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("hourly finals:\n%s", strings.Join(problems, "\n"))
	}
	if d := workload.Diff(s.ExpectedWindows(time.Hour), finals, 10); d != nil {
		t.Fatalf("hourly finals differ:\n%s", strings.Join(d, "\n"))
	}
	adm := kadm.NewClient(cl)
	ends := func() int64 {
		t.Helper()
		o, err := adm.ListEndOffsets(ctx, "totals", "hourly")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		o.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	before := ends()
	runBounded(ctx, t, cfg)
	if after := ends(); after != before {
		t.Fatalf("a second bounded run over unchanged input wrote %d more records (offsets %d → %d)", after-before, before, after)
	}
}

// fakeCluster starts a kfake cluster of one broker holding topics (3 partitions each), stopped
// when t ends, and returns its addresses and a context that ends after 2 minutes.
func fakeCluster(t *testing.T, topics ...string) (*kfake.Cluster, []string, context.Context) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c, c.ListenAddrs(), ctx
}

// produceSpecs writes each workload spec to its topic (topics[i] gets specs[i]).
func produceSpecs(ctx context.Context, t *testing.T, brokers []string, topics []string, specs ...workload.Spec) {
	t.Helper()
	cl, err := kgo.NewClient(append(workload.ProducerOpts(), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, s := range specs {
		if err := workload.Produce(ctx, cl, topics[i], s); err != nil {
			t.Fatal(err)
		}
	}
}

// tlog writes a run's log to the test's (go test -v).
type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// TestRunBoundedCoordinatorNotReady starts a bounded run on a broker whose group coordinator is
// not available yet (a broker that just started, creating its offsets topic): its first answers
// to the group's offset fetch are COORDINATOR_NOT_AVAILABLE. The run must wait that out (the
// error is retriable) and finish with every total exact, not exit 1.
func TestRunBoundedCoordinatorNotReady(t *testing.T) {
	c, brokers, ctx := fakeCluster(t, "orders")
	s := workload.Spec{Records: 5_000, Keys: 200, Partitions: 3, Seed: 4}
	produceSpecs(ctx, t, brokers, []string{"orders"}, s)
	// The first refusals: every offset fetch of the group, whichever client sends it.
	var mu sync.Mutex
	refused := 0
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if refused >= 12 {
			return nil, nil, false
		}
		c.KeepControl()
		refused++
		r := req.(*kmsg.OffsetFetchRequest)
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		code := kerr.CoordinatorNotAvailable.Code
		resp.ErrorCode = code
		for _, g := range r.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: fresh
instance_id: i-0
processing: {commit_interval: 50ms, state_dir: %s}
backlog: {enter_lag: 100, exit_lag: 10, progress_interval: 0s}
http: {listen: "off"}
sources:
  orders: {topic: orders, key: customer_id, timestamp: ts}
operators:
  - name: totals
    aggregate:
      input: orders
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
sinks:
  out: {topic: totals}
`, brokers[0], filepath.Join(t.TempDir(), "state"))
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	runBounded(ctx, t, cfg)
	mu.Lock()
	if refused == 0 {
		t.Error("no offset fetch was refused: the test checks nothing")
	}
	mu.Unlock()
	got, err := workload.ReadTotals(ctx, brokers, "totals", "amount", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if d := workload.Diff(s.Expected(), got, 10); d != nil {
		t.Fatalf("totals after the bounded run differ:\n%s", strings.Join(d, "\n"))
	}
}

// TestRunBoundedFinalsTopIdle runs Nexmark q5's shape as a batch job over 4 partitions of
// which 2 are idle (no record at all): hopping counts per customer (emit: final), re-keyed by
// window to a top with ties (the customers at their window's highest count). The counts' task
// filters its finals for the top as it writes them (processing.combine_before_rekey), each
// task writing them to every partition of the counts' output topic, and the idle tasks writing
// none. The answer must be the one computed here from the orders, with the filter and without
// it, and the filter must have kept fewer finals from the topic.
func TestRunBoundedFinalsTopIdle(t *testing.T) {
	_, brokers, ctx := fakeCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "bids"); err != nil {
		t.Fatal(err)
	}
	// 40 customers, each in partition 0 or 2 (its own, always); 6000 bids over 60 s of event
	// time, some out of order by up to 0.8 s.
	const base, hop, size = int64(1_767_225_600_000), int64(2_000), int64(10_000)
	counts := map[int64]map[string]int{} // window start -> customer -> bids
	for i := range 6000 {
		c := (i*7 + i/13) % 40
		ts := base + int64(i)*10 - int64(i%5)*200
		key := fmt.Sprintf("c-%d", c)
		r := &kgo.Record{Topic: "bids", Partition: int32(2 * (c % 2)), Key: []byte(key),
			Value: fmt.Appendf(nil, `{"customer":%q,"price":%d,"ts":%d}`, key, i%97, ts)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for start := ts - ts%hop; start > ts-size; start -= hop {
			if counts[start] == nil {
				counts[start] = map[string]int{}
			}
			counts[start][key]++
		}
	}
	var want []string
	for start, per := range counts {
		best := 0
		for _, n := range per {
			best = max(best, n)
		}
		for c, n := range per {
			if n == best {
				want = append(want, fmt.Sprintf("%d %s %d", start, c, n))
			}
		}
	}
	sort.Strings(want)
	run := func(group string, combine bool) []string {
		t.Helper()
		doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: %s
instance_id: i-0
processing: {commit_interval: 50ms, state_dir: %s, combine_before_rekey: %t}
backlog: {enter_lag: 100, exit_lag: 10, progress_interval: 0s}
http: {listen: "off"}
sources:
  bids: {topic: bids, key: customer, timestamp: ts, watermark: {max_delay: 2s}}
operators:
  - name: counts
    aggregate:
      input: bids
      window: {hopping: 10s, advance: 2s}
      emit: final
      fields: {n: {count: {}}}
  - name: counted
    map: {input: counts, select: [{customer: key}, n, window_start]}
  - name: hottest
    top: {input: counted, by: n, n: 1, ties: true, group_by: window_start, window: {tumbling: 2s}}
  - name: columns
    map: {input: hottest, select: [customer, n, window_start]}
    output: out
sinks:
  out: {topic: %s-out}
`, brokers[0], group, filepath.Join(t.TempDir(), "state"), combine, group)
		cfg, err := configs.Parse([]byte(doc), nil)
		if err != nil {
			t.Fatal(err)
		}
		runBounded(ctx, t, cfg)
		var got []string
		err = workload.ReadEach(ctx, brokers, group+"-out", func(r *kgo.Record) error {
			var v struct {
				Customer    string `json:"customer"`
				N           int    `json:"n"`
				WindowStart int64  `json:"window_start"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				return fmt.Errorf("output %s: %w", r.Value, err)
			}
			got = append(got, fmt.Sprintf("%d %s %d", v.WindowStart, v.Customer, v.N))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		return got
	}
	finals := func(group string) int64 {
		t.Helper()
		o, err := adm.ListEndOffsets(ctx, group+"-counts-output")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		o.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	for _, c := range []struct {
		group   string
		combine bool
	}{{"filtered", true}, {"whole", false}} {
		if got := run(c.group, c.combine); !slices.Equal(got, want) {
			t.Errorf("%s: %d rows, want %d:\n%s", c.group, len(got), len(want), strings.Join(diffRows(want, got), "\n"))
		}
	}
	// Records in the counts' output topic (with markers and announcements): about 0.55 of
	// them pass the filter here (a window's finals come in key order, each task's through 4
	// partitions; one that a final before it through the same partition beats is dropped).
	if f, w := finals("filtered"), finals("whole"); f*4 >= w*3 {
		t.Errorf("the counts' filter let %d records through to the top, against %d without it", f, w)
	}
}

// diffRows returns up to 10 rows of want missing from got ("-") and of got not in want ("+").
func diffRows(want, got []string) []string {
	var out []string
	in := func(s []string, x string) bool { _, ok := slices.BinarySearch(s, x); return ok }
	for _, w := range want {
		if !in(got, w) && len(out) < 10 {
			out = append(out, "- "+w)
		}
	}
	for _, g := range got {
		if !in(want, g) && len(out) < 10 {
			out = append(out, "+ "+g)
		}
	}
	return out
}
