package task

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// TestStatelessOutputTimestamp: a stateless chain's outputs carry the wall clock of the batch
// that wrote them (one reading of the task's clock per batch), not their input's timestamp (a
// backlog of old events written with theirs would land in the sink past its topic's retention)
// and not none (the producer would read the clock once per record).
func TestStatelessOutputTimestamp(t *testing.T) {
	prod := newFakeProducer()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	tk, err := New(mustPlan(t, testStatelessConfig("auto")), testTopic, 0, Deps{Store: state.NewMem(), Budget: sorter.NewBudget(1 << 20),
		SortDir: t.TempDir(), Clock: clk.Now, Logger: discardLogger(), Producer: prod})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tk.Close)
	var stamps []time.Time // one per batch
	for b := range int64(2) {
		recs := []*kgo.Record{order(3*b, "c1", "20"), order(3*b+1, "c2", "5"), order(3*b+2, "c3", "30")}
		before := clk.now
		tk.BeforeBatch(testTopic, Lag{})
		if err := tk.Process(testTopic, recs); err != nil {
			t.Fatal(err)
		}
		after := clk.now
		out := prod.txn[len(prod.txn)-2:]
		for i, r := range out {
			if r.Topic != testSink {
				t.Fatalf("batch %d: output %d went to %q, want %q", b, i, r.Topic, testSink)
			}
			if !r.Timestamp.After(before) || r.Timestamp.After(after) {
				t.Errorf("batch %d: output %d has timestamp %v, want a reading of the task's clock in (%v, %v] (its input's is %v)",
					b, i, r.Timestamp, before, after, recs[2*i].Timestamp)
			}
		}
		if !out[0].Timestamp.Equal(out[1].Timestamp) {
			t.Errorf("batch %d: outputs stamped %v and %v, want one reading per batch", b, out[0].Timestamp, out[1].Timestamp)
		}
		stamps = append(stamps, out[0].Timestamp)
	}
	if !stamps[1].After(stamps[0]) {
		t.Errorf("the second batch's outputs are stamped %v, the first's %v: want a later reading", stamps[1], stamps[0])
	}
}
