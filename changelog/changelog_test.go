package changelog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// TestRestoreFull: an empty store restores a namespace in full from its own partition of the
// changelog: the last value per key, the offset it reflects (the log end), nothing of the other
// partition. An empty partition restores to nothing and stores no offset.
func TestRestoreFull(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		c := newCluster(t)
		r := restorer(t, c, st)
		checkStats(t, restore(t, r, ns1), 0, 0, 0, true)
		if off := offset(t, st, ns1); off != -1 {
			t.Errorf("an empty log stored offset %d, want none", off)
		}

		w := newWriter(t, c, "")
		w.put(0, rec{key: "a", val: "1"}, rec{key: "b", val: "1"}, rec{key: "a", val: "2"})
		w.put(1, rec{key: "x", val: "9"})
		checkStats(t, restore(t, r, ns0), 0, 3, 3, true)
		checkContents(t, st, ns0, map[string]string{"a": "2", "b": "1"})
		if off := offset(t, st, ns0); off != 3 {
			t.Errorf("stored offset %d, want the log end 3", off)
		}
		checkStats(t, restore(t, r, ns1), 0, 1, 1, true)
		checkContents(t, st, ns1, map[string]string{"x": "9"})
	})
}

// TestRestoreIncremental: a store that holds an offset replays only the log from there: a key
// changed locally before that offset keeps its local value, later records apply, and the
// stored offset moves to the new end. A restore at the end replays nothing.
func TestRestoreIncremental(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		c := newCluster(t)
		r := restorer(t, c, st)
		w := newWriter(t, c, "")
		w.put(0, rec{key: "a", val: "1"}, rec{key: "b", val: "1"}, rec{key: "a", val: "2"})
		checkStats(t, restore(t, r, ns0), 0, 3, 3, true)

		seed(t, st, ns0, map[string]string{"b": "local"}, -1) // b@1 must not be replayed again
		w.put(0, rec{key: "c", val: "1"}, rec{key: "a", val: "3"})
		checkStats(t, restore(t, r, ns0), 3, 5, 2, false)
		checkContents(t, st, ns0, map[string]string{"a": "3", "b": "local", "c": "1"})
		if off := offset(t, st, ns0); off != 5 {
			t.Errorf("stored offset %d, want 5", off)
		}
		checkStats(t, restore(t, r, ns0), 5, 5, 0, false)
		checkContents(t, st, ns0, map[string]string{"a": "3", "b": "local", "c": "1"})
	})
}

// TestRestoreTombstones: a record with a null value deletes its key, in a full and in an
// incremental restore.
func TestRestoreTombstones(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		c := newCluster(t)
		r := restorer(t, c, st)
		w := newWriter(t, c, "")
		w.put(0, rec{key: "a", val: "1"}, rec{key: "b", val: "1"}, rec{key: "a", del: true})
		checkStats(t, restore(t, r, ns0), 0, 3, 3, true)
		checkContents(t, st, ns0, map[string]string{"b": "1"})

		w.put(0, rec{key: "b", del: true})
		checkStats(t, restore(t, r, ns0), 3, 4, 1, false)
		checkContents(t, st, ns0, map[string]string{})
	})
}

// TestRestoreSkipsAbortedTransactions: the changelog is read read_committed: the records of an
// aborted transaction are not applied, and transaction markers count as positions, not records.
func TestRestoreSkipsAbortedTransactions(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		c := newCluster(t)
		r := restorer(t, c, st)
		w := newWriter(t, c, "writer")
		w.txn(true, 0, rec{key: "a", val: "1"})                           // a@0, commit@1
		w.txn(false, 0, rec{key: "a", val: "2"}, rec{key: "b", val: "2"}) // @2 @3, abort@4
		w.txn(true, 0, rec{key: "c", val: "3"})                           // c@5, commit@6
		checkStats(t, restore(t, r, ns0), 0, 7, 2, true)
		checkContents(t, st, ns0, map[string]string{"a": "1", "c": "3"})
		if off := offset(t, st, ns0); off != 7 {
			t.Errorf("stored offset %d, want 7 (after the last marker)", off)
		}

		w.txn(false, 0, rec{key: "c", del: true}) // @7, abort@8
		checkStats(t, restore(t, r, ns0), 7, 9, 0, false)
		checkContents(t, st, ns0, map[string]string{"a": "1", "c": "3"})
	})
}

// TestRestoreUnusableOffset: a stored offset the log cannot serve (beyond its end: the topic
// was recreated; before its start: retention deleted records) drops the local state and its
// pending marks and restores in full from the log start.
func TestRestoreUnusableOffset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		records    int   // a@0, b@1, c@2, ... on partition 0
		deleteTo   int64 // log start after DeleteRecords (0: none)
		stored     int64
		from, to   int64
		want       map[string]string
		wantRecord int64
	}{
		{name: "BeyondEnd", records: 2, stored: 5, from: 0, to: 2, want: map[string]string{"a": "v", "b": "v"}, wantRecord: 2},
		{name: "BeforeStart", records: 4, deleteTo: 2, stored: 1, from: 2, to: 4, want: map[string]string{"c": "v", "d": "v"}, wantRecord: 2},
		{name: "LogEmptied", records: 2, deleteTo: 2, stored: 1, from: 2, to: 2, want: map[string]string{}, wantRecord: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stores(t, func(t *testing.T, st state.Store) {
				c := newCluster(t)
				w := newWriter(t, c, "")
				for i := range tc.records {
					w.put(0, rec{key: string(rune('a' + i)), val: "v"})
				}
				if tc.deleteTo > 0 {
					if err := c.DeleteRecords(topic, 0, tc.deleteTo); err != nil {
						t.Fatal(err)
					}
				}
				seed(t, st, ns0, map[string]string{"stale": "x"}, tc.stored)
				seed(t, st, codec.PendingNamespace(ns0), map[string]string{"stale": ""}, -1)

				checkStats(t, restore(t, restorer(t, c, st), ns0), tc.from, tc.to, tc.wantRecord, true)
				checkContents(t, st, ns0, tc.want)
				checkContents(t, st, codec.PendingNamespace(ns0), map[string]string{})
				if off := offset(t, st, ns0); off != tc.to {
					t.Errorf("stored offset %d, want the log end %d", off, tc.to)
				}
			})
		})
	}
}

// TestRestorePendingMarks: a record with codec.HeaderPending marks its key in
// codec.PendingNamespace; a later record of the key without it clears the mark, in the
// same restore or a later one.
func TestRestorePendingMarks(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		c := newCluster(t)
		r := restorer(t, c, st)
		pend := codec.PendingNamespace(ns0)
		if pend.Partition != ns0.Partition || pend.Operator == ns0.Operator {
			t.Fatalf("PendingNamespace(%v) = %v: want the same partition, another operator", ns0, pend)
		}
		w := newWriter(t, c, "")
		w.put(0,
			rec{key: "k1", val: "1", pending: true},
			rec{key: "k2", val: "2", pending: true},
			rec{key: "k3", val: "3"},
			rec{key: "k1", val: "4"}, // folded at a backlog checkpoint, then emitted: no longer due
		)
		checkStats(t, restore(t, r, ns0), 0, 4, 4, true)
		checkContents(t, st, ns0, map[string]string{"k1": "4", "k2": "2", "k3": "3"})
		checkContents(t, st, pend, map[string]string{"k2": ""})
		if ok, err := changelog.HasAny(st, pend); err != nil || !ok {
			t.Errorf("HasAny(pending) = %v, %v; want true", ok, err)
		}

		w.put(0, rec{key: "k2", val: "5"}, rec{key: "k4", val: "6", pending: true})
		checkStats(t, restore(t, r, ns0), 4, 6, 2, false)
		checkContents(t, st, pend, map[string]string{"k4": ""})
		w.put(0, rec{key: "k4", val: "7"})
		restore(t, r, ns0)
		checkContents(t, st, pend, map[string]string{})
		checkContents(t, st, ns0, map[string]string{"k1": "4", "k2": "5", "k3": "3", "k4": "7"})
	})
}

// TestRestoreRejectsInvalidState: a value the Valid hook rejects stops the restore with an
// error naming the operator, the topic and the offset; the state is not advanced past it.
func TestRestoreRejectsInvalidState(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		c := newCluster(t)
		r := restorer(t, c, st)
		var ops []string
		r.Valid = func(o string, val []byte) bool {
			ops = append(ops, o)
			return string(val) != "bad"
		}
		newWriter(t, c, "").put(0, rec{key: "a", val: "good"}, rec{key: "b", val: "bad"}, rec{key: "c", val: "good"})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		_, err := r.Restore(ctx, topic, ns0)
		if err == nil {
			t.Fatal("Restore accepted a value Valid rejects")
		}
		for _, want := range []string{"operator " + op, topic, "offset 1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if len(ops) == 0 || ops[0] != op {
			t.Errorf("Valid was asked about operators %v, want %q", ops, op)
		}
		if off := offset(t, st, ns0); off > 1 {
			t.Errorf("stored offset %d: the state moved past the rejected record at 1", off)
		}
		if _, ok, _ := st.Get(ns0, []byte("b"), nil); ok {
			t.Error("the rejected value was stored")
		}
	})
}

// TestRestoreRejectsBadWatermark: a watermark record (codec.HeaderWatermark) whose value is
// not 8 bytes stops the restore with ErrLayout naming the topic and offset; nothing of it is
// stored (a task would otherwise fail to start on it, or read a wrong watermark).
func TestRestoreRejectsBadWatermark(t *testing.T) {
	for _, val := range []string{"", "wm", "123456789"} {
		stores(t, func(t *testing.T, st state.Store) {
			c := newCluster(t)
			r := restorer(t, c, st)
			w := newWriter(t, c, "")
			w.put(0, rec{key: "a", val: "good"})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			kr := &kgo.Record{Topic: topic, Partition: 0, Key: codec.WatermarkKey, Value: []byte(val),
				Headers: []kgo.RecordHeader{{Key: codec.HeaderWatermark}}}
			if err := w.cl.ProduceSync(ctx, kr).FirstErr(); err != nil {
				t.Fatal(err)
			}
			_, err := r.Restore(ctx, topic, ns0)
			if !errors.Is(err, changelog.ErrLayout) {
				t.Fatalf("Restore = %v, want ErrLayout", err)
			}
			for _, want := range []string{topic + "[0] offset 1", "watermark record of operator " + op, "sluice reset"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if _, ok, _ := st.Get(codec.WatermarkNamespace(ns0), codec.WatermarkKey, nil); ok {
				t.Error("the bad watermark was stored")
			}
		})
	}
}

// TestRestoreWaitsForOpenTransaction: while a transaction is open on the partition (the
// previous owner's last checkpoint), Restore waits for it to end instead of stopping at the last
// stable offset; it gives up with ctx's error if ctx ends first, and once the transaction
// commits it restores its records too.
func TestRestoreWaitsForOpenTransaction(t *testing.T) {
	c := newCluster(t)
	st := state.NewMem()
	r := restorer(t, c, st)
	w := newWriter(t, c, "previous-owner")
	w.txn(true, 0, rec{key: "a", val: "1"}) // a@0, commit@1
	w.begin()
	w.put(0, rec{key: "b", val: "2"}) // b@2, left open
	listed := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Observe: true, Count: -1})

	type result struct {
		st  changelog.Stats
		err error
	}
	start := func(ctx context.Context) chan result {
		res := make(chan result, 1)
		go func() {
			s, err := r.Restore(ctx, topic, ns0)
			res <- result{s, err}
		}()
		return res
	}

	// A restore whose context ends while the transaction is open fails with ctx's error.
	ctx, cancel := context.WithCancel(t.Context())
	res := start(ctx)
	waitWaiting(t, listed, 5, res) // start offsets, then stable and end offsets twice
	cancel()
	if got := <-res; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("Restore with ctx cancelled during the wait = %+v, %v; want context.Canceled", got.st, got.err)
	}

	res = start(t.Context())
	waitWaiting(t, listed, listed.Hits()+5, res)
	w.end(true) // commit@3
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	checkStats(t, got.st, 0, 4, 2, true)
	checkContents(t, st, ns0, map[string]string{"a": "1", "b": "2"})
}

// waitWaiting waits until the fault has counted n ListOffsets requests: the restore keeps
// listing the partition's stable and end offsets. It fails if the restore returns first.
func waitWaiting[T any](t *testing.T, h *kfake.FaultHandle, n int, returned <-chan T) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for h.Hits() < n {
		select {
		case got := <-returned:
			t.Fatalf("Restore returned %+v while a transaction was open on the partition", got)
		case <-deadline:
			t.Fatalf("waiting for %d ListOffsets requests: saw %d", n, h.Hits())
		case <-tick.C:
		}
	}
}

// TestEnsure: Ensure creates missing topics with the requested partitions (compacted when
// asked), accepts topics that exist with the right count, and, for a topic whose count must be
// exact, rejects an existing one with another count, naming it and both counts. (Each step
// uses a new admin client: a client caches topic metadata for up to kgo's MetadataMinAge, so
// one that has just seen a topic missing keeps seeing it missing.)
func TestEnsure(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	topics := []changelog.Topic{
		{Name: "g-agg-changelog", Partitions: 3, Exact: true, Compacted: true},
		{Name: "g-out", Partitions: 2},
	}
	if err := changelog.Ensure(ctx, admin(t, c), topics, -1); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	parts, err := changelog.Partitions(ctx, admin(t, c), "g-agg-changelog", "g-out")
	if err != nil {
		t.Fatal(err)
	}
	if parts["g-agg-changelog"] != 3 || parts["g-out"] != 2 {
		t.Errorf("partitions %v, want g-agg-changelog:3 g-out:2", parts)
	}
	policy := func(name string) string {
		t.Helper()
		rcs, err := admin(t, c).DescribeTopicConfigs(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range rc.Configs {
			if cfg.Key == "cleanup.policy" && cfg.Value != nil {
				return *cfg.Value
			}
		}
		return ""
	}
	if p := policy("g-agg-changelog"); p != "compact" {
		t.Errorf("changelog topic cleanup.policy = %q, want compact", p)
	}
	if p := policy("g-out"); p == "compact" {
		t.Errorf("sink topic cleanup.policy = %q, want the broker default", p)
	}
	if err := changelog.Ensure(ctx, admin(t, c), topics, -1); err != nil {
		t.Errorf("Ensure over existing topics: %v", err)
	}

	// The input now has 4 partitions: the changelog (exact) no longer matches; a sink may.
	err = changelog.Ensure(ctx, admin(t, c), []changelog.Topic{{Name: "g-agg-changelog", Partitions: 4, Exact: true, Compacted: true}}, -1)
	if err == nil {
		t.Fatal("Ensure accepted a changelog topic with 3 partitions for an input of 4")
	}
	for _, want := range []string{"g-agg-changelog", "3 partitions", "has 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := changelog.Ensure(ctx, admin(t, c), []changelog.Topic{{Name: "g-out", Partitions: 4}}, -1); err != nil {
		t.Errorf("Ensure of a non-exact topic with another count: %v, want nil", err)
	}
	if parts, _ := changelog.Partitions(ctx, admin(t, c), "g-out"); parts["g-out"] != 2 {
		t.Errorf("g-out has %d partitions after Ensure, want its 2 unchanged", parts["g-out"])
	}
}

// TestEnsureKinds: the missing topics of several kinds (partitions, compacted, repartition)
// are created together, each with its own count and configs, beside one that exists; a topic the
// broker refuses is named in the error.
func TestEnsureKinds(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	if err := changelog.Ensure(ctx, admin(t, c), []changelog.Topic{{Name: "k-out", Partitions: 2}}, -1); err != nil {
		t.Fatal(err)
	}
	topics := []changelog.Topic{
		{Name: "k-a-changelog", Partitions: 3, Exact: true, Compacted: true},
		{Name: "k-a-repartition", Partitions: 3, Exact: true, Repartition: true},
		{Name: "k-out", Partitions: 2},
		{Name: "k-b-changelog", Partitions: 3, Exact: true, Compacted: true},
		{Name: "k-b-repartition", Partitions: 5, Exact: true, Repartition: true},
		{Name: "k-dlq", Partitions: 5},
	}
	if err := changelog.Ensure(ctx, admin(t, c), topics, -1); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	names := make([]string, 0, len(topics))
	for _, tp := range topics {
		names = append(names, tp.Name)
	}
	parts, err := changelog.Partitions(ctx, admin(t, c), names...)
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := admin(t, c).DescribeTopicConfigs(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics {
		if parts[tp.Name] != tp.Partitions {
			t.Errorf("%s: %d partitions, want %d", tp.Name, parts[tp.Name], tp.Partitions)
		}
		rc, err := rcs.On(tp.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, cfg := range rc.Configs {
			if cfg.Value != nil {
				got[cfg.Key] = *cfg.Value
			}
		}
		if (got["cleanup.policy"] == "compact") != tp.Compacted {
			t.Errorf("%s: cleanup.policy %q, compacted %v", tp.Name, got["cleanup.policy"], tp.Compacted)
		}
		if (got["retention.ms"] == "-1") != tp.Repartition {
			t.Errorf("%s: retention.ms %q, repartition %v", tp.Name, got["retention.ms"], tp.Repartition)
		}
	}
	err = changelog.Ensure(ctx, admin(t, c), []changelog.Topic{{Name: "k-fine", Partitions: 1}, {Name: "k-bad", Partitions: 0}}, -1)
	if err == nil || !strings.Contains(err.Error(), "k-bad") || strings.Contains(err.Error(), "k-fine") {
		t.Errorf("Ensure of a topic of 0 partitions: %v, want an error naming k-bad alone", err)
	}
}

// TestPartitions: Partitions reports each topic's partition count and names a missing topic.
func TestPartitions(t *testing.T) {
	c := newCluster(t)
	adm := admin(t, c)
	parts, err := changelog.Partitions(t.Context(), adm, topic)
	if err != nil || parts[topic] != 2 {
		t.Errorf("Partitions(%s) = %v, %v; want 2", topic, parts, err)
	}
	if _, err := changelog.Partitions(t.Context(), adm, topic, "no-such-topic"); err == nil || !strings.Contains(err.Error(), "no-such-topic") {
		t.Errorf("Partitions with a missing topic = %v, want an error naming it", err)
	}
}

// TestHasAny: HasAny reports whether a namespace holds a key, whatever other namespaces hold.
func TestHasAny(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		if ok, err := changelog.HasAny(st, ns0); err != nil || ok {
			t.Errorf("HasAny(empty) = %v, %v; want false", ok, err)
		}
		seed(t, st, ns1, map[string]string{"k": "v"}, 3)
		seed(t, st, state.Namespace{Operator: op + "x", Partition: 0}, map[string]string{"k": "v"}, -1)
		if ok, err := changelog.HasAny(st, ns0); err != nil || ok {
			t.Errorf("HasAny(ns0) with keys only in other namespaces = %v, %v; want false", ok, err)
		}
		seed(t, st, ns0, map[string]string{"k": "v"}, -1)
		if ok, err := changelog.HasAny(st, ns0); err != nil || !ok {
			t.Errorf("HasAny(ns0) = %v, %v; want true", ok, err)
		}
	})
}
