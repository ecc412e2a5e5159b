package consumer

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/plan"
)

const statusConfig = `
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
sources:
  orders: {topic: orders, format: json, key: customer_id, timestamp: ts}
operators:
  - name: totals
    aggregate:
      input: orders
      fields: {total: {sum: amount}}
    output: out
sinks:
  out: {topic: totals, format: json}
`

// newStatusEngine returns an engine of statusConfig that has not joined its group.
func newStatusEngine(t *testing.T) *Engine {
	t.Helper()
	cfg, err := configs.Parse([]byte(statusConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Config: cfg, Plan: p})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestStatusBeforeTaskBuilt checks a runner whose goroutine has not built its task yet (assigned
// registers runners; each builds its task itself): Status shows it as restoring, by topic and
// partition, and the engine is not ready.
func TestStatusBeforeTaskBuilt(t *testing.T) {
	e := newStatusEngine(t)
	k := tp{"orders", 3}
	e.mu.Lock()
	e.runs[k] = &runner{key: k, topics: []string{"orders"}, first: map[string]int64{}}
	e.joined = true
	e.mu.Unlock()
	st := e.Status()
	if len(st) != 1 || st[0].Partition != 3 || len(st[0].Chains) != 1 {
		t.Fatalf("Status = %+v, want one task of partition 3 with one chain", st)
	}
	if c := st[0].Chains[0]; c.Topic != "orders" || c.Operator != "totals" || c.Mode != "restoring" || c.NextOffset != -1 {
		t.Errorf("chain status %+v, want orders/totals restoring with no offsets", c)
	}
	if e.Ready() {
		t.Error("Ready with a task not restored")
	}
}

// TestDispatchSkipsReplacedTask checks that the records a poll fetched for a partition's task go
// to that task only: when a rebalance inside a checkpoint of the dispatch (an end that let it run)
// has given the partition a new task, they are dropped, since the new task reads from its
// committed offset and would otherwise take them as its first records and skip those before.
func TestDispatchSkipsReplacedTask(t *testing.T) {
	e := newStatusEngine(t)
	k := tp{"orders", 3}
	newRunner := func() *runner {
		return &runner{key: k, topics: []string{"orders"}, in: make(chan batch, 1), done: make(chan struct{}), first: map[string]int64{}}
	}
	fetched := kgo.FetchTopicPartition{Topic: "orders", FetchPartition: kgo.FetchPartition{
		Partition: 3, HighWatermark: 500,
		Records: []*kgo.Record{{Topic: "orders", Partition: 3, Offset: 400}, {Topic: "orders", Partition: 3, Offset: 401}},
	}}
	dispatch := func(owners map[tp]*runner) {
		var due bool
		var derr error
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		e.dispatchPartition(t.Context(), fetched, e.epoch, owners, timer, &due, &derr)
		if derr != nil {
			t.Fatal(derr)
		}
	}

	old := newRunner()
	e.runs[k] = old
	dispatch(map[tp]*runner{k: old})
	if len(old.in) != 1 || old.first["orders"] != 400 {
		t.Fatalf("the task of the poll got %d batches (first offset %v), want the fetch", len(old.in), old.first)
	}

	// The partition was lost and assigned again during the dispatch: a new task.
	replaced := newRunner()
	e.runs[k] = replaced
	dispatch(map[tp]*runner{k: old})
	if len(replaced.in) != 0 {
		t.Fatalf("the new task got the records fetched for the old one (from offset %d)", (<-replaced.in).recs[0].Offset)
	}
	if _, ok := replaced.first["orders"]; ok {
		t.Fatalf("the new task's first offset was set to %d by records fetched for the old one", replaced.first["orders"])
	}
}

// TestRevokeWaitsForCheckpointOutcome checks that a rebalance callback does not run while a
// checkpoint hands its outcome to the tasks and applies the rewinds they answer (an end that
// took producer.endStuck lets callbacks run during a checkpoint): the revoke of a partition
// waits until its task's answer has been applied.
func TestRevokeWaitsForCheckpointOutcome(t *testing.T) {
	e := newStatusEngine(t)
	k := tp{"orders", 3}
	r := &runner{key: k, topics: []string{"orders"}, done: make(chan struct{}), cancel: func() {}, first: map[string]int64{}, committed: map[string]int64{}}
	e.runs[k] = r
	q := &ckptReq{outcome: make(chan bool, 1), ack: make(chan ckptAck, 1)}
	heard, answer := make(chan struct{}), make(chan struct{})
	go func() { // the task: hears the outcome, then takes its time to answer
		<-q.outcome
		close(heard)
		<-answer
		q.ack <- ckptAck{}
	}()
	applied := make(chan error, 1)
	go func() { applied <- e.applyOutcome([]*runner{r}, []*ckptReq{q}, true) }()
	<-heard
	revoked := make(chan struct{})
	go func() {
		e.revoked(map[string][]int32{"orders": {3}}, "lost")
		close(revoked)
	}()
	time.Sleep(200 * time.Millisecond) // the callback's chance to run, if nothing held it
	e.mu.Lock()
	still := e.runs[k] == r
	e.mu.Unlock()
	if !still {
		t.Fatal("the partition was revoked between its task hearing the checkpoint's outcome and its answer being applied")
	}
	close(answer)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	close(r.done) // the task goroutine exits once cancelled
	<-revoked
	if _, ok := e.runs[k]; ok {
		t.Fatal("the revoked task is still registered")
	}
}
