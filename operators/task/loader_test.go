package task

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/state"
)

// ordersRecords returns the orders workload as input records of partition 0, offsets 0..n-1.
func ordersRecords(t testing.TB, records int64, keys int) []*kgo.Record {
	t.Helper()
	spec := workload.Spec{Records: records, Keys: keys, Partitions: 1, Seed: 7}
	out := make([]*kgo.Record, 0, records)
	err := spec.Each(func(key, value []byte, ts int64) error {
		out = append(out, &kgo.Record{Topic: testTopic, Offset: int64(len(out)), Key: bytes.Clone(key), Value: bytes.Clone(value), Timestamp: time.UnixMilli(ts)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countingStore counts the loaders a task opens.
type countingStore struct {
	state.Store
	loaders int
}

func (s *countingStore) NewLoader(ns state.Namespace) (state.Loader, error) {
	s.loaders++
	return s.Store.NewLoader(ns)
}

// TestLoaderSwitchMatchesBatch runs a large backlog (many keys) through the switch twice, once
// with the bulk loader (sstable ingestion) and once with a Pebble batch, then streams more
// records over the loaded state: both stores must end byte-identical, with the same changelog
// offset.
func TestLoaderSwitchMatchesBatch(t *testing.T) {
	records, keys := int64(200_000), 50_000
	if testing.Short() || raceEnabled {
		records, keys = 20_000, 5_000
	}
	recs := ordersRecords(t, records, keys)
	backlogPart, tail := recs[:len(recs)*9/10], recs[len(recs)*9/10:]
	plan := mustPlan(t, testConfig("always", 1000, 100, 1000))
	run := func(threshold int) ([]string, int64, int) {
		db, err := state.Open(state.Options{Dir: t.TempDir(), CacheSize: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		store := &countingStore{Store: db}
		tk := newTestTask(t, plan, store, 4<<20, threshold)
		prod := newFakeProducer()
		for i := 0; i < len(backlogPart); i += 5000 {
			end := min(i+5000, len(backlogPart))
			if tk.Observe(testTopic, int64(len(recs)-end), 0) {
				t.Fatal("unexpected switch inside the backlog")
			}
			if err := tk.Process(testTopic, backlogPart[i:end]); err != nil {
				t.Fatal(err)
			}
		}
		if !tk.Observe(testTopic, 0, 0) {
			t.Fatal("lag 0 must ask for the switch checkpoint")
		}
		if err := commitCheckpoint(tk, prod); err != nil {
			t.Fatal(err)
		}
		if st := tk.Status(); st.Chains[0].Mode != "real-time" || st.Chains[0].CommittedOffset != int64(len(backlogPart)) {
			t.Fatalf("after the switch: %+v", st.Chains[0])
		}
		for i := 0; i < len(tail); i += 1000 {
			end := min(i+1000, len(tail))
			tk.Observe(testTopic, int64(len(tail)-end), 0)
			if err := tk.Process(testTopic, tail[i:end]); err != nil {
				t.Fatal(err)
			}
			if err := commitCheckpoint(tk, prod); err != nil {
				t.Fatal(err)
			}
		}
		off, _, err := db.Offset(state.Namespace{Operator: testOp, Partition: 0})
		if err != nil {
			t.Fatal(err)
		}
		return scanState(t, db), off, store.loaders
	}
	viaLoader, offL, nl := run(100)
	viaBatch, offB, nb := run(1 << 30)
	if nl != 1 || nb != 0 {
		t.Fatalf("loaders opened: %d with a small threshold (want 1), %d with a huge one (want 0)", nl, nb)
	}
	if want := len(workload.Spec{Records: records, Keys: keys, Partitions: 1, Seed: 7}.Expected()); len(viaLoader) != want {
		t.Errorf("%d keys in state, want %d", len(viaLoader), want)
	}
	if !slices.Equal(viaLoader, viaBatch) {
		t.Errorf("state differs between the loader and the batch path:\n%s", diffLines(viaLoader, viaBatch))
	}
	if offL != offB {
		t.Errorf("changelog offset: %d via the loader, %d via a batch", offL, offB)
	}
}
