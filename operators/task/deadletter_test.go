package task

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// TestDeadLetterOnceAfterBacklogAbort pins a bug the metamorphic test found (-dlqonce): in
// backlog mode a checkpoint used to commit the dead letters of the records seen so far without
// their input offset (good records before them still wait in the sorter); after an abort and a
// rewind, the dead letters were committed a second time. Dead letters are now held until the
// checkpoint whose offset moves past them.
func TestDeadLetterOnceAfterBacklogAbort(t *testing.T) {
	plan := mustPlan(t, testConfig("always", 50, 10, 100))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
	prod := newFakeProducer()
	recs := []*kgo.Record{
		{Topic: testTopic, Offset: 0, Key: []byte("c-1"), Value: []byte(`{"customer_id":"c-1","amount":1.5,"ts":1}`), Timestamp: time.UnixMilli(1)},
		{Topic: testTopic, Offset: 1, Key: []byte("c-1"), Value: []byte(`{"customer_id":`), Timestamp: time.UnixMilli(2)},
	}
	const huge = 1 << 40
	if tk.Observe(testTopic, huge, 0) {
		t.Fatal("entering backlog on the first lag must not need a checkpoint")
	}
	if err := tk.Process(testTopic, recs); err != nil {
		t.Fatal(err)
	}
	// A periodic checkpoint while in backlog: commits the dead letter, not the offset.
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	prod.commit()
	if err := tk.Committed(pd); err != nil {
		t.Fatal(err)
	}
	if _, ok := pd.Offsets[testTopic]; ok {
		t.Fatalf("offset committed while records wait in the sorter: %v", pd.Offsets)
	}
	// The next checkpoint aborts (a produce error, a fenced transaction): rewind.
	pd, err = tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	prod.abort()
	seek := tk.Aborted(pd)
	// Nothing of the task was in the aborted transaction: it keeps its sorted records (and the
	// held dead letter) and the consumer resumes after them.
	if seek[testTopic] != 2 {
		t.Fatalf("rewind to %v, want offset 2 (sorted records kept)", seek)
	}
	// The consumer resumes at offset 2 with nothing more to read: caught up.
	if tk.Observe(testTopic, 0, 0) {
		if err := commitCheckpoint(tk, prod); err != nil {
			t.Fatal(err)
		}
	}
	if err := commitCheckpoint(tk, prod); err != nil {
		t.Fatal(err)
	}
	dead := prod.committed(testGroup + "-dlq")
	if len(dead) != 1 {
		t.Errorf("bad record at offset 1 was committed to the dead-letter topic %d times, want exactly once", len(dead))
	}
}

// commitCheckpoint runs a checkpoint that commits.
func commitCheckpoint(tk *Task, prod *fakeProducer) error {
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		return err
	}
	prod.commit()
	return tk.Committed(pd)
}
