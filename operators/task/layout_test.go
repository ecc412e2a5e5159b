package task

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// The test pipeline's fields are total=sum, n=count, lo=min, hi=max, mean=avg (89 bytes of
// state). Two edits of them:
const (
	loField  = "        lo: {min: amount}\n"
	topField = "        top: {max: amount}\n" // same size as lo: only the layout tells them apart
)

func layoutConfig(mode, fields string) string {
	return strings.Replace(testConfig(mode, 1000, 100, 1000), loField, fields, 1)
}

var testNS = state.Namespace{Operator: testOp, Partition: 0}

// openTask is New for partition 0 of plan over store (errors returned, not fatal).
func openTask(t *testing.T, plan *plan.Plan, store state.Store) (*Task, error) {
	t.Helper()
	tk, err := New(plan, testTopic, 0, Deps{
		Store: store, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(),
		Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now, Logger: discardLogger(),
	})
	if err == nil {
		t.Cleanup(tk.Close)
	}
	return tk, err
}

// order returns an input record of key with amount at offset off.
func order(off int64, key, amount string) *kgo.Record {
	return &kgo.Record{Topic: testTopic, Offset: off, Key: []byte(key), Timestamp: time.UnixMilli(1_767_225_600_000 + off),
		Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%s,"ts":%d}`, key, amount, 1_767_225_600_000+off)}
}

// stream processes recs in real-time mode and commits them.
func stream(t *testing.T, tk *Task, prod *fakeProducer, recs ...*kgo.Record) {
	t.Helper()
	tk.Observe(testTopic, 0, 0)
	if err := tk.Process(testTopic, recs); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if err := commitCheckpoint(tk, prod); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
}

// TestLayoutChangeRefused: state written under one aggregate config; the same operator with
// changed fields refuses to start, naming the operator, the change and the way out, and leaves
// the state alone; the original config reopens it and the totals go on from where they were.
func TestLayoutChangeRefused(t *testing.T) {
	store := state.NewMem()
	plan := mustPlan(t, testConfig("never", 1000, 100, 1000))
	prod := newFakeProducer()
	tk, err := openTask(t, plan, store)
	if err != nil {
		t.Fatal(err)
	}
	stream(t, tk, prod, order(0, "c-1", "10"), order(1, "c-1", "5"), order(2, "c-2", "1"))
	tk.Close()
	before := scanState(t, store)

	for name, fields := range map[string]string{"same size": topField, "smaller": "", "larger": loField + topField} {
		changed := mustPlan(t, layoutConfig("never", fields))
		_, err := openTask(t, changed, store)
		var le *LayoutError
		if !errors.Is(err, ErrLayout) || !errors.As(err, &le) {
			t.Fatalf("%s: New with changed fields = %v, want a *LayoutError", name, err)
		}
		if le.Operator != testOp || le.Partition != 0 {
			t.Errorf("%s: error names operator %q partition %d", name, le.Operator, le.Partition)
		}
		msg := err.Error()
		wants := []string{"operator totals, partition 0", "sluice reset -c FILE --operator totals", "meta-totals-changelog"}
		if !strings.Contains(fields, loField) {
			wants = append(wants, "removed lo=min(amount)")
		}
		if strings.Contains(fields, topField) {
			wants = append(wants, "added top=max(amount)")
		}
		for _, want := range wants {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: error does not say %q:\n%s", name, want, msg)
			}
		}
		if after := scanState(t, store); !slices.Equal(before, after) {
			t.Fatalf("%s: the refused start changed the state:\n%s", name, diffLines(before, after))
		}
	}

	tk, err = openTask(t, plan, store)
	if err != nil {
		t.Fatalf("reopening with the same config: %v", err)
	}
	stream(t, tk, prod, order(3, "c-1", "2.5"))
	if got := prod.lastByKey(testSink)["c-1"]; !strings.Contains(got, `"total":17.5`) || !strings.Contains(got, `"n":3`) {
		t.Fatalf("c-1's totals did not go on from the stored state: %s", got)
	}
}

// TestLayoutLocalRekeyRefused: an aggregate grouped by its source's key field keeps its keys in
// other partitions with processing.local_rekey than through a repartition topic, so its layout
// says which: state written one way refuses to start the other way (and back), naming the
// part, and leaves the state alone.
func TestLayoutLocalRekeyRefused(t *testing.T) {
	store := state.NewMem()
	local := mustPlan(t, localAggConfig("never", 1000, 100, 1000, "0s"))
	tk, err := openTask(t, local, store)
	if err != nil {
		t.Fatal(err)
	}
	stream(t, tk, newFakeProducer(), order(0, "c-1", "10"), order(1, "c-2", "1"))
	tk.Close()
	before := scanState(t, store)
	// The chain that reads the repartition topic: the aggregate's, partition 0 of it.
	repart := mustPlan(t, strings.Replace(localAggConfig("never", 1000, 100, 1000, "0s"), "local_rekey: true", "local_rekey: false", 1))
	if len(repart.Chains) != 2 || repart.Chains[1].Keyed == nil {
		t.Fatalf("local_rekey false: want the re-keying chain and the aggregate's, got %+v", repart.Chains)
	}
	repart.Chains = repart.Chains[1:]
	_, err = New(repart, repart.Chains[0].Source.Topic, 0, Deps{
		Store: store, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(),
		Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now, Logger: discardLogger(),
	})
	var le *LayoutError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "removed partitions=input") {
		t.Fatalf("New without local_rekey over its state = %v, want a *LayoutError that names partitions=input", err)
	}
	if after := scanState(t, store); !slices.Equal(before, after) {
		t.Fatalf("the refused start changed the state:\n%s", diffLines(before, after))
	}
	if _, err := openTask(t, local, store); err != nil {
		t.Fatalf("reopening with local_rekey: %v", err)
	}
}

// TestLayoutLegacyState: state of a sluice that stored no layout is accepted when a sampled state
// is valid under the config's layout (and the layout is stored from then on), and refused when
// it is not.
func TestLayoutLegacyState(t *testing.T) {
	store := state.NewMem()
	plan := mustPlan(t, testConfig("never", 1000, 100, 1000))
	prod := newFakeProducer()
	tk, err := openTask(t, plan, store)
	if err != nil {
		t.Fatal(err)
	}
	stream(t, tk, prod, order(0, "c-1", "10"), order(1, "c-2", "1"))
	tk.Close()
	dropLayout := func() {
		t.Helper()
		if err := store.Drop(codec.LayoutNamespace(testNS)); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := store.Get(codec.LayoutNamespace(testNS), codec.LayoutFingerprintKey, nil); ok {
			t.Fatal("layout still stored")
		}
	}

	dropLayout()
	smaller := mustPlan(t, layoutConfig("never", ""))
	_, err = openTask(t, smaller, store)
	var le *LayoutError
	if !errors.As(err, &le) || le.Stored != "" || !strings.Contains(err.Error(), "a sampled state is 89 bytes, where this layout's are 73") {
		t.Fatalf("legacy state of another size: New = %v", err)
	}

	tk, err = openTask(t, plan, store)
	if err != nil {
		t.Fatalf("legacy state of the right size: %v", err)
	}
	fp, ok, err := store.Get(codec.LayoutNamespace(testNS), codec.LayoutFingerprintKey, nil)
	if err != nil || !ok || string(fp) != tk.chains[0].ops.Agg.Layout().Fingerprint() {
		t.Fatalf("stored fingerprint %q, %v, %v; want %s", fp, ok, err, tk.chains[0].ops.Agg.Layout().Fingerprint())
	}
	text, _, _ := store.Get(codec.LayoutNamespace(testNS), codec.LayoutTextKey, nil)
	if string(text) != tk.chains[0].ops.Agg.Layout().String() {
		t.Fatalf("stored layout text %q", text)
	}
	tk.Close()
	// From now on a change is refused with both layouts in the message.
	_, err = openTask(t, smaller, store)
	if !errors.As(err, &le) || le.Stored == "" || le.Stored == le.Current {
		t.Fatalf("changed fields after the layout was stored: New = %v", err)
	}
}

// TestLayoutNoStateYet: with no state for the operator and partition, a stored layout is replaced
// by the config's (there is nothing to misread).
func TestLayoutNoStateYet(t *testing.T) {
	store := state.NewMem()
	tk, err := openTask(t, mustPlan(t, testConfig("never", 1000, 100, 1000)), store)
	if err != nil {
		t.Fatal(err)
	}
	tk.Close()
	tk, err = openTask(t, mustPlan(t, layoutConfig("never", topField)), store)
	if err != nil {
		t.Fatalf("changed fields, no state: %v", err)
	}
	if fp, _, _ := store.Get(codec.LayoutNamespace(testNS), codec.LayoutFingerprintKey, nil); string(fp) != tk.chains[0].layout.fingerprint {
		t.Fatalf("stored fingerprint %q, want the new config's %s", fp, tk.chains[0].layout.fingerprint)
	}
}

// TestChangelogCarriesLayout: every changelog record, of real-time flushes, of switch folds and
// of backlog checkpoints (pending-marked), carries the layout fingerprint, and the pending mark
// stays where it was.
func TestChangelogCarriesLayout(t *testing.T) {
	store := state.NewMem()
	plan := mustPlan(t, testConfigEvery("always", 50, 10, 4, "3ms"))
	tk := newTestTask(t, plan, store, 64<<10, 1<<30)
	in := genRecords(rand.New(rand.NewPCG(3, 4)), 600)
	d := &driver{t: t, rng: rand.New(rand.NewPCG(5, 6)), task: tk, prod: newFakeProducer(), input: in.recs,
		maxBatch: 7, pCkpt: 0.1, lag: func(d *driver, end int) int64 { return 1 << 40 }}
	d.run()
	stream(t, tk, d.prod, order(600, "c-1", "1"), order(601, "c-new", "2"))
	want := tk.chains[0].ops.Agg.Layout().Fingerprint()
	var pending, plain int
	for _, r := range d.prod.committed(plan.Chains[0].Changelog) {
		var fp string
		mark := false
		for _, h := range r.Headers {
			switch h.Key {
			case codec.HeaderLayout:
				fp = string(h.Value)
			case codec.HeaderPending:
				mark = true
			}
		}
		if fp != want {
			t.Fatalf("changelog record %d (key %s) has layout %q, want %s", r.Offset, r.Key, fp, want)
		}
		if mark {
			pending++
		} else {
			plain++
		}
	}
	if pending == 0 || plain == 0 {
		t.Fatalf("%d pending-marked and %d plain changelog records: the test must cover both", pending, plain)
	}
}

// TestStateOfWrongSizeIsAnError: a stored state that does not fit the layout (a corrupt store:
// the layout check makes it impossible otherwise) stops the task in both modes instead of being
// taken for an empty state.
func TestStateOfWrongSizeIsAnError(t *testing.T) {
	for _, mode := range []string{"never", "always"} {
		t.Run(mode, func(t *testing.T) {
			store := state.NewMem()
			tk, err := openTask(t, mustPlan(t, testConfig(mode, 1000, 100, 1000)), store)
			if err != nil {
				t.Fatal(err)
			}
			b := store.NewBatch()
			if err := b.Set(testNS, []byte("c-1"), []byte{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			tk.Observe(testTopic, 5000, 0)
			err = tk.Process(testTopic, []*kgo.Record{order(0, "c-1", "1")})
			if err == nil {
				tk.Observe(testTopic, 0, 0)
				_, err = tk.Checkpoint(newFakeProducer())
			}
			if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), `the state of key "c-1" is 3 bytes, where this layout's are 89`) {
				t.Fatalf("state of 3 bytes: %v", err)
			}
		})
	}
}

// TestStateChecks: the restore's checks are the plan's operators' layouts and ValidState.
func TestStateChecks(t *testing.T) {
	plan := mustPlan(t, testConfig("never", 1000, 100, 1000))
	sc, err := NewStateChecks(plan)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := plan.Chains[0].Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp, text := sc.Layout(testOp)
	if fp != ops.Agg.Layout().Fingerprint() || text != ops.Agg.Layout().String() {
		t.Errorf("Layout(%s) = %s, %s", testOp, fp, text)
	}
	good := make([]byte, ops.Agg.StateSize())
	ops.Agg.InitState(good)
	if !sc.Valid(testOp, good) || sc.Valid(testOp, good[1:]) {
		t.Errorf("Valid does not follow the aggregate's ValidState")
	}
	if fp, _ := sc.Layout("other"); fp != "" || !sc.Valid("other", nil) {
		t.Errorf("an unknown operator is checked")
	}
}

// joinLayoutConfig is a regular join of the orders with their customer's record (unique right)
// under the given select ("" for none: whole records).
func joinLayoutConfig(sel string) string {
	if sel != "" {
		sel = ", select: " + sel
	}
	return combineConfig(fmt.Sprintf(`  - name: pairs
    join: {left: orders, right: customers, unique: right%s}
    output: out
`, sel), "never", false, 1000)
}

// TestLayoutJoinKeptMembers: a regular join with a select keeps only the members of its
// records the select reads, and says so in its layout; it reads a state of whole records (a
// join without a select) as its own and takes it over, so orders stored whole pair as before;
// a config that reads other members (or the whole records) is then refused, since the stored
// records may lack them.
func TestLayoutJoinKeptMembers(t *testing.T) {
	store := state.NewMem()
	prod := newFakeProducer()
	open := func(doc string) (*Task, error) {
		tk, err := NewGroup(mustPlan(t, doc), []string{testTopic, combineCustomers}, 0, Deps{
			Store: store, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Producer: prod,
			Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now, Logger: discardLogger(),
		})
		if err == nil {
			t.Cleanup(tk.Close)
		}
		return tk, err
	}
	feed := func(tk *Task, topic string, recs ...*kgo.Record) {
		t.Helper()
		tk.Observe(topic, 0, 0)
		if err := tk.Process(topic, recs); err != nil {
			t.Fatal(err)
		}
		if err := commitCheckpoint(tk, prod); err != nil {
			t.Fatal(err)
		}
	}
	ord := func(off int64, cust string, amount int) *kgo.Record {
		return &kgo.Record{Topic: testTopic, Offset: off, Key: []byte(cust), Timestamp: time.UnixMilli(1_700_000_000_000 + off),
			Value: fmt.Appendf(nil, `{"region":"r1","amount":%d,"order_id":"o%d","customer_id":%q,"ts":%d}`, amount, off, cust, 1_700_000_000_000+off)}
	}
	whole := joinLayoutConfig("")
	kept := joinLayoutConfig(`[{cust: orders.customer_id}, {amount: orders.amount}, {tier: customers.tier}]`)
	more := joinLayoutConfig(`[{cust: orders.customer_id}, {amount: orders.amount}, {region: orders.region}, {tier: customers.tier}]`)

	tk, err := open(whole)
	if err != nil {
		t.Fatal(err)
	}
	feed(tk, testTopic, ord(0, "c1", 10), ord(1, "c1", 20)) // waiting for their customer, stored whole
	tk.Close()

	if tk, err = open(kept); err != nil {
		t.Fatalf("a join keeping some members refused a state of whole records: %v", err)
	}
	feed(tk, testTopic, ord(2, "c1", 30)) // stored with the select's members only
	feed(tk, combineCustomers, &kgo.Record{Topic: combineCustomers, Offset: 0, Key: []byte("c1"), Timestamp: time.UnixMilli(1_700_000_000_000),
		Value: []byte(`{"id":"c1","tier":2,"ts":1700000000000}`)})
	var got []string
	for _, r := range prod.committed(testSink) {
		got = append(got, string(r.Value))
	}
	want := []string{`{"cust":"c1","amount":10,"tier":2}`, `{"cust":"c1","amount":20,"tier":2}`, `{"cust":"c1","amount":30,"tier":2}`}
	if !slices.Equal(got, want) {
		t.Fatalf("pairs %q, want %q", got, want)
	}
	tk.Close()

	for name, doc := range map[string]string{"more members": more, "whole records": whole} {
		_, err := open(doc)
		var le *LayoutError
		if !errors.As(err, &le) || !strings.Contains(le.Stored, "kept=members(") {
			t.Errorf("%s: a state whose records keep fewer members was not refused: %v", name, err)
		}
	}
	if _, err := open(kept); err != nil {
		t.Fatalf("the same select again: %v", err)
	}
}
