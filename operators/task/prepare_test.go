package task

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// cancellingProducer is a fakeProducer that cancels a context once it has been given after
// records (a revoke arriving in the middle of a fold).
type cancellingProducer struct {
	*fakeProducer
	after  int
	cancel context.CancelFunc
}

func (p *cancellingProducer) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	p.fakeProducer.Produce(r, promise)
	if p.after--; p.after == 0 {
		p.cancel()
	}
}

// loaderStore counts the bulk loaders a task opens and aborts.
type loaderStore struct {
	state.Store
	opened, aborted int
}

func (s *loaderStore) NewLoader(ns state.Namespace) (state.Loader, error) {
	ld, err := s.Store.NewLoader(ns)
	if err != nil {
		return nil, err
	}
	s.opened++
	return &countedLoader{Loader: ld, s: s}, nil
}

type countedLoader struct {
	state.Loader
	s *loaderStore
}

func (l *countedLoader) Abort() error {
	l.s.aborted++
	return l.Loader.Abort()
}

// TestPrepareCancelled folds a large backlog (through the bulk loader) with a context that is
// cancelled after a few thousand records, and once with one cancelled before it starts:
// Prepare must return ctx.Err() within the next 1024 keys, abort its loader, keep no pending
// checkpoint, and leave the store untouched.
func TestPrepareCancelled(t *testing.T) {
	records, keys := int64(40_000), 10_000
	if testing.Short() || raceEnabled {
		records, keys = 20_000, 5_000
	}
	recs := ordersRecords(t, records, keys)
	plan := mustPlan(t, testConfig("always", 1000, 100, 10))
	for _, tc := range []struct {
		name  string
		after int // cancel after this many produced records; 0: before Prepare
	}{
		{"during the fold", 2000},
		{"before the fold", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := state.Open(state.Options{Dir: t.TempDir(), CacheSize: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			store := &loaderStore{Store: db}
			tk := newTestTask(t, plan, store, 4<<20, 100)
			for i := 0; i < len(recs); i += 5000 {
				end := min(i+5000, len(recs))
				if tk.Observe(testTopic, int64(len(recs)-end)+1000, 0) {
					t.Fatal("unexpected switch inside the backlog")
				}
				if err := tk.Process(testTopic, recs[i:end]); err != nil {
					t.Fatal(err)
				}
			}
			if !tk.Observe(testTopic, 0, 0) || !tk.WantsFold() {
				t.Fatal("lag 0 must ask for the switch's fold")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.after == 0 {
				cancel()
			}
			prod := &cancellingProducer{fakeProducer: newFakeProducer(), after: tc.after, cancel: cancel}
			if err := tk.Prepare(ctx, prod); !errors.Is(err, context.Canceled) {
				t.Fatalf("Prepare returned %v, want context.Canceled", err)
			}
			// Two records (changelog and output) per key; the fold looks at ctx every 1024 keys.
			if n := len(prod.txn); n > tc.after+2*1024 {
				t.Errorf("the fold produced %d records, %d after the cancel (of %d keys)", n, n-tc.after, keys)
			}
			if tk.prep != nil {
				t.Error("a pending checkpoint is left after the cancelled Prepare")
			}
			if store.opened != store.aborted {
				t.Errorf("loaders: %d opened, %d aborted", store.opened, store.aborted)
			}
			if tc.after > 0 && store.opened == 0 {
				t.Error("the fold did not use the bulk loader; the test means to cover its abort")
			}
			prod.abort() // the revoke aborts the transaction
			if got := scanState(t, db); len(got) != 0 {
				t.Errorf("%d keys in state after the cancelled fold, want none", len(got))
			}
			if _, ok, err := db.Offset(tk.chains[0].ns); err != nil || ok {
				t.Errorf("changelog offset stored after the cancelled fold (ok %v, err %v)", ok, err)
			}
		})
	}
}
