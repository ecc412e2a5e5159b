package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/consumer"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// This file is the black-box harness of the engine tests: an in-process kfake broker, the
// orders-totals pipeline, a deterministic order generator with its exact expected totals, an
// engine runner, and readers for what users observe (committed output, committed offsets,
// metrics). It uses only the consumer package's public API.

const (
	inputTopic = "orders"
	sinkTopic  = "totals"
	operator   = "totals"
	partitions = 2
)

// newCluster starts a one-broker kfake cluster holding the input topic, closed at cleanup.
func newCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, inputTopic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// pipelineOpts are the settings the tests vary; zero values give a 30ms commit interval and an
// enter_lag no test input reaches (real-time only).
type pipelineOpts struct {
	commitInterval    string
	enterLag, exitLag int64
	catchUp           bool   // processing.commit_on_catch_up
	changelog         string // the aggregate's changelog: topic (""), or output
	groupBy           string // the aggregate's group_by ("": none, the source's key)
	// top: instead of the aggregate, a top of this many orders by amount per customer_id,
	// changelog as changelog says (0: the aggregate).
	top int
}

// newConfig returns the orders-totals pipeline of group "g", instance "i-0": per customer_id,
// the sum of amount and the count of orders, written to sinkTopic.
func newConfig(t *testing.T, brokers []string, o pipelineOpts) *configs.Config {
	t.Helper()
	if o.commitInterval == "" {
		o.commitInterval = "30ms"
	}
	if o.enterLag == 0 {
		o.enterLag, o.exitLag = 1_000_000, 100
	}
	if o.changelog == "" {
		o.changelog = configs.ChangelogOwnTopic
	}
	groupBy := ""
	if o.groupBy != "" {
		groupBy = "\n      group_by: " + o.groupBy
	}
	op := fmt.Sprintf(`aggregate:
      input: orders%s
      fields: {amount: {sum: amount}, orders: {count: {}}}
      changelog: %s`, groupBy, o.changelog)
	if o.top > 0 {
		op = fmt.Sprintf("top: {input: orders, n: %d, by: amount, changelog: %s}", o.top, o.changelog)
	}
	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: g
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: %s, commit_on_catch_up: %t, state_dir: %q}
backlog: {enter_lag: %d, exit_lag: %d, sort_memory: 4MiB, mode: auto, progress_interval: 0s}
http: {listen: "off"}
sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    %s
    output: totals_out
sinks:
  totals_out: {topic: %s, format: json}
`, strings.Join(brokers, ", "), o.commitInterval, o.catchUp, t.TempDir(), o.enterLag, o.exitLag,
		inputTopic, operator, op, sinkTopic)
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// engine is one consumer.Engine under test with what the test reads back from it.
type engine struct {
	*consumer.Engine
	cfg  *configs.Config
	reg  *prometheus.Registry
	logs *logBuffer
	done chan struct{}
	err  error // Run's result, valid after done
	stop context.CancelFunc
	// partitions is the last count of consumed topic-partitions the engine reported
	// (Options.Partitions; -1 before the first).
	partitions atomic.Int64
}

// newEngine builds an engine over store (nil: a fresh in-memory store) without starting it;
// kafkaOpts go to every client it makes.
func newEngine(t *testing.T, cfg *configs.Config, store state.Store, kafkaOpts ...kgo.Opt) *engine {
	t.Helper()
	plan, err := plan.NewPlan(cfg)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if store == nil {
		store = state.NewMem()
	}
	e := &engine{cfg: cfg, reg: prometheus.NewRegistry(), logs: &logBuffer{}, done: make(chan struct{})}
	e.partitions.Store(-1)
	// A fetch that finds no data waits FetchMaxWait (kgo's default: 5s) before the client sends
	// the next one, and a partition resumed after its restore joins only that next fetch (see
	// TestRestoredPartitionFetchedPromptly). A short wait keeps these tests fast; a caller's
	// own FetchMaxWait comes later and wins.
	kafkaOpts = append([]kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)}, kafkaOpts...)
	e.Engine, err = consumer.New(consumer.Options{
		Config: cfg, Plan: plan, Store: store,
		Budget:     sorter.NewBudget(int64(cfg.Backlog.SortMemory)),
		SortDir:    t.TempDir(),
		Registry:   e.reg,
		Logger:     slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KafkaOpts:  kafkaOpts,
		Partitions: func(n int) { e.partitions.Store(int64(n)) },
	})
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine log (last 100 lines):\n%s", e.logs.tail(100))
		}
	})
	return e
}

// start runs the engine until stopAndWait or the end of the test.
func (e *engine) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	e.stop = cancel
	go func() {
		defer close(e.done)
		e.err = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-e.done
	})
}

// stopAndWait cancels Run's context (a clean shutdown) and returns Run's result.
func (e *engine) stopAndWait(t *testing.T) error {
	t.Helper()
	e.stop()
	select {
	case <-e.done:
		return e.err
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return within 30s of its context's cancellation")
		return nil
	}
}

// stopClean stops the engine and fails the test unless Run returns nil (a cancel that lands
// inside a checkpoint lets it finish: TestCancelDuringCheckpoint).
func (e *engine) stopClean(t *testing.T) {
	t.Helper()
	if err := e.stopAndWait(t); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
}

// failed reports Run's error if it has returned already.
func (e *engine) failed() error {
	select {
	case <-e.done:
		if e.err == nil {
			return fmt.Errorf("Run returned nil before it was stopped")
		}
		return fmt.Errorf("Run failed: %w", e.err)
	default:
		return nil
	}
}

// metric returns the sum of the samples of the counter or gauge name whose labels include
// labels ("k=v" pairs), or 0 if there are none.
func (e *engine) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for _, kv := range labels {
				k, v, _ := strings.Cut(kv, "=")
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// modes returns the mode of every chain of every task, e.g. ["backlog", "real-time"].
func (e *engine) modes() []string {
	var out []string
	for _, st := range e.Status() {
		for _, c := range st.Chains {
			out = append(out, c.Mode)
		}
	}
	return out
}

// logBuffer collects an engine's log. Safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(b.buf.String(), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// orders is a deterministic batch of orders: order i of a batch with seed s is for customer
// c-<(i*7+s) mod keys> with an amount of 0.01 to 100.00.
type orders struct {
	n, keys, seed int
}

// total is a customer's aggregate: amount in cents and order count.
type total struct {
	cents, count int64
}

func (o orders) each(fn func(key string, cents int64, ts int64)) {
	for i := range o.n {
		key := fmt.Sprintf("c-%03d", (i*7+o.seed)%o.keys)
		cents := int64((i*7919+o.seed*31)%10000) + 1
		fn(key, cents, 1_700_000_000_000+int64(o.seed)*1_000_000+int64(i))
	}
}

// value is the JSON value of order i of the batch (produce).
func (o orders) value(i int, key string, cents, ts int64) string {
	return fmt.Sprintf(`{"order_id":"o-%d-%d","customer_id":%q,"amount":%d.%02d,"ts":%d}`, o.seed, i, key, cents/100, cents%100, ts)
}

// expected returns the exact totals of all the given batches together.
func expected(batches ...orders) map[string]total {
	out := map[string]total{}
	for _, o := range batches {
		o.each(func(key string, cents, _ int64) {
			t := out[key]
			t.cents += cents
			t.count++
			out[key] = t
		})
	}
	return out
}

// produce writes the orders to the input topic, keyed by customer (so a customer's orders
// share a partition), and waits until every record is acknowledged.
func produce(t *testing.T, brokers []string, o orders) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(inputTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	o.each(func(key string, cents, ts int64) {
		v := o.value(len(recs), key, cents, ts)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte(v), Timestamp: time.UnixMilli(ts)})
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d orders: %v", o.n, err)
	}
}

// admin returns an admin client closed at cleanup.
func admin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// offsets returns the input's end offsets and the group's committed offsets, per partition
// (a partition without a commit is absent from committed).
func offsets(ctx context.Context, adm *kadm.Client, group string) (ends, committed map[int32]int64, err error) {
	le, err := adm.ListEndOffsets(ctx, inputTopic)
	if err == nil {
		err = le.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets: %w", err)
	}
	fo, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = fo.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("committed offsets: %w", err)
	}
	ends, committed = map[int32]int64{}, map[int32]int64{}
	le.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	fo.Each(func(o kadm.OffsetResponse) {
		if o.Topic == inputTopic {
			committed[o.Partition] = o.At
		}
	})
	return ends, committed, nil
}

// caughtUp reports whether the group has committed every input offset.
func caughtUp(ctx context.Context, adm *kadm.Client, group string) (bool, error) {
	ends, committed, err := offsets(ctx, adm, group)
	if err != nil {
		return false, err
	}
	for p, end := range ends {
		if committed[p] != end {
			return false, nil
		}
	}
	return true, nil
}

// waitFor polls cond every 10ms until it holds, fails, or within passes; what names the
// condition in the failure. Waiting on observable facts is how these tests wait for the engine.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not true after %v", what, within)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: %v", what, t.Context().Err())
		case <-tick.C:
		}
	}
}

// waitCaughtUp waits until the group has committed every input offset, failing early if the
// engine's Run returns.
func waitCaughtUp(t *testing.T, e *engine, adm *kadm.Client) {
	t.Helper()
	waitFor(t, 20*time.Second, "the group to commit every input offset", func() (bool, error) {
		if err := e.failed(); err != nil {
			return false, err
		}
		// Errors are expected while the group forms; keep polling.
		ok, err := caughtUp(t.Context(), adm, e.cfg.Group)
		return ok && err == nil, nil
	})
}

// waitProcessed waits until the engine's tasks have taken n records in (Status.RecordsIn).
func waitProcessed(t *testing.T, e *engine, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d records to be processed (Status.RecordsIn)", n), func() (bool, error) {
		var in int64
		for _, st := range e.Status() {
			for _, ch := range st.Chains {
				in += ch.RecordsIn
			}
		}
		return in == int64(n), e.failed()
	})
}

// readTotals reads the sink with read_committed from its start to its end (once no
// transaction is open on it) and returns the last total per key. Amounts are parsed exactly.
func readTotals(t *testing.T, brokers []string) map[string]total {
	t.Helper()
	out := map[string]total{}
	readSink(t, brokers, func(r *kgo.Record) {
		var v struct {
			Key    string      `json:"key"`
			Amount json.Number `json:"amount"`
			Orders json.Number `json:"orders"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("%s[%d]@%d: %v: %s", sinkTopic, r.Partition, r.Offset, err, r.Value)
		}
		amount, ok := new(big.Rat).SetString(v.Amount.String())
		count, err := v.Orders.Int64()
		if !ok || err != nil || v.Key != string(r.Key) {
			t.Fatalf("%s[%d]@%d: malformed total %s", sinkTopic, r.Partition, r.Offset, r.Value)
		}
		cents := new(big.Rat).Mul(amount, big.NewRat(100, 1))
		if !cents.IsInt() {
			t.Fatalf("%s[%d]@%d: amount %s is not a whole number of cents", sinkTopic, r.Partition, r.Offset, v.Amount)
		}
		out[v.Key] = total{cents: cents.Num().Int64(), count: count}
	})
	return out
}

// readSink reads the sink with read_committed from its start to its end (once no transaction
// is open on it), passing each record to fn in each partition's order.
func readSink(t *testing.T, brokers []string, fn func(r *kgo.Record)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	adm := admin(t, brokers)
	var ends map[int32]int64
	waitFor(t, 20*time.Second, "no open transaction on the sink", func() (bool, error) {
		hwm, err := adm.ListEndOffsets(ctx, sinkTopic)
		if err == nil {
			err = hwm.Error()
		}
		if err != nil {
			return false, err
		}
		lso, err := adm.ListCommittedOffsets(ctx, sinkTopic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return false, err
		}
		ends = map[int32]int64{}
		settled := true
		hwm.Each(func(o kadm.ListedOffset) {
			ends[o.Partition] = o.Offset
			if l, ok := lso.Lookup(sinkTopic, o.Partition); !ok || l.Offset != o.Offset {
				settled = false
			}
		})
		return settled, nil
	})
	want := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			want[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{sinkTopic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", sinkTopic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= ends[r.Partition] {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() || r.Offset >= ends[r.Partition] {
				return
			}
			fn(r)
		})
	}
}

// inputTotals reads the input topic below the given offsets (per partition) and returns the
// exact totals of those orders: what the output must hold when exactly those offsets are
// committed.
func inputTotals(t *testing.T, brokers []string, upTo map[int32]int64) map[string]total {
	t.Helper()
	out := map[string]total{}
	want := map[int32]kgo.Offset{}
	for p, end := range upTo {
		if end > 0 {
			want[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{inputTopic: want}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", inputTopic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= upTo[r.Partition] {
				return
			}
			if r.Offset+1 >= upTo[r.Partition] {
				delete(want, r.Partition)
			}
			var v struct {
				Customer string      `json:"customer_id"`
				Amount   json.Number `json:"amount"`
			}
			amount, ok := new(big.Rat), false
			if json.Unmarshal(r.Value, &v) == nil {
				_, ok = amount.SetString(v.Amount.String())
			}
			if !ok {
				t.Fatalf("%s[%d]@%d: malformed order %s", inputTopic, r.Partition, r.Offset, r.Value)
			}
			cents := amount.Mul(amount, big.NewRat(100, 1))
			tot := out[v.Customer]
			tot.cents += cents.Num().Int64()
			tot.count++
			out[v.Customer] = tot
		})
	}
	return out
}

// checkTotals fails the test unless got equals want exactly, naming up to 10 differences.
func checkTotals(t *testing.T, want, got map[string]total) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			diffs = append(diffs, fmt.Sprintf("%s: got %+v (present %v), want %+v", k, g, ok, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: got %+v, want no output", k, g))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("committed totals differ from the input's (%d keys want, %d got):\n%s", len(want), len(got), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
}
