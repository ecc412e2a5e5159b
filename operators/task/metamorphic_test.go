package task

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

var (
	flagLong = flag.Bool("long", false, "run many more seeds of the metamorphic test")
	flagSeed = flag.Uint64("seed", 0, "run the metamorphic test with this seed only")
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// keyWant is what the good records of one key add up to (the test's own oracle, in exact
// rational arithmetic).
type keyWant struct {
	n       int64
	sum     *big.Rat
	lo, hi  *big.Rat
	touched bool
	// For testConfigFields: the records with amount < 100 (their count and largest amount, nil
	// while none), and the order ids' smallest and largest as strings (byte order).
	cheapN  int64
	cheapHi *big.Rat
	firstID string
	lastID  string
}

// genInput is one random input: records of partition 0 with offsets 0..N-1.
type genInput struct {
	recs []*kgo.Record
	bad  map[int64]string // offset -> kind of bad record
	want map[string]*keyWant
}

// genAmount returns a decimal with 0-4 fractional digits, possibly negative.
func genAmount(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(4) == 0 {
		b.WriteByte('-')
	}
	switch rng.IntN(4) {
	case 0:
		b.WriteString(strconv.Itoa(rng.IntN(10)))
	case 1:
		b.WriteString(strconv.Itoa(rng.IntN(1000)))
	default:
		b.WriteString(strconv.Itoa(rng.IntN(1_000_000)))
	}
	if d := rng.IntN(5); d > 0 {
		b.WriteByte('.')
		for range d {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
	}
	return b.String()
}

func genRecords(rng *rand.Rand, n int) genInput {
	g := genInput{bad: map[int64]string{}, want: map[string]*keyWant{}}
	small := 1 + rng.IntN(8)
	large := max(n, 10)
	space := rng.IntN(3) // 0 small, 1 large, 2 mixed
	pBad := []float64{0, 0.02, 0.1}[rng.IntN(3)]
	base := int64(1_767_225_600_000)
	for i := range n {
		var k int
		switch {
		case space == 0 || (space == 2 && rng.IntN(2) == 0):
			k = rng.IntN(small)
		default:
			k = 1000 + rng.IntN(large)
		}
		key := "c-" + strconv.Itoa(k)
		ts := base + int64(i)*10 + int64(rng.IntN(2000)) - 1000 // out of order
		amt := genAmount(rng)
		kafkaKey := []byte(key)
		value := fmt.Sprintf(`{"order_id":"o-%d","customer_id":%q,"amount":%s,"ts":%d}`, i, key, amt, ts)
		if rng.Float64() < pBad {
			kinds := []string{"json", "no-amount", "no-ts", "mismatch", "nokey", "str-amount", "no-key-field"}
			kind := kinds[rng.IntN(len(kinds))]
			switch kind {
			case "json":
				value = value[:rng.IntN(len(value)-1)]
			case "no-amount":
				value = fmt.Sprintf(`{"order_id":"o-%d","customer_id":%q,"ts":%d}`, i, key, ts)
			case "no-ts":
				value = fmt.Sprintf(`{"order_id":"o-%d","customer_id":%q,"amount":%s}`, i, key, amt)
			case "mismatch":
				kafkaKey = []byte(key + "x")
			case "nokey":
				kafkaKey = nil
			case "str-amount":
				value = fmt.Sprintf(`{"order_id":"o-%d","customer_id":%q,"amount":"lots","ts":%d}`, i, key, ts)
			case "no-key-field":
				value = fmt.Sprintf(`{"order_id":"o-%d","amount":%s,"ts":%d}`, i, amt, ts)
			}
			g.bad[int64(i)] = kind
		} else {
			a, ok := new(big.Rat).SetString(amt)
			if !ok {
				panic(amt)
			}
			w := g.want[key]
			if w == nil {
				w = &keyWant{sum: new(big.Rat), lo: new(big.Rat).Set(a), hi: new(big.Rat).Set(a)}
				g.want[key] = w
			}
			if w.n == 0 {
				w.firstID, w.lastID = fmt.Sprintf("o-%d", i), fmt.Sprintf("o-%d", i)
			}
			w.firstID, w.lastID = min(w.firstID, fmt.Sprintf("o-%d", i)), max(w.lastID, fmt.Sprintf("o-%d", i))
			if a.Cmp(big.NewRat(100, 1)) < 0 {
				w.cheapN++
				if w.cheapHi == nil || a.Cmp(w.cheapHi) > 0 {
					w.cheapHi = new(big.Rat).Set(a)
				}
			}
			w.n++
			w.sum.Add(w.sum, a)
			if a.Cmp(w.lo) < 0 {
				w.lo.Set(a)
			}
			if a.Cmp(w.hi) > 0 {
				w.hi.Set(a)
			}
		}
		g.recs = append(g.recs, &kgo.Record{
			Topic: testTopic, Partition: 0, Offset: int64(i), Key: kafkaKey, Value: []byte(value),
			Timestamp: time.UnixMilli(ts),
		})
	}
	return g
}

// runResult is what one mode's run left behind.
type runResult struct {
	name    string
	state   []string          // Scan of the namespace
	last    map[string]string // last committed output per key
	dead    []string          // committed dead letters: "offset operator"
	offset  int64             // committed input offset
	clLast  map[string]string // last committed changelog value per key (hex)
	clNext  int64             // next changelog offset after the last committed changelog record
	stored  int64             // changelog offset recorded in the store
	summary string
	outs    []*kgo.Record     // every committed output, in order
	reasons map[string]string // committed dead letter offset -> sluice.error
	ended   bool              // EndInput was called after the input (windowed: every window closed)
	branch  []*kgo.Record     // every committed output of a second branch (testConfigBranches), in order
}

type modeSpec struct {
	name      string
	mode      string
	enter     int64
	exit      int64
	cacheKeys int
	every     string // backlog.checkpoint_interval
	loader    int    // LoaderThreshold
	window    int64  // hit-rate window of the backlog pre-aggregation table (0: the default)
	pebble    bool
	pFail     float64 // probability that a produced record fails
	lag       func(d *driver, end int) int64
	config    func(mode string, enter, exit int64, cacheKeys int, every string) string // nil: testConfigEvery
	end       bool                                                                     // call EndInput after the input and checkpoint
}

func runMode(t *testing.T, seed uint64, ms modeSpec, in genInput) runResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(len(ms.name))*7919))
	every := ms.every
	if every == "" {
		every = "0s"
	}
	cfg := testConfigEvery
	if ms.config != nil {
		cfg = ms.config
	}
	plan := mustPlan(t, cfg(ms.mode, ms.enter, ms.exit, ms.cacheKeys, every))
	var store state.Store
	if ms.pebble {
		db, err := state.Open(state.Options{Dir: t.TempDir(), CacheSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		store = db
	} else {
		store = state.NewMem()
	}
	tk := newTestTask(t, plan, store, 64<<10, ms.loader)
	if ms.window > 0 {
		for _, c := range tk.chains {
			if c.part != nil {
				c.part.window = ms.window // a full table may stop being consulted mid-backlog
			}
		}
	}
	if ms.pebble {
		tk.d.Metrics = NewMetrics(prometheus.NewRegistry()) // the metrics code runs too, once
	}
	d := &driver{
		t: t, rng: rng, task: tk, prod: newFakeProducer(), input: in.recs,
		maxBatch:  []int{1, 7, 50, 300}[rng.IntN(4)],
		pCkpt:     []float64{0.02, 0.1, 0.4}[rng.IntN(3)],
		pAbort:    []float64{0, 0.1, 0.3}[rng.IntN(3)],
		maxAborts: 1 + rng.IntN(8),
		lag:       ms.lag,
	}
	tk.d.Producer = d.prod // stateless outputs (a second branch) go into the open transaction
	if ms.pFail > 0 {
		// Injected produce errors: the checkpoint's Err makes the driver abort it.
		d.prod.fail = func(*kgo.Record) error {
			if d.aborts < d.maxAborts && d.rng.Float64() < ms.pFail {
				return errors.New("injected produce error")
			}
			return nil
		}
	}
	d.run()
	if ms.end {
		d.end()
	}
	r := runResult{name: ms.name, state: scanState(t, store), last: d.prod.lastByKey(testSink), offset: d.offset, clLast: map[string]string{},
		outs: d.prod.committed(testSink), reasons: map[string]string{}, ended: ms.end, branch: d.prod.committed(testBranchSink)}
	for _, dl := range d.prod.committed(testGroup + "-dlq") {
		var off, op, reason string
		for _, h := range dl.Headers {
			switch h.Key {
			case "sluice.source.offset":
				off = string(h.Value)
			case "sluice.operator":
				op = string(h.Value)
			case "sluice.error":
				reason = string(h.Value)
			}
		}
		r.dead = append(r.dead, off+" "+op)
		r.reasons[off] = reason
	}
	checks, err := NewStateChecks(plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range d.prod.committed(plan.Chains[0].Changelog) {
		if cl.Value == nil {
			delete(r.clLast, string(cl.Key)) // a tombstone: the window closed
		} else {
			// The state it stands for: itself, or (changelog: output) the one its result rebuilds.
			st, err := checks.Decode(testOp, cl.Key, cl.Value)
			if err != nil {
				t.Fatalf("%s: changelog record %s=%s: %v", ms.name, cl.Key, cl.Value, err)
			}
			r.clLast[string(cl.Key)] = fmt.Sprintf("%x", st)
		}
		r.clNext = cl.Offset + 1
	}
	off, ok, err := store.Offset(state.Namespace{Operator: testOp, Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		r.stored = off
	}
	r.summary = fmt.Sprintf("%s: batch<=%d pCkpt=%.2f pAbort=%.2f(max %d) cache=%d window=%d loader=%d pebble=%v pFail=%v: processed %d, %d commits, %d aborts, %d forced by a switch",
		ms.name, d.maxBatch, d.pCkpt, d.pAbort, d.maxAborts, ms.cacheKeys, ms.window, ms.loader, ms.pebble, ms.pFail, d.processed, d.commits, d.aborts, d.switchTo)
	return r
}

// TestOneAnswerTwoModes is the metamorphic test of DESIGN.md's "One answer, two modes": the
// same random input, run in real-time only, in backlog only, and with random switches (with
// random batch sizes, checkpoints and aborts followed by a rewind), must leave byte-identical
// state, identical last outputs per key, the same dead letters, and everything committed.
func TestOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 50, short: 10, long: 1000, slowUnderRace: false}, func(t *testing.T, seed uint64, i int) {
		oneAnswer(t, seed, i == 0)
	})
}

func oneAnswer(t *testing.T, seed uint64, pebble bool) { oneAnswerWith(t, seed, pebble, nil) }

// seedCounts are how many seeds a metamorphic test runs: normally, with -short (and, when
// slowUnderRace, under the race detector without -long: a seed is ~10x slower there), and with
// -long.
type seedCounts struct {
	normal, short, long int
	slowUnderRace       bool
}

// eachSeed runs fn as a subtest for each of consecutive seeds from a random base (one seed, N,
// with -seed=N; i counts from 0) and stops at the first that fails, with the command that
// reruns it.
func eachSeed(t *testing.T, n seedCounts, fn func(t *testing.T, seed uint64, i int)) {
	t.Helper()
	seeds := n.normal
	if *flagLong {
		seeds = n.long
	}
	if testing.Short() || n.slowUnderRace && raceEnabled && !*flagLong {
		seeds = n.short
	}
	base := uint64(time.Now().UnixNano())
	if *flagSeed != 0 {
		base, seeds = *flagSeed, 1
	}
	t.Logf("base seed %d (rerun one seed with -seed=N)", base)
	for i := range seeds {
		seed := base + uint64(i)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { fn(t, seed, i) }) {
			t.Fatalf("seed %d failed; rerun with: go test ./operators/task -run '%s$' -seed=%d -v", seed, t.Name(), seed)
		}
	}
}

// oneAnswerWith is oneAnswer over the pipeline cfg writes (nil: testConfigEvery's), which must
// hold testConfigEvery's aggregate; it returns the three runs.
func oneAnswerWith(t *testing.T, seed uint64, pebble bool, cfg func(mode string, enter, exit int64, cacheKeys int, every string) string) []runResult {
	return oneAnswerChecked(t, seed, pebble, cfg, nil)
}

// oneAnswerChecked is oneAnswerWith with a further check of each run against the input's
// oracle (nil: none), for the fields a pipeline adds to testConfigEvery's.
func oneAnswerChecked(t *testing.T, seed uint64, pebble bool, cfg func(mode string, enter, exit int64, cacheKeys int, every string) string, check func(t *testing.T, r runResult, in genInput)) []runResult {
	rng := rand.New(rand.NewPCG(seed, 1))
	n := []int{1, 20, 200, 1000, 3000}[rng.IntN(5)]
	in := genRecords(rng, n)
	cacheKeys := []int{1, 3, 16, 100000}[rng.IntN(4)]
	loader := []int{1, 5, 1 << 30}[rng.IntN(3)]
	huge := int64(1) << 40
	realtime := modeSpec{name: "realtime", mode: "never", enter: 50, exit: 10, cacheKeys: cacheKeys,
		lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }}
	every := []string{"0s", "0s", "3ms", "40ms"}
	backlog := modeSpec{name: "backlog", mode: "always", enter: 50, exit: 10, cacheKeys: cacheKeys, loader: loader,
		every: every[rng.IntN(len(every))],
		lag:   func(d *driver, end int) int64 { return huge }}
	enter := int64(2 + rng.IntN(60))
	exit := int64(rng.IntN(int(enter)))
	stick := 0.5 + rng.Float64()/2
	var cur int64
	lagPoints := []int64{0, exit - 1, exit, exit + 1, enter - 1, enter, enter + 1, huge}
	switching := modeSpec{name: "switching", mode: "auto", enter: enter, exit: exit, cacheKeys: []int{1, 2, 5, 100000}[rng.IntN(4)],
		loader: loader, pebble: pebble, pFail: []float64{0, 0, 0.001, 0.01}[rng.IntN(4)], every: every[rng.IntN(len(every))],
		lag: func(d *driver, end int) int64 {
			if d.rng.Float64() > stick {
				cur = max(lagPoints[d.rng.IntN(len(lagPoints))], 0)
			}
			return cur
		}}
	backlog.window = []int64{0, 4, 16}[rng.IntN(3)]
	switching.window = []int64{0, 4, 16}[rng.IntN(3)]
	var res []runResult
	for _, ms := range []modeSpec{realtime, backlog, switching} {
		ms.config = cfg
		res = append(res, runMode(t, seed, ms, in))
	}
	for _, r := range res {
		t.Log(r.summary)
	}
	t.Logf("input: %d records, %d bad, %d keys with good records", n, len(in.bad), len(in.want))

	// Every run must have committed the whole input, and agree with the oracle.
	for _, r := range res {
		if r.offset != int64(n) {
			t.Errorf("%s: committed offset %d, want %d", r.name, r.offset, n)
		}
		checkOracle(t, r, in)
		if check != nil {
			check(t, r, in)
		}
		if r.stored != r.clNext {
			t.Errorf("%s: store's changelog offset %d, want %d (after the last committed changelog record)", r.name, r.stored, r.clNext)
		}
	}
	ref := res[0]
	for _, r := range res[1:] {
		if !slices.Equal(ref.state, r.state) {
			t.Errorf("state differs: %s vs %s:\n%s", ref.name, r.name, diffLines(ref.state, r.state))
		}
		if !mapsEqual(ref.last, r.last) {
			t.Errorf("last outputs differ: %s vs %s:\n%s", ref.name, r.name, diffMaps(ref.last, r.last))
		}
		if !slices.Equal(dedupSorted(ref.dead), dedupSorted(r.dead)) {
			t.Errorf("dead-letter sets differ: %s %v vs %s %v", ref.name, dedupSorted(ref.dead), r.name, dedupSorted(r.dead))
		}
	}
	return res
}

// checkOracle checks one run against the input's own arithmetic: the state matches the last
// changelog record per key, each key's last output has the right count, sum, min and max, and
// every bad record is a committed dead letter (exactly once).
func checkOracle(t *testing.T, r runResult, in genInput) {
	t.Helper()
	if len(r.state) != len(in.want) {
		t.Errorf("%s: %d keys in state, want %d", r.name, len(r.state), len(in.want))
	}
	for _, line := range r.state {
		k, v, _ := strings.Cut(line, "=")
		if r.clLast[k] != v {
			t.Errorf("%s: key %s: state %s but last changelog record %s", r.name, k, v, r.clLast[k])
		}
	}
	for key, w := range in.want {
		out, ok := r.last[key]
		if !ok {
			t.Errorf("%s: no output for key %s", r.name, key)
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Errorf("%s: output %s: %v", r.name, out, err)
			continue
		}
		if got := string(m["n"]); got != strconv.FormatInt(w.n, 10) {
			t.Errorf("%s: key %s: n=%s, want %d (%s)", r.name, key, got, w.n, out)
		}
		for _, f := range []struct {
			name string
			want *big.Rat
		}{{"total", w.sum}, {"lo", w.lo}, {"hi", w.hi}} {
			got, ok := new(big.Rat).SetString(string(m[f.name]))
			if !ok || got.Cmp(f.want) != 0 {
				t.Errorf("%s: key %s: %s=%s, want %s (%s)", r.name, key, f.name, m[f.name], f.want.FloatString(4), out)
			}
		}
	}
	if len(r.last) != len(in.want) {
		t.Errorf("%s: outputs for %d keys, want %d", r.name, len(r.last), len(in.want))
	}
	seen := map[string]int{}
	for _, d := range r.dead {
		off, _, _ := strings.Cut(d, " ")
		seen[off]++
	}
	for off, kind := range in.bad {
		if seen[strconv.FormatInt(off, 10)] == 0 {
			t.Errorf("%s: bad record at offset %d (%s) is not a committed dead letter", r.name, off, kind)
		}
	}
	var dups []string
	for off, c := range seen {
		if c > 1 {
			dups = append(dups, fmt.Sprintf("%s(x%d)", off, c))
		}
		if o, _ := strconv.ParseInt(off, 10, 64); in.bad[o] == "" {
			t.Errorf("%s: good record at offset %s became a dead letter", r.name, off)
		}
	}
	if len(dups) > 0 {
		sort.Strings(dups)
		t.Errorf("%s: dead letters committed more than once (exactly-once): offsets %v", r.name, dups)
	}
}

func dedupSorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffMaps(a, b map[string]string) string {
	var lines []string
	for k, v := range a {
		if b[k] != v {
			lines = append(lines, fmt.Sprintf("  %s: %q vs %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: (none) vs %q", k, v))
		}
	}
	sort.Strings(lines)
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("  ... %d more", len(lines)-10))
	}
	return strings.Join(lines, "\n")
}

func diffLines(a, b []string) string {
	am := map[string]string{}
	bm := map[string]string{}
	for _, l := range a {
		k, v, _ := strings.Cut(l, "=")
		am[k] = v
	}
	for _, l := range b {
		k, v, _ := strings.Cut(l, "=")
		bm[k] = v
	}
	return diffMaps(am, bm)
}

// testConfigFields is testConfigEvery's aggregate with filtered fields and min and max over
// strings (a state whose size changes as its strings do).
func testConfigFields(mode string, enter, exit int64, cacheKeys int, every string) string {
	return strings.Replace(testConfigEvery(mode, enter, exit, cacheKeys, every), `        mean: {avg: amount}
`, `        mean: {avg: amount}
        cheap: {count: {}, where: "amount < 100"}
        cheap_hi: {max: amount, where: "amount < 100"}
        first_id: {min: order_id, type: string}
        last_id: {max: order_id, type: string}
`, 1)
}

// TestOneAnswerFields is TestOneAnswerTwoModes over testConfigFields: where filters and string
// min and max give one answer in every mode and under random switches, the oracle's.
func TestOneAnswerFields(t *testing.T) {
	if !strings.Contains(testConfigFields("never", 1, 0, 1, "0s"), "cheap_hi") {
		t.Fatal("testConfigFields did not add its fields")
	}
	eachSeed(t, seedCounts{normal: 30, short: 5, long: 500}, func(t *testing.T, seed uint64, i int) {
		oneAnswerChecked(t, seed, i == 0, testConfigFields, checkFields)
	})
}

// checkFields checks testConfigFields' extra fields in each key's last output against the
// oracle.
func checkFields(t *testing.T, r runResult, in genInput) {
	t.Helper()
	for key, w := range in.want {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r.last[key]), &m); err != nil {
			continue // checkOracle reports it
		}
		if got := string(m["cheap"]); got != strconv.FormatInt(w.cheapN, 10) {
			t.Errorf("%s: key %s: cheap=%s, want %d", r.name, key, got, w.cheapN)
		}
		if w.cheapHi == nil {
			if got := string(m["cheap_hi"]); got != "null" {
				t.Errorf("%s: key %s: cheap_hi=%s, want null", r.name, key, got)
			}
		} else if got, ok := new(big.Rat).SetString(string(m["cheap_hi"])); !ok || got.Cmp(w.cheapHi) != 0 {
			t.Errorf("%s: key %s: cheap_hi=%s, want %s", r.name, key, m["cheap_hi"], w.cheapHi.FloatString(4))
		}
		for _, f := range []struct{ name, want string }{{"first_id", w.firstID}, {"last_id", w.lastID}} {
			var got string
			if err := json.Unmarshal(m[f.name], &got); err != nil || got != f.want {
				t.Errorf("%s: key %s: %s=%s, want %q", r.name, key, f.name, m[f.name], f.want)
			}
		}
	}
}

// TestAggregateLocalRekey is the aggregate's metamorphic test grouped by its source's key field
// with processing.local_rekey: one chain, which sets each record's key from the field before
// the aggregate (no repartition topic), with the oracle's answer in every mode.
func TestAggregateLocalRekey(t *testing.T) {
	if p := mustPlan(t, localAggConfig("auto", 50, 10, 1, "0s")); len(p.Chains) != 1 || p.Chains[0].LocalKey != "customer_id" {
		t.Fatalf("want one chain keyed locally by customer_id, got %+v", p.Chains)
	}
	eachSeed(t, seedCounts{normal: 20, short: 5, long: 400, slowUnderRace: true}, func(t *testing.T, seed uint64, i int) {
		oneAnswerWith(t, seed, i == 0, localAggConfig)
	})
}

// localAggConfig is testConfigEvery's aggregate with group_by its source's key field and
// processing.local_rekey.
func localAggConfig(mode string, enter, exit int64, cacheKeys int, every string) string {
	return strings.Replace(localRekey(testConfigEvery(mode, enter, exit, cacheKeys, every)),
		"      input: orders\n", "      input: orders\n      group_by: customer_id\n", 1)
}
