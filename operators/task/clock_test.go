package task

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/state"
)

// TestFoldTimestampsFromClock checks that the records a switch's fold produces (outputs and
// changelog records) carry the injected clock's time, not the machine's.
func TestFoldTimestampsFromClock(t *testing.T) {
	plan := mustPlan(t, testConfig("always", 1000, 100, 10))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0) // stepClock from 2023-11-14
	prod := newFakeProducer()
	recs := ordersRecords(t, 500, 50)
	if tk.Observe(testTopic, int64(len(recs)), 0) {
		t.Fatal("entering backlog on the first lag must not need a checkpoint")
	}
	if err := tk.Process(testTopic, recs); err != nil {
		t.Fatal(err)
	}
	if !tk.Observe(testTopic, 0, 0) {
		t.Fatal("lag 0 must ask for the switch checkpoint")
	}
	if err := commitCheckpoint(tk, prod); err != nil {
		t.Fatal(err)
	}
	from, to := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_000, 0).Add(time.Hour)
	if len(prod.log) < 100 { // 50 outputs and 50 changelog records
		t.Fatalf("the fold produced %d records, want at least 100", len(prod.log))
	}
	for _, r := range prod.log {
		if r.Timestamp.Before(from) || r.Timestamp.After(to) {
			t.Fatalf("record of %s stamped %v, not by the task's clock (%v..%v)", r.Topic, r.Timestamp, from, to)
		}
	}
}
