package changelog_test

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// This file is the harness of the changelog tests: an in-process kfake broker with one
// changelog topic, a writer that puts records (plain or in transactions) on a chosen partition,
// and readers of a store's namespace.

const (
	topic = "g-totals-changelog"
	op    = "totals"
)

// ns0 and ns1 are the namespaces of the operator's state for partitions 0 and 1.
var (
	ns0 = state.Namespace{Operator: op, Partition: 0}
	ns1 = state.Namespace{Operator: op, Partition: 1}
)

// newCluster starts a one-broker kfake cluster holding the changelog topic with two partitions,
// closed at cleanup.
func newCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// client returns a client for c with opts, closed at cleanup.
func client(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func admin(t *testing.T, c *kfake.Cluster) *kadm.Client { return kadm.NewClient(client(t, c)) }

// restorer returns a Restorer of c into st that accepts every value.
func restorer(t *testing.T, c *kfake.Cluster, st state.Store) *changelog.Restorer {
	t.Helper()
	return &changelog.Restorer{
		Brokers: c.ListenAddrs(), Store: st, Admin: admin(t, c),
		Logger: slog.New(slog.DiscardHandler),
	}
}

// rec is a changelog record: a key's full state, a tombstone (del), or a state whose output is
// still due (pending: it carries codec.HeaderPending).
type rec struct {
	key, val string
	del      bool
	pending  bool
}

func (r rec) record(p int32) *kgo.Record {
	kr := &kgo.Record{Topic: topic, Partition: p, Key: []byte(r.key)}
	if !r.del {
		kr.Value = []byte(r.val)
	}
	if r.pending {
		kr.Headers = []kgo.RecordHeader{{Key: codec.HeaderPending}}
	}
	return kr
}

// writer produces changelog records to chosen partitions. Not safe for concurrent use.
type writer struct {
	t  *testing.T
	cl *kgo.Client
}

// newWriter returns a writer; with a transactional id, its records go in transactions (txn).
func newWriter(t *testing.T, c *kfake.Cluster, txnID string) *writer {
	opts := []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID))
	}
	return &writer{t: t, cl: client(t, c, opts...)}
}

// put writes recs to partition p and waits for their acknowledgement.
func (w *writer) put(p int32, recs ...rec) {
	w.t.Helper()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = r.record(p)
	}
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	if err := w.cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		w.t.Fatalf("producing to %s[%d]: %v", topic, p, err)
	}
}

// begin opens a transaction (a transactional writer only).
func (w *writer) begin() {
	w.t.Helper()
	if err := w.cl.BeginTransaction(); err != nil {
		w.t.Fatal(err)
	}
}

// end commits or aborts the open transaction.
func (w *writer) end(commit bool) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	if err := w.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		w.t.Fatal(err)
	}
}

// txn writes recs to partition p in one transaction, committed or aborted.
func (w *writer) txn(commit bool, p int32, recs ...rec) {
	w.t.Helper()
	w.begin()
	w.put(p, recs...)
	w.end(commit)
}

// contents returns every key and value of ns in st.
func contents(t *testing.T, st state.Store, ns state.Namespace) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := st.Scan(ns, func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatalf("scan %v: %v", ns, err)
	}
	return out
}

// checkContents fails the test unless ns in st holds exactly want.
func checkContents(t *testing.T, st state.Store, ns state.Namespace, want map[string]string) {
	t.Helper()
	if got := contents(t, st, ns); !maps.Equal(got, want) {
		t.Errorf("%v holds %v, want %v", ns, got, want)
	}
}

// offset returns the changelog offset stored for ns, or -1 if none.
func offset(t *testing.T, st state.Store, ns state.Namespace) int64 {
	t.Helper()
	off, ok, err := st.Offset(ns)
	if err != nil {
		t.Fatalf("offset of %v: %v", ns, err)
	}
	if !ok {
		return -1
	}
	return off
}

// seed writes kv and, if off >= 0, the offset into ns of st: local state left by an earlier run.
func seed(t *testing.T, st state.Store, ns state.Namespace, kv map[string]string, off int64) {
	t.Helper()
	b := st.NewBatch()
	defer b.Close()
	for k, v := range kv {
		if err := b.Set(ns, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if off >= 0 {
		if err := b.SetOffset(ns, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// stores runs fn once over each Store implementation: the in-memory model and Pebble.
func stores(t *testing.T, fn func(t *testing.T, st state.Store)) {
	t.Run("Mem", func(t *testing.T) { fn(t, state.NewMem()) })
	t.Run("Pebble", func(t *testing.T) {
		db, err := state.Open(state.Options{Dir: t.TempDir(), CacheSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		fn(t, db)
	})
}

// restore runs r.Restore of ns with a deadline and fails the test on an error.
func restore(t *testing.T, r *changelog.Restorer, ns state.Namespace) changelog.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := r.Restore(ctx, topic, ns)
	if err != nil {
		t.Fatalf("Restore(%v): %v", ns, err)
	}
	return st
}

// checkStats fails the test unless st has the given From, To, Records and Full.
func checkStats(t *testing.T, st changelog.Stats, from, to, records int64, full bool) {
	t.Helper()
	if st.From != from || st.To != to || st.Records != records || st.Full != full {
		t.Errorf("Stats{From: %d, To: %d, Records: %d, Full: %v}, want {From: %d, To: %d, Records: %d, Full: %v}",
			st.From, st.To, st.Records, st.Full, from, to, records, full)
	}
}
