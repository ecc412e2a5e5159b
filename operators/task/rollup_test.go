package task

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// The rollup tests run event-time windows over the finals of windows (attributes.go): several
// writer tasks aggregate their partitions into tumbling windows (emit: final), and one reader
// task aggregates their finals, read from the output topic in the order the writers commit
// them, into larger windows.

const (
	rollupOp = "rollup"
	topOp    = "top"
)

// rollupConfig is the two-stage pipeline: testOp's windows of size w.size (sessions: of gap
// w.size; grace, max_delay of w), then rollup's tumbling windows of size bsize (grace g2) over their finals; with top > 0,
// a third stage, top's tumbling windows of that size (grace g3) over rollup's finals.
func rollupConfig(mode string, cacheKeys int, w windowSpec, sessions bool, bsize, g2 int64, idle string, top, g3 int64) string {
	first := fmt.Sprintf("{tumbling: %dms, grace: %dms}", w.size, w.grace)
	if sessions {
		first = fmt.Sprintf("{session: %dms, grace: %dms}", w.size, w.grace)
	}
	last := ""
	if top > 0 {
		last = fmt.Sprintf(`
  - name: %s
    aggregate:
      input: %s
      window: {tumbling: %dms, grace: %dms}
      emit: final
      fields: {total: {sum: total}, n: {sum: n}}`, topOp, rollupOp, top, g3)
	}
	return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: %s
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: 40, exit_lag: 5, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms, idle_after: %s}}
operators:
  - name: %s
    aggregate:
      input: orders
      window: %s
      emit: final
      fields: {total: {sum: amount}, n: {count: {}}}
  - name: %s
    aggregate:
      input: %s
      window: {tumbling: %dms, grace: %dms}
      emit: final
      fields: {total: {sum: total}, n: {sum: n}}%s
    output: out
sinks:
  out: {topic: %s, format: json}
`, testGroup, cacheKeys, mode, testTopic, w.maxDelay, idle, testOp, first, rollupOp, testOp, bsize, g2, last, testSink)
}

// TestRollupOneAnswer is the metamorphic test of windows over windows: 1 to 4 writers, each in
// its own random mode (real time, backlog, random switches) with random batches, checkpoints
// and aborts, stepped in a random interleaving, and a reader in its own random mode reading
// their committed finals and attribute records as they commit. The reader must emit exactly
// the rollup of the writers' finals for every large window the smallest of the writers'
// output watermarks closed, each once, and none other; no final of a writer is late there.
// Some seeds add a writer whose partition is empty: with watermark.idle_after it says idle,
// and the others' watermarks close the reader's windows without it. Half the seeds add a third
// stage over the reader's finals (the reader both reads and writes timed results): its finals
// must be the exact rollup of the reader's, for every window the reader's announced watermark
// closed.
func TestRollupOneAnswer(t *testing.T) {
	seeds := 40
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { rollupOneAnswer(t, seed) })
	}
}

func rollupOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x7011))
	size := []int64{100, 250, 500}[rng.IntN(3)]
	w := windowSpec{size: size, advance: size, grace: []int64{0, 50, 400}[rng.IntN(3)], maxDelay: []int64{0, 30, 200}[rng.IntN(3)], final: true}
	bsize := size * int64(2+rng.IntN(4))
	g2 := []int64{0, 0, 300}[rng.IntN(3)]
	writers := 1 + rng.IntN(4)
	sessions := rng.IntN(3) == 0 // the first stage's windows are sessions of gap size
	empty := rng.IntN(3) == 0    // one more writer, of an empty partition, which goes idle
	idle := "0s"
	if empty {
		writers++
		idle = "1h" // no writer with input is ever idle: the step clock moves 1ms per reading
	}
	outTopic := testGroup + "-" + testOp + "-output"
	outTopic2 := testGroup + "-" + rollupOp + "-output"
	var top, g3 int64
	if rng.IntN(2) == 0 {
		bsize = size * 2 // smaller windows at both stages, so the third closes some
		top, g3 = bsize*int64(2+rng.IntN(2)), []int64{0, 200}[rng.IntN(2)]
	}
	modes := []string{"never", "always", "auto"}
	pebble := rng.IntN(2) == 0

	newStore := func() state.Store {
		if !pebble {
			return state.NewMem()
		}
		db, err := state.Open(state.Options{Dir: t.TempDir(), CacheSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	// The reader (partition 0 of outTopic) is the only writer of outTopic2.
	internal := map[string]int32{outTopic: int32(writers), outTopic2: 1}
	newTask := func(mode, topic string, p int32, clk *stepClock) *Task {
		plan := mustPlan(t, rollupConfig(mode, 1+rng.IntN(30), w, sessions, bsize, g2, idle, top, g3))
		tk, err := New(plan, topic, p, Deps{Store: newStore(), Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(),
			Clock: clk.Now, Logger: discardLogger(), InternalPartitions: internal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tk.Close)
		return tk
	}
	newDriver := func(tk *Task, topic string, input []*kgo.Record) *driver {
		d := &driver{t: t, rng: rng, task: tk, prod: newFakeProducer(), topic: topic, input: input,
			maxBatch: []int{1, 7, 50}[rng.IntN(3)], pCkpt: []float64{0.05, 0.3}[rng.IntN(2)],
			pAbort: []float64{0, 0.2}[rng.IntN(2)], maxAborts: 1 + rng.IntN(5), offset: -1,
			lag: func(d *driver, end int) int64 { return int64(len(d.input)-end) + int64(rng.IntN(60)) }}
		tk.d.Producer = d.prod
		return d
	}

	// The reader task reads partition 0 of the output topic: every final (the fake producer puts
	// a record of partition -1 there) and the attribute records addressed to it.
	reader := newDriver(newTask(modes[rng.IntN(3)], outTopic, 0, &stepClock{now: time.Unix(1_700_000_000, 0)}), outTopic, nil)
	var third *driver
	if top > 0 {
		third = newDriver(newTask(modes[rng.IntN(3)], outTopic2, 0, &stepClock{now: time.Unix(1_700_000_000, 0)}), outTopic2, nil)
		reader.prod.onCommit = func(txn []*kgo.Record) {
			for _, r := range txn {
				if r.Topic == outTopic2 && r.Partition == 0 {
					c := *r
					c.Offset = int64(len(third.input))
					third.input = append(third.input, &c)
				}
			}
		}
	}
	var summary []string
	ins := make([]winInput, writers)
	type final struct { // a final of the first stage: its key, event time (end - 1) and totals
		key string
		at  int64
		n   int64
		sum *big.Rat
	}
	fins := make([][]final, writers)
	ws := make([]*driver, writers)
	for p := range writers {
		clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
		if empty && p == writers-1 {
			ins[p] = winInput{wm: math.MaxInt64, closed: func(int64) bool { return false }}
		} else {
			ins[p] = genWindowInput(rng, 200+rng.IntN(800), w)
		}
		for _, r := range ins[p].recs {
			r.Partition = int32(p)
		}
		if sessions && ins[p].recs != nil {
			lines, late, _, _ := sessionOracle(ins[p].recs, ins[p].bad, sessionSpec{gap: w.size, grace: w.grace, maxDelay: w.maxDelay}, false)
			ins[p].late = late
			for _, l := range lines {
				var f final
				var start, end int64
				var sum, lo, hi string
				if _, err := fmt.Sscan(l, &f.key, &start, &end, &f.n, &sum, &lo, &hi); err != nil {
					t.Fatalf("session oracle line %q: %v", l, err)
				}
				f.at, f.sum = end-1, new(big.Rat)
				f.sum.SetString(sum)
				fins[p] = append(fins[p], f)
			}
		} else {
			for k, ww := range ins[p].want {
				if key, s, _ := cutAt(k); ins[p].closed(s) {
					fins[p] = append(fins[p], final{key: key, at: s + w.size - 1, n: ww.n, sum: ww.sum})
				}
			}
		}
		mode := modes[rng.IntN(3)]
		ws[p] = newDriver(newTask(mode, testTopic, int32(p), clk), testTopic, ins[p].recs)
		if empty && p == writers-1 {
			clk.now = clk.now.Add(2 * time.Hour) // idle from its first checkpoint on
		}
		ws[p].prod.onCommit = func(txn []*kgo.Record) {
			for _, r := range txn {
				if r.Topic == outTopic && r.Partition == 0 {
					c := *r
					c.Offset = int64(len(reader.input))
					reader.input = append(reader.input, &c)
				}
			}
		}
		summary = append(summary, fmt.Sprintf("writer %d: %s, %d records, wm %d", p, mode, len(ins[p].recs), ins[p].wm))
	}

	// The reader restarts now and then (a crash: its open transaction is lost) over its store,
	// or over a store rebuilt from its changelog (its state dir lost): the writers' watermarks
	// it committed come back with its offset.
	restarts := 0
	restart := func() {
		reader.prod.abort()
		reader.task.Close()
		store := reader.task.d.Store
		how := "its store"
		if rng.IntN(2) == 0 {
			store, how = replayChangelogOf(t, reader.prod, rollupOp), "its changelog"
		}
		tk, err := New(reader.task.plan, outTopic, 0, Deps{Store: store, Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(),
			Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now, Logger: discardLogger(), InternalPartitions: internal, Producer: reader.prod})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tk.Close)
		reader.task, reader.pos = tk, max(int(reader.offset), 0)
		restarts++
		summary = append(summary, fmt.Sprintf("reader restarted from offset %d over %s", reader.pos, how))
	}

	// Step the writers and the reader in a random interleaving; then let the reader finish.
	done := make([]bool, writers)
	for left := writers; left > 0; {
		if third != nil && third.pos < len(third.input) && rng.IntN(4) == 0 {
			third.step()
			continue
		}
		if reader.pos < len(reader.input) && rng.IntN(3) == 0 {
			if restarts < 3 && reader.offset > 0 && rng.IntN(25) == 0 {
				restart()
			}
			reader.step()
			continue
		}
		p := rng.IntN(writers)
		if !done[p] && ws[p].step() {
			done[p] = true
			left--
		}
	}
	reader.run()
	if third != nil {
		third.run()
		summary = append(summary, fmt.Sprintf("top %dms grace %d, %s", top, g3, third.task.plan.Config.Backlog.Mode))
	}
	t.Logf("seed %d: window %dms (sessions=%v) grace %d max_delay %d, rollup %dms grace %d, pebble=%v; reader %s; %s",
		seed, w.size, sessions, w.grace, w.maxDelay, bsize, g2, pebble, reader.task.plan.Config.Backlog.Mode, strings.Join(summary, "; "))

	// The oracle: the reader's watermark is the smallest of the writers' output watermarks.
	rwm := int64(math.MaxInt64)
	for _, in := range ins {
		if in.wm != math.MaxInt64 { // the empty partition's writer is idle
			rwm = min(rwm, in.wm-w.grace)
		}
	}
	type total struct {
		n   int64
		sum *big.Rat
	}
	want := map[string]*total{} // "key@start" of the rollup's closed windows
	for _, fs := range fins {
		for _, f := range fs {
			bs := f.at / bsize * bsize
			if bs+bsize+g2 > rwm {
				continue // the rollup window is open
			}
			bk := f.key + "@" + strconv.FormatInt(bs, 10)
			if want[bk] == nil {
				want[bk] = &total{sum: new(big.Rat)}
			}
			want[bk].n += f.n
			want[bk].sum.Add(want[bk].sum, f.sum)
		}
	}
	// check demands, of the finals of windows of size among recs (attribute records left out),
	// exactly one per window of want, with its totals, and none other; timed: each at its
	// window's end - 1.
	check := func(what string, recs []*kgo.Record, want map[string]*total, size int64, timed bool) {
		got := map[string]int{}
		for _, o := range recs {
			if o.Key == nil && o.Value == nil {
				continue // an attribute record
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(o.Value, &m); err != nil {
				t.Fatalf("%s: output %s: %v", what, o.Value, err)
			}
			ws, _ := strconv.ParseInt(string(m["window_start"]), 10, 64)
			we, _ := strconv.ParseInt(string(m["window_end"]), 10, 64)
			if we-ws != size || timed && o.Timestamp.UnixMilli() != we-1 {
				t.Errorf("%s: final of [%d, %d) at %d, want a window of %dms at its end - 1", what, ws, we, o.Timestamp.UnixMilli(), size)
			}
			k := string(o.Key) + "@" + strconv.FormatInt(ws, 10)
			got[k]++
			wt := want[k]
			if wt == nil {
				t.Errorf("%s: final for %s, which the oracle has open or empty: %s", what, k, o.Value)
				continue
			}
			if string(m["n"]) != strconv.FormatInt(wt.n, 10) {
				t.Errorf("%s %s: n=%s, want %d", what, k, m["n"], wt.n)
			}
			if s, ok := new(big.Rat).SetString(string(m["total"])); !ok || s.Cmp(wt.sum) != 0 {
				t.Errorf("%s %s: total=%s, want %s", what, k, m["total"], wt.sum.FloatString(4))
			}
		}
		for k := range want {
			if got[k] != 1 {
				t.Errorf("%s: window %s closed: %d finals, want exactly 1", what, k, got[k])
			}
		}
	}
	if third == nil {
		check("rollup", reader.prod.committed(testSink), want, bsize, false)
	} else {
		check("rollup", reader.prod.committed(outTopic2), want, bsize, true)
		// The third stage's watermark is the reader's announced one: its watermark - g2.
		want3 := map[string]*total{}
		for bk, wt := range want {
			key, bs, _ := cutAt(bk)
			ts := (bs + bsize - 1) / top * top
			if rwm == math.MinInt64 || ts+top+g3 > rwm-g2 {
				continue
			}
			tk := key + "@" + strconv.FormatInt(ts, 10)
			if want3[tk] == nil {
				want3[tk] = &total{sum: new(big.Rat)}
			}
			want3[tk].n += wt.n
			want3[tk].sum.Add(want3[tk].sum, wt.sum)
		}
		check("top", third.prod.committed(testSink), want3, top, false)
		if n := len(third.prod.committed(testGroup + "-dlq")); n > 0 {
			t.Errorf("the third stage dead-lettered %d records; no final of the reader may be late there", n)
		}
	}
	if n := len(reader.prod.committed(testGroup + "-dlq")); n > 0 {
		t.Errorf("the reader dead-lettered %d records; no writer's final may be late there", n)
	}
	for p, in := range ins {
		if n, want := len(ws[p].prod.committed(testGroup+"-dlq")), len(in.late)+len(in.bad); n != want {
			t.Errorf("writer %d: %d dead letters, want %d late + %d malformed", p, n, len(in.late), len(in.bad))
		}
	}
	if t.Failed() {
		t.Logf("reader: %d records in, %d commits, %d aborts; %d rollup finals expected, %d emitted", len(reader.input), reader.commits, reader.aborts, len(want), len(reader.prod.committed(testSink)))
	}
}
