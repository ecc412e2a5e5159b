package task

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// The cogroup's metamorphic test: two inputs (orders and refunds) co-grouped by customer, fed
// to one task in random interleavings of their batches, in backlog mode, real-time mode and
// random switches of either input (the operator is in backlog while any input is), with random
// checkpoints and aborts. Every run must end with the same state bytes and the same last output
// per key, and those outputs must match an exact oracle.

const (
	cgOrders  = "cg-orders"
	cgRefunds = "cg-refunds"
	cgOp      = "balance"
	cgSink    = "balance-out"
)

func cogroupConfig(mode string, enter, exit int64, cacheKeys int) string {
	return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: %d, exit_lag: %d, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
  refunds: {topic: %s, key: customer_id, timestamp: ts}
operators:
  - name: %s
    cogroup:
      inputs: [orders, refunds]
      fields:
        spent: {sum: amount, from: orders}
        orders: {count: {}, from: orders}
        biggest: {max: amount, from: orders}
        refunded: {sum: amount, from: refunds}
        refunds: {count: {}, from: refunds}
        smallest_refund: {min: amount, from: refunds}
    output: out
sinks:
  out: {topic: %s}
`, cacheKeys, enter, exit, mode, cgOrders, cgRefunds, cgOp, cgSink)
}

// cgWant is one key's oracle.
type cgWant struct {
	spent, refunded  *big.Rat
	orders, refunds  int64
	biggest, smallst *big.Rat
}

func genCogroup(rng *rand.Rand, n int) (orders, refunds []*kgo.Record, want map[string]*cgWant) {
	want = map[string]*cgWant{}
	keys := 1 + rng.IntN([]int{5, 50, 2000}[rng.IntN(3)])
	base := int64(1_767_225_600_000)
	for i := range n {
		isRefund := rng.IntN(3) == 0
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		amt := genAmount(rng)
		value := fmt.Sprintf(`{"id":%d,"customer_id":%q,"amount":%s,"ts":%d}`, i, key, amt, base+int64(i))
		bad := rng.IntN(50) == 0
		if bad {
			value = fmt.Sprintf(`{"id":%d,"customer_id":%q,"ts":%d}`, i, key, base+int64(i)) // no amount
		}
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		if isRefund {
			r.Topic, r.Offset = cgRefunds, int64(len(refunds))
			refunds = append(refunds, r)
		} else {
			r.Topic, r.Offset = cgOrders, int64(len(orders))
			orders = append(orders, r)
		}
		if bad {
			continue
		}
		a, _ := new(big.Rat).SetString(amt)
		w := want[key]
		if w == nil {
			w = &cgWant{spent: new(big.Rat), refunded: new(big.Rat)}
			want[key] = w
		}
		if isRefund {
			w.refunded.Add(w.refunded, a)
			w.refunds++
			if w.smallst == nil || a.Cmp(w.smallst) < 0 {
				w.smallst = new(big.Rat).Set(a)
			}
		} else {
			w.spent.Add(w.spent, a)
			w.orders++
			if w.biggest == nil || a.Cmp(w.biggest) > 0 {
				w.biggest = new(big.Rat).Set(a)
			}
		}
	}
	return orders, refunds, want
}

// cgDriver plays the consumer for a cogroup task of two topics.
type cgDriver struct {
	t      *testing.T
	rng    *rand.Rand
	task   *Task
	prod   *fakeProducer
	inputs map[string][]*kgo.Record
	pos    map[string]int
	lagMul map[string]int64 // lag reported = remaining × lagMul (random per run: one input may look like a backlog)
	pAbort float64
	aborts int
	// backlogBatches counts batches processed while the operator was in backlog, per input.
	backlogBatches map[string]int
}

func (d *cgDriver) checkpoint(mayAbort bool) (aborted bool) {
	if d.task.WantsFold() && d.rng.IntN(2) == 0 {
		if err := d.task.Prepare(context.Background(), d.prod); err != nil {
			d.t.Fatalf("Prepare: %v", err)
		}
	}
	pd, err := d.task.Checkpoint(d.prod)
	if err != nil {
		d.t.Fatalf("Checkpoint: %v", err)
	}
	if mayAbort && d.aborts < 6 && d.rng.Float64() < d.pAbort {
		d.prod.abort()
		seek := d.task.Aborted(pd)
		for topic := range d.inputs {
			if off, ok := seek[topic]; ok {
				d.pos[topic] = int(off)
			} else {
				d.pos[topic] = 0
			}
		}
		d.aborts++
		return true
	}
	d.prod.commit()
	if err := d.task.Committed(pd); err != nil {
		d.t.Fatalf("Committed: %v", err)
	}
	return false
}

func (d *cgDriver) run() {
	topics := []string{cgOrders, cgRefunds}
	for guard := 0; ; guard++ {
		if guard > 100000 {
			d.t.Fatalf("no progress: %+v", d.pos)
		}
		var open []string
		for _, tp := range topics {
			if d.pos[tp] < len(d.inputs[tp]) {
				open = append(open, tp)
			}
		}
		if len(open) == 0 {
			need := false
			for _, tp := range topics {
				need = d.task.Observe(tp, 0, 0) || need
			}
			if need && d.checkpoint(false) {
				continue
			}
			if d.checkpoint(false) {
				continue
			}
			if d.task.WantsFold() || d.task.NeedsCheckpoint() {
				continue
			}
			return
		}
		tp := open[d.rng.IntN(len(open))]
		in := d.inputs[tp]
		end := min(d.pos[tp]+1+d.rng.IntN(40), len(in))
		lag := Lag{Before: int64(len(in)-d.pos[tp]) * d.lagMul[tp], After: int64(len(in)-end) * d.lagMul[tp]}
		if d.task.BeforeBatch(tp, lag) {
			if d.checkpoint(true) {
				continue
			}
		}
		if d.task.InBacklog(tp) {
			d.backlogBatches[tp]++
		}
		if err := d.task.Process(tp, in[d.pos[tp]:end]); err != nil {
			d.t.Fatalf("Process: %v", err)
		}
		d.pos[tp] = end
		d.task.AfterBatch(tp, lag)
		if d.task.WantsFold() || d.task.NeedsCheckpoint() || d.rng.IntN(5) == 0 {
			d.checkpoint(true)
		}
	}
}

func TestCogroupOneAnswerTwoModes(t *testing.T) {
	seeds := 12
	if *flagLong {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { cogroupOneAnswer(t, seed) })
	}
}

func cogroupOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	orders, refunds, want := genCogroup(rng, 200+rng.IntN(1500))
	type result struct {
		state []string
		out   map[string]string
	}
	var results []result
	for run, mode := range []string{"never", "always", "auto", "auto", "auto"} {
		rr := rand.New(rand.NewPCG(seed, uint64(run)))
		cacheKeys := []int{1, 8, 100000}[rr.IntN(3)]
		plan := mustPlan(t, cogroupConfig(mode, 100, 20, cacheKeys))
		store := state.NewMem()
		tk, err := NewGroup(plan, []string{cgOrders, cgRefunds}, 0, Deps{
			Store: store, Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(),
			Clock: (&stepClock{}).Now, Logger: discardLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		d := &cgDriver{t: t, rng: rr, task: tk, prod: newFakeProducer(),
			inputs:         map[string][]*kgo.Record{cgOrders: orders, cgRefunds: refunds},
			pos:            map[string]int{},
			lagMul:         map[string]int64{cgOrders: int64(1 + rr.IntN(3)*100), cgRefunds: int64(1 + rr.IntN(3)*100)},
			pAbort:         []float64{0, 0.1, 0.3}[rr.IntN(3)],
			backlogBatches: map[string]int{},
		}
		d.run()
		switch {
		case mode == "never" && len(d.backlogBatches) > 0:
			t.Fatalf("never: batches in backlog %v", d.backlogBatches)
		case mode == "always" && (d.backlogBatches[cgOrders] == 0 || d.backlogBatches[cgRefunds] == 0):
			t.Fatalf("always: both inputs must be sorted in backlog, got %v", d.backlogBatches)
		}
		t.Logf("run %d (%s, cache %d, lag× %v, aborts %d): batches in backlog %v", run, mode, cacheKeys, d.lagMul, d.aborts, d.backlogBatches)
		var st []string
		if err := store.Scan(state.Namespace{Operator: cgOp, Partition: 0}, func(k, v []byte) error {
			st = append(st, fmt.Sprintf("%s=%x", k, v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		results = append(results, result{state: st, out: d.prod.lastByKey(cgSink)})
		tk.Close()
	}
	for i, r := range results[1:] {
		if !slices.Equal(r.state, results[0].state) {
			t.Fatalf("run %d: state differs from the never run:\n%s", i+1, diffLines(results[0].state, r.state))
		}
		if !mapsEqual(r.out, results[0].out) {
			t.Fatalf("run %d: outputs differ from the never run:\n%s", i+1, diffMaps(results[0].out, r.out))
		}
	}
	// The oracle.
	out := results[0].out
	if len(out) != len(want) {
		t.Fatalf("%d keys out, want %d", len(out), len(want))
	}
	for key, w := range want {
		got := out[key]
		exp := fmt.Sprintf(`{"key":%q,"biggest":%s,"orders":%d,"refunded":%s,"refunds":%d,"smallest_refund":%s,"spent":%s}`,
			key, ratOrNull(w.biggest), w.orders, ratText(w.refunded), w.refunds, ratOrNull(w.smallst), ratText(w.spent))
		if got != exp {
			t.Fatalf("key %s:\n got  %s\n want %s", key, got, exp)
		}
	}
}

func ratOrNull(r *big.Rat) string {
	if r == nil {
		return "null"
	}
	return ratText(r)
}

// ratText renders an exact decimal as the aggregate does: no trailing zeros.
func ratText(r *big.Rat) string {
	s := r.FloatString(8)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	if s == "-0" {
		return "0"
	}
	return s
}

// twoInputRun is one run of a two-input pipeline's metamorphic test (the inputs on cgOrders
// and cgRefunds): what it committed to the sink as sorted "key value" lines, how many dead
// letters and what they hold (sorted lines of their headers, key and value), and its driver and
// cache size for the failure message.
type twoInputRun struct {
	got       []string // committed outputs, "key value" lines, sorted
	ordered   []string // the same in commit order
	dead      int
	dlq       []string
	d         *cgDriver
	cacheKeys int
}

// twoInputsBudget is runTwoInputs's sort budget: small, so that its sorters spill.
var twoInputsBudget int64 = 64 << 10

// runTwoInputs runs config(cacheKeys) in mode over the inputs with the driver of cogroup_test.go:
// random batches of either input, lags, checkpoints and aborts from rr; the store is Pebble on
// run 4, else in memory.
func runTwoInputs(t *testing.T, rr *rand.Rand, run int, config func(cacheKeys int) string, orders, refunds []*kgo.Record) twoInputRun {
	t.Helper()
	cacheKeys := []int{1, 8, 100000}[rr.IntN(3)]
	plan := mustPlan(t, config(cacheKeys))
	var store state.Store = state.NewMem()
	if run == 4 {
		db, err := state.Open(state.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		store = db
	}
	tk, err := NewGroup(plan, []string{cgOrders, cgRefunds}, 0, Deps{
		Store: store, Budget: sorter.NewBudget(twoInputsBudget), SortDir: t.TempDir(),
		Clock: (&stepClock{}).Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	d := &cgDriver{t: t, rng: rr, task: tk, prod: newFakeProducer(),
		inputs:         map[string][]*kgo.Record{cgOrders: orders, cgRefunds: refunds},
		pos:            map[string]int{},
		lagMul:         map[string]int64{cgOrders: int64(1 + rr.IntN(3)*100), cgRefunds: int64(1 + rr.IntN(3)*100)},
		pAbort:         []float64{0, 0.1, 0.3}[rr.IntN(3)],
		backlogBatches: map[string]int{},
	}
	d.run()
	r := twoInputRun{d: d, cacheKeys: cacheKeys, dead: len(d.prod.committed("meta-dlq"))}
	for _, rec := range d.prod.committed(cgSink) {
		r.got = append(r.got, string(rec.Key)+" "+string(rec.Value))
		r.ordered = append(r.ordered, string(rec.Key)+" "+string(rec.Value))
	}
	sort.Strings(r.got)
	for _, rec := range d.prod.committed("meta-dlq") {
		var b strings.Builder
		for _, h := range rec.Headers {
			fmt.Fprintf(&b, "%s=%q ", h.Key, h.Value)
		}
		fmt.Fprintf(&b, "key=%q value=%q", rec.Key, rec.Value)
		r.dlq = append(r.dlq, b.String())
	}
	sort.Strings(r.dlq)
	return r
}
