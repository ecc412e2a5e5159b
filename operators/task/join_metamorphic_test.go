package task

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// TestJoinOneAnswerTwoModes is the metamorphic test of "One answer, two modes" for the
// pipeline orders ⋈ customers → aggregate keyed by customer (no group_by, so no repartition
// topic), as_of processing, with the table fully loaded before the stream (FLIP-326's wait):
// the same random orders and customers, run in real-time only, in backlog only, and with random
// switches, checkpoints, aborts and produce failures, must leave byte-identical state,
// identical last outputs per key, the same dead letters, and agree with an exact oracle that
// joins by hand (inner: orders of customers without a row are dropped; left: they go on with
// null). The table's bad rows are dead letters committed exactly once.
//
// After an abort the test re-reads a table only from the offset Task.Aborted names (a table
// idle since the last commit is not re-read); the consumer today rewinds such a table to the
// start of its snapshot (TestJoinAbortedNamesEveryTable).
func TestJoinOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 30, short: 8, long: 600, slowUnderRace: false}, func(t *testing.T, seed uint64, i int) {
		joinAnswer(t, seed, i == 0)
	})
}

// genTable is a random customers topic for the keys of in: most keys get a row (some updated,
// some deleted again by a tombstone), some none, and bad rows (not JSON, a key field that
// differs from the record key) are dead letters that leave the key's row as it was. rows is
// the final row per key (its credit, exact).
type genTable struct {
	recs []*kgo.Record
	rows map[string]*big.Rat
	bad  map[int64]string
}

func genCustomers(rng *rand.Rand, in genInput) genTable {
	g := genTable{rows: map[string]*big.Rat{}, bad: map[int64]string{}}
	var keys []string
	seen := map[string]bool{}
	for _, r := range in.recs {
		if k := string(r.Key); r.Key != nil && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for i := range 1 + rng.IntN(5) {
		keys = append(keys, "nobody-"+strconv.Itoa(i)) // customers without orders
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	pRow := []float64{0.3, 0.7, 1}[rng.IntN(3)]
	add := func(key, value string, bad string) {
		off := int64(len(g.recs))
		r := &kgo.Record{Topic: joinTable, Offset: off, Key: []byte(key), Timestamp: time.UnixMilli(1_767_225_600_000 + off)}
		if value != "" {
			r.Value = []byte(value)
		}
		g.recs = append(g.recs, r)
		if bad != "" {
			g.bad[off] = bad
		}
	}
	row := func(key string) {
		credit := genAmount(rng)
		add(key, fmt.Sprintf(`{"customer_id":%q,"region":"r%d","credit":%s}`, key, rng.IntN(4), credit), "")
		c, ok := new(big.Rat).SetString(credit)
		if !ok {
			panic(credit)
		}
		g.rows[key] = c
	}
	var later []string
	for _, k := range keys {
		if rng.Float64() >= pRow {
			continue
		}
		row(k)
		switch rng.IntN(10) {
		case 0: // updated later (after other keys' rows)
			later = append(later, k)
		case 1: // deleted again
			add(k, "", "")
			delete(g.rows, k)
		case 2: // a bad row: the key keeps its row
			add(k, fmt.Sprintf(`{"customer_id":%q,"credit":`, k), "json")
		case 3:
			add(k, fmt.Sprintf(`{"customer_id":%q,"credit":1}`, k+"x"), "mismatch")
		}
	}
	for _, k := range later {
		row(k)
	}
	return g
}

// joined returns in as the join changes it: with an inner join, the orders of customers
// without a final row are dropped before their aggregate (their bad amounts are no dead
// letters then: the join drops them first); decode failures are dead letters either way.
func joined(in genInput, tb genTable, typ string) genInput {
	if typ != "inner" {
		return in
	}
	out := genInput{recs: in.recs, bad: map[int64]string{}, want: map[string]*keyWant{}}
	for k, w := range in.want {
		if tb.rows[k] != nil {
			out.want[k] = w
		}
	}
	for off, kind := range in.bad {
		if kind == "no-amount" || kind == "str-amount" { // decoded, joined, then projected
			if tb.rows[string(in.recs[off].Key)] == nil {
				continue
			}
		}
		out.bad[off] = kind
	}
	return out
}

func joinAnswer(t *testing.T, seed uint64, pebble bool) {
	rng := rand.New(rand.NewPCG(seed, 2))
	n := []int{1, 20, 200, 1000, 3000}[rng.IntN(5)]
	in := genRecords(rng, n)
	tb := genCustomers(rng, in)
	typ := []string{"inner", "left"}[rng.IntN(2)]
	want := joined(in, tb, typ)
	cacheKeys := []int{1, 3, 16, 100000}[rng.IntN(4)]
	loader := []int{1, 5, 1 << 30}[rng.IntN(3)]
	huge := int64(1) << 40
	realtime := modeSpec{name: "realtime", mode: "never", enter: 50, exit: 10, cacheKeys: cacheKeys,
		lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }}
	every := []string{"0s", "0s", "3ms", "40ms"}
	backlog := modeSpec{name: "backlog", mode: "always", enter: 50, exit: 10, cacheKeys: cacheKeys, loader: loader,
		every: every[rng.IntN(len(every))], lag: func(d *driver, end int) int64 { return huge }}
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
	var res []joinResult
	for _, ms := range []modeSpec{realtime, backlog, switching} {
		res = append(res, runJoinMode(t, seed, ms, typ, in, tb))
	}
	for _, r := range res {
		t.Log(r.summary)
	}
	t.Logf("input: %d orders (%d bad, %d dead letters expected, %d keys expected) and %d customer records (%d bad, %d rows), %s join",
		n, len(in.bad), len(want.bad), len(want.want), len(tb.recs), len(tb.bad), len(tb.rows), typ)

	for _, r := range res {
		if r.offset != int64(n) {
			t.Errorf("%s: committed offset %d, want %d", r.name, r.offset, n)
		}
		checkOracle(t, r.runResult, want)
		if r.stored != r.clNext {
			t.Errorf("%s: store's changelog offset %d, want %d (after the last committed changelog record)", r.name, r.stored, r.clNext)
		}
		if typ == "inner" {
			for key, out := range r.last {
				var m map[string]json.RawMessage
				if err := json.Unmarshal([]byte(out), &m); err != nil {
					continue // checkOracle reported it
				}
				n, _ := strconv.ParseInt(string(m["n"]), 10, 64)
				wantCredit := new(big.Rat).Mul(tb.rows[key], new(big.Rat).SetInt64(n))
				if got, ok := new(big.Rat).SetString(string(m["credit"])); !ok || got.Cmp(wantCredit) != 0 {
					t.Errorf("%s: key %s: credit=%s, want %s (n x the row's credit) (%s)", r.name, key, m["credit"], wantCredit.FloatString(4), out)
				}
			}
		}
		var wantDead []string
		for off := range tb.bad {
			wantDead = append(wantDead, strconv.FormatInt(off, 10))
		}
		slices.Sort(wantDead)
		if got := slices.Sorted(slices.Values(r.tableDead)); !slices.Equal(got, wantDead) {
			t.Errorf("%s: table dead letters at offsets %v, want each of %v exactly once", r.name, got, wantDead)
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
}

type joinResult struct {
	runResult
	tableDead []string // source offsets of the committed dead letters of the table
}

// runJoinMode loads the table (its snapshot, in random batches, then a committed checkpoint,
// as the consumer does before it resumes the orders), then drives the orders like runMode.
func runJoinMode(t *testing.T, seed uint64, ms modeSpec, typ string, in genInput, tb genTable) joinResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(len(ms.name))*7919))
	every := ms.every
	if every == "" {
		every = "0s"
	}
	fields := "{total: {sum: amount}, n: {count: {}}, lo: {min: amount}, hi: {max: amount}, mean: {avg: amount}}"
	if typ == "inner" {
		fields = "{total: {sum: amount}, n: {count: {}}, lo: {min: amount}, hi: {max: amount}, mean: {avg: amount}, credit: {sum: customers.credit}}"
	}
	plan := mustPlan(t, joinConfig(typ, true, "", ms.mode, ms.enter, ms.exit, ms.cacheKeys, every, fields))
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
	prod := newFakeProducer()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	var m *Metrics
	if ms.pebble {
		m = NewMetrics(prometheus.NewRegistry())
	}
	tk, err := NewGroup(plan, []string{joinTable, testTopic}, 0, Deps{
		Store: store, Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(), Producer: prod,
		Clock: clk.Now, Logger: discardLogger(), Metrics: m, LoaderThreshold: ms.loader,
	})
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	t.Cleanup(tk.Close)
	if ms.window > 0 {
		for _, c := range tk.chains {
			if c.part != nil {
				c.part.window = ms.window
			}
		}
	}
	// The snapshot: the streams wait until it is loaded.
	tk.SetTableEnd(joinTable, 0, int64(len(tb.recs)))
	for rest := tb.recs; len(rest) > 0; {
		k := min(len(rest), 1+rng.IntN(50))
		if !tk.Waiting() {
			t.Fatalf("%s: not waiting before the snapshot's end", ms.name)
		}
		if err := tk.ProcessTable(joinTable, rest[:k], -1); err != nil {
			t.Fatal(err)
		}
		rest = rest[k:]
	}
	if tk.Waiting() {
		t.Fatalf("%s: still waiting after the snapshot: %+v", ms.name, tk.Status())
	}
	if pd, _ := ddCheckpoint(t, tk, prod, false); len(tb.recs) > 0 && pd.Offsets[joinTable] != int64(len(tb.recs)) {
		t.Fatalf("%s: the snapshot's checkpoint commits %v", ms.name, pd.Offsets)
	}

	d := &driver{
		t: t, rng: rng, task: tk, prod: prod, input: in.recs,
		maxBatch:  []int{1, 7, 50, 300}[rng.IntN(4)],
		pCkpt:     []float64{0.02, 0.1, 0.4}[rng.IntN(3)],
		pAbort:    []float64{0, 0.1, 0.3}[rng.IntN(3)],
		maxAborts: 1 + rng.IntN(8),
		lag:       ms.lag,
	}
	if ms.pFail > 0 {
		d.prod.fail = func(r *kgo.Record) error {
			if d.aborts < d.maxAborts && d.rng.Float64() < ms.pFail {
				return fmt.Errorf("injected produce error")
			}
			return nil
		}
	}
	d.run()
	r := joinResult{runResult: runResult{name: ms.name, state: scanState(t, store), last: prod.lastByKey(testSink), offset: d.offset,
		clLast: map[string]string{}, outs: prod.committed(testSink), reasons: map[string]string{}}}
	for _, dl := range prod.committed(testGroup + "-dlq") {
		off := hdr(dl, codec.HeaderSourceOffset)
		if hdr(dl, codec.HeaderSourceTopic) == joinTable {
			r.tableDead = append(r.tableDead, off)
			continue
		}
		r.dead = append(r.dead, off+" "+hdr(dl, codec.HeaderOperator))
		r.reasons[off] = hdr(dl, codec.HeaderError)
	}
	for _, cl := range prod.committed(testGroup + "-" + testOp + "-changelog") {
		if cl.Value == nil {
			delete(r.clLast, string(cl.Key))
		} else {
			r.clLast[string(cl.Key)] = fmt.Sprintf("%x", cl.Value)
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
	r.summary = fmt.Sprintf("%s: batch<=%d pCkpt=%.2f pAbort=%.2f(max %d) cache=%d window=%d loader=%d pebble=%v pFail=%v: processed %d, %d commits, %d aborts, %d forced by a switch; status %s",
		ms.name, d.maxBatch, d.pCkpt, d.pAbort, d.maxAborts, ms.cacheKeys, ms.window, ms.loader, ms.pebble, ms.pFail, d.processed, d.commits, d.aborts, d.switchTo,
		strings.Join(chainModes(tk), ","))
	return r
}

func chainModes(tk *Task) []string {
	var out []string
	for _, c := range tk.Status().Chains {
		out = append(out, c.Mode)
	}
	return out
}
