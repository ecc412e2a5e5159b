package task

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// The regular join's metamorphic test: orders (left) and payments (right) of a few keys or many,
// fed in random interleavings, joined without a window (every record of both sides kept, or one
// side unique: a key's first payment, or first order, is the one), in backlog mode, real-time
// mode and random switches, with aborts. Every run must commit exactly the pairs an oracle
// computes: per key, every order with every payment (unique: the key's first of that side with
// every record of the other).

func regularJoinConfig(mode, unique string, cacheKeys int, sel, where bool) string {
	u := ""
	if unique != "" {
		u = ", unique: " + unique
	}
	if sel {
		u += pairSelect
	}
	if where {
		u += pairWhere
	}
	return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: 100, exit_lag: 20, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
  payments: {topic: %s, key: customer_id, timestamp: ts}
operators:
  - name: %s
    join: {left: orders, right: payments%s}
    output: out
sinks:
  out: {topic: %s}
`, cacheKeys, mode, cgOrders, cgRefunds, sjOp, u, cgSink)
}

func genRegularJoin(rng *rand.Rand, n int) (left, right []*kgo.Record, recs [2][]sjRec) {
	keys := 1 + rng.IntN([]int{3, 30, 300}[rng.IntN(3)])
	for i := range n {
		side := rng.IntN(2)
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		value := fmt.Sprintf(`{"id":%d,"customer_id":%q,"ts":%d}`, i, key, 1_767_225_600_000+int64(i))
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		if side == 0 {
			r.Topic, r.Offset = cgOrders, int64(len(left))
			left = append(left, r)
		} else {
			r.Topic, r.Offset = cgRefunds, int64(len(right))
			right = append(right, r)
		}
		recs[side] = append(recs[side], sjRec{side: side, value: value, key: key})
	}
	return left, right, recs
}

func regularJoinOracle(recs [2][]sjRec, unique string, sel, where bool) []string {
	// With a unique side, only its first record of each key pairs.
	keep := [2]func(sjRec) bool{}
	for side, name := range []string{"left", "right"} {
		first := map[string]bool{}
		keep[side] = func(r sjRec) bool {
			if unique != name {
				return true
			}
			if first[r.key] {
				return false
			}
			first[r.key] = true
			return true
		}
	}
	var lefts, rights []sjRec
	for _, l := range recs[0] {
		if keep[0](l) {
			lefts = append(lefts, l)
		}
	}
	for _, r := range recs[1] {
		if keep[1](r) {
			rights = append(rights, r)
		}
	}
	var out []string
	for _, r := range rights {
		for _, l := range lefts {
			if l.key == r.key && (!where || pairHolds(l.value, r.value)) {
				out = append(out, pairLine(l.key, l.value, r.value, sel))
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestRegularJoinOneAnswerTwoModes(t *testing.T) {
	seeds := 15
	if *flagLong {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 20))
			unique := []string{"", "right", "left"}[rng.IntN(3)]
			sel, where := rng.IntN(2) == 0, rng.IntN(2) == 0
			left, right, recs := genRegularJoin(rng, 50+rng.IntN(600))
			want := regularJoinOracle(recs, unique, sel, where)
			for run, mode := range []string{"never", "always", "auto", "auto", "auto"} {
				rr := rand.New(rand.NewPCG(seed, uint64(run)))
				r := runTwoInputs(t, rr, run, func(cacheKeys int) string { return regularJoinConfig(mode, unique, cacheKeys, sel, where) }, left, right)
				if !slices.Equal(r.got, want) {
					t.Fatalf("run %d (%s, unique %q, select %v, where %v, cache %d, aborts %d): pairs differ from the oracle (%d got, %d want):\n%s",
						run, mode, unique, sel, where, r.cacheKeys, r.d.aborts, len(r.got), len(want), diffLines(want, r.got))
				}
				if r.dead != 0 {
					t.Fatalf("run %d (%s): %d dead letters", run, mode, r.dead)
				}
			}
			t.Logf("unique %q, select %v, where %v: %d pairs", unique, sel, where, len(want))
		})
	}
}

// TestOutboxCheckpointsBeforeBacklog: outputs of real-time calls that changed no state (a
// regular join's pair of a record with its key's unique record) make entering backlog ask for
// a checkpoint first, as a dirty cache does. Once the chain holds a backlog its progress stays
// put until the fold, so a checkpoint after the switch would commit the pair without its
// offset, and an abort before the fold would replay the record and write the pair again.
func TestOutboxCheckpointsBeforeBacklog(t *testing.T) {
	plan := mustPlan(t, regularJoinConfig("auto", "right", 100000, false, false))
	tk, err := NewGroup(plan, []string{cgOrders, cgRefunds}, 0, Deps{
		Store: state.NewMem(), Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(),
		Clock: (&stepClock{}).Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	p := newFakeProducer()
	record := func(topic string, v string) []*kgo.Record {
		return []*kgo.Record{{Topic: topic, Key: []byte("c-1"), Value: []byte(v), Offset: 0}}
	}
	checkpoint := func() {
		pd, err := tk.Checkpoint(p)
		if err != nil {
			t.Fatal(err)
		}
		p.commit()
		if err := tk.Committed(pd); err != nil {
			t.Fatal(err)
		}
	}
	// Real time: the key's payment (stored), committed; then an order that joins it (a pair in
	// the outbox, no state written: the unique side's record is the only one kept).
	tk.BeforeBatch(cgRefunds, Lag{})
	if err := tk.Process(cgRefunds, record(cgRefunds, `{"id":1,"customer_id":"c-1","ts":1767225600000}`)); err != nil {
		t.Fatal(err)
	}
	checkpoint()
	tk.BeforeBatch(cgOrders, Lag{})
	if err := tk.Process(cgOrders, record(cgOrders, `{"id":2,"customer_id":"c-1","ts":1767225600001}`)); err != nil {
		t.Fatal(err)
	}
	if !tk.BeforeBatch(cgOrders, Lag{Before: 1 << 40, After: 1 << 40}) {
		t.Fatal("entering backlog with a pair waiting in the outbox asked for no checkpoint")
	}
	checkpoint()
	if got := len(p.committed(cgSink)); got != 1 {
		t.Fatalf("%d pairs committed, want 1", got)
	}
}

// TestJoinWhereBeforeSorter: a regular join with a unique side and a where, in backlog mode
// (and auto, with aborts), drops before its sorter the records whose pair with their key's
// unique record, there before them, fails the where (joinFilter with the where alone): they
// would give no row, and the join keeps nothing beside a unique record. Its pairs are the
// oracle's, and it drops some. (The sort budget leaves room for the filter's memory, which it
// reserves 1 MiB at a time; runTwoInputs's small one is the sorters' alone.)
func TestJoinWhereBeforeSorter(t *testing.T) {
	defer func(b int64) { twoInputsBudget = b }(twoInputsBudget)
	twoInputsBudget = 8 << 20
	var filtered int64
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 21))
		unique := []string{"right", "left"}[rng.IntN(2)]
		sel := rng.IntN(2) == 0
		left, right, recs := genRegularJoin(rng, 200+rng.IntN(600))
		want := regularJoinOracle(recs, unique, sel, true)
		for run, mode := range []string{"always", "auto"} {
			rr := rand.New(rand.NewPCG(seed, uint64(run)))
			before := joinFiltered.Load()
			r := runTwoInputs(t, rr, run, func(cacheKeys int) string { return regularJoinConfig(mode, unique, cacheKeys, sel, true) }, left, right)
			if mode == "always" {
				filtered += joinFiltered.Load() - before
			}
			if !slices.Equal(r.got, want) {
				t.Fatalf("seed %d run %d (%s, unique %q, select %v, cache %d, aborts %d): pairs differ from the oracle (%d got, %d want):\n%s",
					seed, run, mode, unique, sel, r.cacheKeys, r.d.aborts, len(r.got), len(want), diffLines(want, r.got))
			}
			if r.dead != 0 {
				t.Fatalf("seed %d run %d (%s): %d dead letters", seed, run, mode, r.dead)
			}
		}
	}
	if filtered == 0 {
		t.Error("the join's where dropped no record before the sorter")
	}
	t.Logf("%d records dropped before the sorter", filtered)
}
