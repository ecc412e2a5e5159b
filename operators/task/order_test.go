package task

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// TestCallOrder: the task enforces its call order (order.go). Processing while a checkpoint
// awaits its outcome, or an outcome without a checkpoint, is a bug of the caller and panics
// naming the call and the phase.
func TestCallOrder(t *testing.T) {
	plan := mustPlan(t, testConfig("never", 50, 10, 100))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
	prod := newFakeProducer()
	mustPanic := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			r := recover()
			if r == nil {
				t.Fatalf("%s: no panic", what)
			}
			if msg, _ := r.(string); !strings.Contains(msg, want) {
				t.Fatalf("%s: panic %q, want it to mention %q", what, r, want)
			}
		}()
		f()
	}
	mustPanic("Committed before Checkpoint", "Committed called while the task is idle", func() { _ = tk.Committed(newPending()) })
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	mustPanic("Process in flight", "Process called while the task is in flight", func() { _ = tk.Process(testTopic, nil) })
	mustPanic("BeforeBatch in flight", "BeforeBatch called", func() { tk.BeforeBatch(testTopic, Lag{}) })
	mustPanic("Checkpoint twice", "Checkpoint called", func() { _, _ = tk.Checkpoint(prod) })
	prod.commit()
	if err := tk.Committed(pd); err != nil {
		t.Fatal(err)
	}
	if err := tk.Process(testTopic, nil); err != nil { // idle again
		t.Fatal(err)
	}
	tk.Close()
	mustPanic("Process after Close", "closed", func() { _ = tk.Process(testTopic, nil) })
}

// TestBeforeBatchPolicy: a new task judges a batch by the lag including it (a backlog that
// arrives in one fetch is a backlog), a streaming task by the lag beyond it (a batch that grew
// while it waited does not make it flap), and an abort makes the task new again.
func TestBeforeBatchPolicy(t *testing.T) {
	plan := mustPlan(t, testConfig("auto", 100, 10, 100))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
	if tk.BeforeBatch(testTopic, Lag{Before: 500, After: 0}); !tk.InBacklog(testTopic) {
		t.Fatal("a new task with 500 records in its first batch is not in backlog")
	}
	tk.AfterBatch(testTopic, Lag{After: 0})
	pd, err := tk.Checkpoint(newFakeProducer())
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Committed(pd); err != nil {
		t.Fatal(err)
	}
	if tk.InBacklog(testTopic) {
		t.Fatal("still in backlog after catching up")
	}
	if tk.BeforeBatch(testTopic, Lag{Before: 500, After: 0}); tk.InBacklog(testTopic) {
		t.Fatal("a streaming task entered backlog for a batch with nothing beyond it")
	}
	pd, err = tk.Checkpoint(newFakeProducer())
	if err != nil {
		t.Fatal(err)
	}
	tk.Aborted(pd)
	if tk.BeforeBatch(testTopic, Lag{Before: 500, After: 0}); !tk.InBacklog(testTopic) {
		t.Fatal("after an abort, a rewound backlog in one batch is not sorted again")
	}
}

// TestBoundedStartsInBacklog: a bounded run (Deps.Bounded) starts every keyed operator in
// backlog whatever backlog.mode says, and streams once caught up; the plan keeps the configured
// mode.
func TestBoundedStartsInBacklog(t *testing.T) {
	for _, mode := range []string{"never", "auto"} {
		plan := mustPlan(t, testConfig(mode, 1000, 10, 100))
		tk, err := New(plan, testTopic, 0, Deps{Store: state.NewMem(), Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(),
			Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now, Logger: discardLogger(), Bounded: true})
		if err != nil {
			t.Fatal(err)
		}
		if tk.BeforeBatch(testTopic, Lag{Before: 50, After: 0}); !tk.InBacklog(testTopic) {
			t.Fatalf("mode %s, bounded: 50 records left (below enter_lag 1000) did not start the task in backlog", mode)
		}
		tk.AfterBatch(testTopic, Lag{After: 0})
		pd, err := tk.Checkpoint(newFakeProducer())
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Committed(pd); err != nil {
			t.Fatal(err)
		}
		if tk.InBacklog(testTopic) {
			t.Fatalf("mode %s, bounded: still in backlog after catching up", mode)
		}
		if got := plan.Config.Backlog.Mode; got != mode {
			t.Fatalf("the plan's backlog.mode is %q, want the configured %q", got, mode)
		}
		tk.Close()
	}
}

// TestBacklogged: a task holds a backlog (Backlogged, which lets the engine space its
// checkpoints backlog.commit_interval apart) while its keyed operator is in backlog mode, or,
// for a chain without one, while its input is at least enter_lag behind; not before it has seen
// a lag, not once it has caught up, and never in mode never.
func TestBacklogged(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		backlog   bool // whether a lag of 500 is a backlog
	}{
		{"keyed auto", testConfig("auto", 100, 10, 100), true},
		{"keyed never", testConfig("never", 100, 10, 100), false},
		{"stateless auto", testStatelessConfig("auto"), true},
		{"stateless never", testStatelessConfig("never"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := newTestTask(t, mustPlan(t, tc.doc), state.NewMem(), 1<<20, 0)
			if tk.Backlogged() {
				t.Fatal("Backlogged before any lag was seen")
			}
			tk.BeforeBatch(testTopic, Lag{Before: 500, After: 400})
			if got := tk.Backlogged(); got != tc.backlog {
				t.Fatalf("Backlogged with 500 records left = %v, want %v", got, tc.backlog)
			}
			tk.AfterBatch(testTopic, Lag{After: 0})
			if err := tk.Committed(checkpointTask(t, tk, newFakeProducer())); err != nil {
				t.Fatal(err)
			}
			if tk.Backlogged() {
				t.Fatal("Backlogged after catching up")
			}
		})
	}
}
