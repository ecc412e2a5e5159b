package task

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// This file holds the test harness shared by the task tests: a transactional fake producer, a
// driver that plays the consumer's part (Observe, Process, Checkpoint, Committed/Aborted and the
// rewind after an abort), and an input generator.

const (
	testTopic = "orders"
	testSink  = "customer-totals"
	testOp    = "totals"
	testGroup = "meta"
)

// fakeProducer models one Kafka transaction at a time. Produce copies the record (as a real
// producer serialises it), gives it the next offset of its topic-partition (aborted records
// consume offsets too, as in Kafka) and calls the promise synchronously. commit makes the open
// transaction's records visible in log; abort drops them. Not safe for concurrent use.
type fakeProducer struct {
	next     map[string]int64 // "topic/partition" -> next offset
	txn      []*kgo.Record
	log      []*kgo.Record // committed records, in order
	fail     func(*kgo.Record) error
	onCommit func(txn []*kgo.Record) // called with each committed transaction's records
}

func newFakeProducer() *fakeProducer { return &fakeProducer{next: map[string]int64{}} }

func (p *fakeProducer) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	c := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	if c.Partition < 0 {
		c.Partition = 0
	}
	if p.fail != nil {
		if err := p.fail(c); err != nil {
			promise(r, err)
			return
		}
	}
	tp := c.Topic + "/" + strconv.Itoa(int(c.Partition))
	c.Offset = p.next[tp]
	p.next[tp]++
	p.txn = append(p.txn, c)
	r.Offset, r.Partition = c.Offset, c.Partition
	promise(r, nil)
}

func (p *fakeProducer) commit() {
	if p.onCommit != nil {
		p.onCommit(p.txn)
	}
	p.log = append(p.log, p.txn...)
	p.txn = nil
}

func (p *fakeProducer) abort() { p.txn = nil }

// committed returns the committed records of topic, in order.
func (p *fakeProducer) committed(topic string) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range p.log {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

// lastByKey returns the last committed value per key of topic.
func (p *fakeProducer) lastByKey(topic string) map[string]string {
	m := map[string]string{}
	for _, r := range p.committed(topic) {
		m[string(r.Key)] = string(r.Value)
	}
	return m
}

// testConfig returns the YAML of the test pipeline: one source, one aggregate with every
// aggregate function over amount, one sink.
func testConfig(mode string, enter, exit int64, cacheKeys int) string {
	return testConfigEvery(mode, enter, exit, cacheKeys, "0s")
}

// testHeader is the head of the tests' pipelines: group testGroup, exactly once, a 1 MiB sort
// budget, and the given backlog mode, lags, cache and backlog.checkpoint_interval.
func testHeader(mode string, enter, exit int64, cacheKeys int, every string) string {
	return fmt.Sprintf(`kafka: {brokers: [127.0.0.1:9092]}
group: %s
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: %d, exit_lag: %d, sort_memory: 1MiB, mode: %s, progress_interval: 0s, checkpoint_interval: %s}
`, testGroup, cacheKeys, enter, exit, mode, every)
}

// testConfigEvery is testConfig with backlog.checkpoint_interval (the step clock advances 1ms
// per reading, so "5ms" folds the sorted backlog every few batches).
func testConfigEvery(mode string, enter, exit int64, cacheKeys int, every string) string {
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    aggregate:
      input: orders
      fields:
        total: {sum: amount}
        n: {count: {}}
        lo: {min: amount}
        hi: {max: amount}
        mean: {avg: amount}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, testOp, testSink)
}

// testStatelessConfig is a pipeline without a keyed operator: the orders of more than 10 go
// to testSink, in the given backlog mode (enter_lag 100, exit_lag 10).
func testStatelessConfig(mode string) string {
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id}
operators:
  - name: big
    filter: {input: orders, expr: "amount > 10"}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, 100, 10, 100, "0s"), testTopic, testSink)
}

func mustPlan(t testing.TB, doc string) *plan.Plan {
	t.Helper()
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("configs.Parse: %v\n%s", err, doc)
	}
	p, err := plan.NewPlan(cfg)
	if err != nil {
		t.Fatalf("NewPlan: %v", err)
	}
	return p
}

// stepClock is a deterministic wall clock: every call advances it by one millisecond.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time {
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// newTestTask builds a task of plan for partition 0 over store, with a small sort budget.
func newTestTask(t testing.TB, plan *plan.Plan, store state.Store, budget int64, loaderThreshold int) *Task {
	t.Helper()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	tk, err := New(plan, testTopic, 0, Deps{
		Store:           store,
		Budget:          sorter.NewBudget(budget),
		SortDir:         t.TempDir(),
		Clock:           clk.Now,
		Logger:          discardLogger(),
		LoaderThreshold: loaderThreshold,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(tk.Close)
	return tk
}

// driver plays the consumer for one task: it feeds batches of input, observes lags, runs
// checkpoints (randomly, and whenever the task asks), and aborts some of them, rewinding to the
// offset the task returns as the consumer does.
type driver struct {
	t      testing.TB
	rng    *rand.Rand
	task   *Task
	prod   *fakeProducer
	topic  string // the task's input topic ("": testTopic)
	input  []*kgo.Record
	pos    int   // next input index to feed
	offset int64 // committed input offset (-1: none yet)

	maxBatch  int
	pCkpt     float64 // probability of a checkpoint after a batch
	pAbort    float64 // probability that a checkpoint aborts
	maxAborts int     // at most this many aborts (a backlog commits nothing, so each abort restarts it)
	lag       func(d *driver, end int) int64
	commits   int
	aborts    int
	switchTo  int // checkpoints forced by Observe
	processed int // records passed to Process, re-feeds included
	steps     int
}

func (d *driver) top() string {
	if d.topic == "" {
		return testTopic
	}
	return d.topic
}

func (d *driver) checkpoint(mayAbort bool) (aborted bool) {
	d.t.Helper()
	if d.task.WantsFold() && d.rng.IntN(2) == 0 {
		// The engine folds a switch ahead of the checkpoint (outside its barrier).
		if err := d.task.Prepare(context.Background(), d.prod); err != nil {
			d.t.Fatalf("Prepare: %v", err)
		}
		if d.task.WantsFold() {
			d.t.Fatalf("WantsFold after Prepare")
		}
	}
	pd, err := d.task.Checkpoint(d.prod)
	if err != nil {
		d.t.Fatalf("Checkpoint: %v", err)
	}
	if pd.Err() != nil || (mayAbort && d.aborts < d.maxAborts && d.rng.Float64() < d.pAbort) {
		d.prod.abort()
		seek := d.task.Aborted(pd)
		if off, ok := seek[d.top()]; ok {
			d.pos = int(off)
		} else {
			d.pos = 0 // nothing processed yet: rewind to where consumption started
		}
		d.aborts++
		return true
	}
	d.prod.commit()
	if err := d.task.Committed(pd); err != nil {
		d.t.Fatalf("Committed: %v", err)
	}
	if off, ok := pd.Offsets[d.top()]; ok {
		if off < d.offset {
			d.t.Fatalf("committed offset went back from %d to %d", d.offset, off)
		}
		d.offset = off
	}
	d.commits++
	return false
}

// run feeds the whole input, then observes lag 0 and checkpoints until everything is committed.
// A final checkpoint may still abort (an injected produce error): the driver then re-feeds.
func (d *driver) run() {
	d.t.Helper()
	d.offset = -1
	d.steps = 0
	for !d.step() {
	}
	if d.task.NeedsCheckpoint() {
		d.t.Fatalf("task still needs a checkpoint after the final one")
	}
}

// step feeds one batch (after the attribute records in it are read, as the engine does) and
// may checkpoint, or once the input is all fed, checkpoints; it reports whether everything is
// fed and committed. A driver whose input grows (a reader of another task's outputs) steps
// while it has input to feed, then runs; its offset starts at -1.
func (d *driver) step() (done bool) {
	d.t.Helper()
	d.steps++
	if d.steps > 100*len(d.input)+1000 {
		d.t.Fatalf("driver does not make progress (pos %d of %d, committed %d, %d commits, %d aborts, %d switches, status %+v)", d.pos, len(d.input), d.offset, d.commits, d.aborts, d.switchTo, d.task.Status())
	}
	if d.pos == len(d.input) {
		// Caught up: lag 0 switches a chain in backlog to real-time; then a last checkpoint.
		if d.task.Observe(d.top(), 0, 0) && d.checkpoint(false) {
			return false
		}
		return !d.checkpoint(false)
	}
	end := min(d.pos+1+d.rng.IntN(d.maxBatch), len(d.input))
	d.task.ReadAttributes(d.top(), d.input[d.pos:end])
	if d.task.Observe(d.top(), d.lag(d, end), 0) {
		d.switchTo++
		if d.checkpoint(true) {
			return false // the batch was fetched before the rewind: drop it
		}
	}
	if err := d.task.Process(d.top(), d.input[d.pos:end]); err != nil {
		d.t.Fatalf("Process: %v", err)
	}
	d.processed += end - d.pos
	d.pos = end
	if d.task.NeedsCheckpoint() || d.rng.Float64() < d.pCkpt {
		d.checkpoint(true)
	}
	return false
}

// end tells the task its input ended (a bounded run) and checkpoints until it has nothing left
// to do.
func (d *driver) end() {
	d.t.Helper()
	for guard := 0; ; guard++ {
		if guard > 100 {
			d.t.Fatalf("driver: the end of input does not settle")
		}
		if err := d.task.EndInput(d.top()); err != nil {
			d.t.Fatalf("EndInput: %v", err)
		}
		if d.checkpoint(false) {
			offset := d.offset
			d.run() // aborted: re-feed from the last commit, then end again
			d.offset = max(d.offset, offset)
			continue
		}
		if !d.task.WantsFold() && !d.task.NeedsCheckpoint() {
			return
		}
	}
}

// checkpointTask folds tk's due switch, if any, and checkpoints it into prod's open transaction.
func checkpointTask(t testing.TB, tk *Task, prod *fakeProducer) *Pending {
	t.Helper()
	if tk.WantsFold() {
		if err := tk.Prepare(t.Context(), prod); err != nil {
			t.Fatal(err)
		}
	}
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

// scanState returns the task namespace's state as "key=hex(value)" lines.
func scanState(t testing.TB, s state.Store) []string {
	t.Helper()
	var out []string
	err := s.Scan(state.Namespace{Operator: testOp, Partition: 0}, func(k, v []byte) error {
		out = append(out, fmt.Sprintf("%s=%x", k, v))
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}
