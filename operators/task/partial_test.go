package task

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

func TestPartialsBypassWhenMostlyMissing(t *testing.T) {
	init := func(b []byte) { clear(b) }
	p := newPartials(8, 4)
	p.window = 100
	for i := range 4 {
		if _, _, ok := p.slot(fmt.Appendf(nil, "k%d", i), init); !ok {
			t.Fatalf("key %d refused by a table with room", i)
		}
	}
	// Full: a window in which half the records hit keeps the table in use.
	for i := range 100 {
		key := fmt.Appendf(nil, "k%d", i%8) // k0..k3 hit, k4..k7 miss
		_, _, ok := p.slot(key, init)
		if ok != (i%8 < 4) {
			t.Fatalf("record %d (%s): ok=%v", i, key, ok)
		}
	}
	if p.bypass {
		t.Fatal("bypassed at a 50% hit rate")
	}
	// A window with a 10% hit rate turns the table off, even for its own keys.
	for i := range 100 {
		key := fmt.Appendf(nil, "x%d", i)
		if i%10 == 0 {
			key = []byte("k0")
		}
		p.slot(key, init)
	}
	if !p.bypass {
		t.Fatal("not bypassed at a 10% hit rate")
	}
	if _, _, ok := p.slot([]byte("k0"), init); ok {
		t.Fatal("a bypassed table still took a record")
	}
	if st, ok := p.get([]byte("k0")); !ok || len(st) != 8 {
		t.Fatal("a bypassed table lost its partial")
	}
	p.reset()
	if p.bypass || p.len() != 0 {
		t.Fatal("reset kept the bypass or the keys")
	}
	if _, _, ok := p.slot([]byte("k0"), init); !ok {
		t.Fatal("reset table refused a key")
	}
}

// TestPartialsShortAndLongKeys: keys of up to 15 bytes live inline, longer ones as strings;
// both kinds (and the empty key, and keys differing only in trailing zero bytes) stay distinct
// and come back sorted and complete.
func TestPartialsShortAndLongKeys(t *testing.T) {
	init := func(b []byte) { clear(b) }
	p := newPartials(1, 100)
	keys := []string{"", "a", "a\x00", "customer-000001", "customer-0000001", "customer-00000010", "zz", "\x00"}
	for n, k := range keys {
		_, st, ok := p.slot([]byte(k), init)
		if !ok {
			t.Fatalf("%q refused", k)
		}
		st[0] = byte(n + 1)
	}
	if p.len() != len(keys) {
		t.Fatalf("len %d, want %d", p.len(), len(keys))
	}
	for n, k := range keys {
		st, ok := p.get([]byte(k))
		if !ok || st[0] != byte(n+1) {
			t.Fatalf("get(%q) = %v, %v; want state %d", k, st, ok, n+1)
		}
	}
	sorted := p.sortedKeys()
	want := append([]string(nil), keys...)
	slices.Sort(want)
	if !slices.Equal(sorted, want) {
		t.Fatalf("sortedKeys = %q, want %q", sorted, want)
	}
	seen := map[string]byte{}
	if err := p.each(func(k, st []byte) error { seen[string(k)] = st[0]; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(keys) {
		t.Fatalf("each saw %d keys, want %d", len(seen), len(keys))
	}
}

// TestPreAggregationIsVisible: a task in backlog reports its pre-aggregated keys in /status and
// in sluice_backlog_preaggregated_keys, and sorts only the keys beyond cache_keys.
func TestPreAggregationIsVisible(t *testing.T) {
	reg := prometheus.NewRegistry()
	plan := mustPlan(t, testConfig("always", 50, 10, 2)) // cache_keys 2
	tk, err := New(plan, testTopic, 0, Deps{
		Store: state.NewMem(), Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(),
		Logger: discardLogger(), Metrics: NewMetrics(reg),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	var recs []*kgo.Record
	for i, k := range []string{"c-1", "c-2", "c-1", "c-3", "c-2", "c-3"} {
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(k),
			Value: []byte(`{"customer_id":"` + k + `","amount":1,"ts":1}`), Timestamp: time.UnixMilli(1)})
	}
	tk.Observe(testTopic, 1<<40, 0)
	if err := tk.Process(testTopic, recs); err != nil {
		t.Fatal(err)
	}
	b := tk.Status().Chains[0].Backlog
	if b == nil || b.PreAggregatedKeys != 2 || b.SortedRecords != 6 {
		t.Fatalf("backlog status %+v, want 2 pre-aggregated keys of 6 records", b)
	}
	if got := tk.chains[0].sorter.Len(); got != 2 {
		t.Fatalf("sorter holds %d records, want the 2 of c-3 (beyond cache_keys)", got)
	}
	var v dto.Metric
	if err := tk.d.Metrics.preKeys.WithLabelValues(testOp, "0").Write(&v); err != nil || v.GetGauge().GetValue() != 2 {
		t.Fatalf("sluice_backlog_preaggregated_keys = %v (%v), want 2", v.GetGauge().GetValue(), err)
	}
}

// TestPartialsGrownState: a state a fold grew past its slot (an aggregate's strings) is the
// key's state from then on, in get, each and later slots; one that shrinks again stays there;
// its bytes count in memBytes; reset forgets it.
func TestPartialsGrownState(t *testing.T) {
	init := func(b []byte) { clear(b) }
	p := newPartials(4, 10)
	i, st, _ := p.slot([]byte("a"), init)
	_, other, _ := p.slot([]byte("b"), init)
	other[0] = 7
	before := p.memBytes()
	grown := append(st, "tail"...) // cap 4: a new slice, as Fold's
	p.set(i, st, grown)
	if p.memBytes() <= before {
		t.Errorf("memBytes %d after growth, %d before", p.memBytes(), before)
	}
	if got, _ := p.get([]byte("a")); string(got[4:]) != "tail" {
		t.Fatalf("get = %q", got)
	}
	if _, st2, _ := p.slot([]byte("a"), init); string(st2[4:]) != "tail" {
		t.Fatalf("slot = %q", st2)
	}
	p.set(i, grown, grown[:5]) // shrunk in place
	if got, _ := p.get([]byte("a")); len(got) != 5 {
		t.Fatalf("get after shrinking = %q", got)
	}
	if got, _ := p.get([]byte("b")); got[0] != 7 || len(got) != 4 {
		t.Fatalf("neighbour = %v", got)
	}
	n := 0
	_ = p.each(func(k, st []byte) error {
		if string(k) == "a" && len(st) == 5 {
			n++
		}
		return nil
	})
	if n != 1 {
		t.Fatal("each did not give the grown state")
	}
	p.reset()
	if len(p.over) != 0 || p.ob != 0 {
		t.Fatal("reset kept grown states")
	}
}
