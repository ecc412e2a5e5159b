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

const rollupOp = "rollup"

// rollupConfig is the two-stage pipeline: testOp's windows of size w.size (grace, max_delay of
// w), then rollup's tumbling windows of size big (grace g2) over their finals.
func rollupConfig(mode string, cacheKeys int, w windowSpec, bsize, g2 int64, idle string) string {
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
      window: {tumbling: %dms, grace: %dms}
      emit: final
      fields: {total: {sum: amount}, n: {count: {}}}
  - name: %s
    aggregate:
      input: %s
      window: {tumbling: %dms, grace: %dms}
      emit: final
      fields: {total: {sum: total}, n: {sum: n}}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testGroup, cacheKeys, mode, testTopic, w.maxDelay, idle, testOp, w.size, w.grace, rollupOp, testOp, bsize, g2, testSink)
}

// TestRollupOneAnswer is the metamorphic test of windows over windows: 1 to 4 writers, each in
// its own random mode (real time, backlog, random switches) with random batches, checkpoints
// and aborts, stepped in a random interleaving, and a reader in its own random mode reading
// their committed finals and attribute records as they commit. The reader must emit exactly
// the rollup of the writers' finals for every large window the smallest of the writers'
// output watermarks closed, each once, and none other; no final of a writer is late there.
// Some seeds add a writer whose partition is empty: with watermark.idle_after it says idle,
// and the others' watermarks close the reader's windows without it.
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
	empty := rng.IntN(3) == 0 // one more writer, of an empty partition, which goes idle
	idle := "0s"
	if empty {
		writers++
		idle = "1h" // no writer with input is ever idle: the step clock moves 1ms per reading
	}
	outTopic := testGroup + "-" + testOp + "-output"
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
	newTask := func(mode, topic string, p int32, clk *stepClock) *Task {
		plan := mustPlan(t, rollupConfig(mode, 1+rng.IntN(30), w, bsize, g2, idle))
		tk, err := New(plan, topic, p, Deps{Store: newStore(), Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(),
			Clock: clk.Now, Logger: discardLogger(), InternalPartitions: map[string]int32{outTopic: int32(writers)}})
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
	var summary []string
	ins := make([]winInput, writers)
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
			Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now, Logger: discardLogger(), InternalPartitions: map[string]int32{outTopic: int32(writers)}, Producer: reader.prod})
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
	t.Logf("seed %d: window %dms grace %d max_delay %d, rollup %dms grace %d, pebble=%v; reader %s; %s",
		seed, w.size, w.grace, w.maxDelay, bsize, g2, pebble, reader.task.plan.Config.Backlog.Mode, strings.Join(summary, "; "))

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
	for _, in := range ins {
		for k, ww := range in.want {
			key, s, _ := cutAt(k)
			if !in.closed(s) {
				continue // its final is not out
			}
			bs := (s + w.size - 1) / bsize * bsize // the final's event time is its window's end - 1
			if bs+bsize+g2 > rwm {
				continue // the rollup window is open
			}
			bk := key + "@" + strconv.FormatInt(bs, 10)
			if want[bk] == nil {
				want[bk] = &total{sum: new(big.Rat)}
			}
			want[bk].n += ww.n
			want[bk].sum.Add(want[bk].sum, ww.sum)
		}
	}
	got := map[string]int{}
	for _, o := range reader.prod.committed(testSink) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.Value, &m); err != nil {
			t.Fatalf("output %s: %v", o.Value, err)
		}
		ws, _ := strconv.ParseInt(string(m["window_start"]), 10, 64)
		k := string(o.Key) + "@" + strconv.FormatInt(ws, 10)
		got[k]++
		wt := want[k]
		if wt == nil {
			t.Errorf("rollup final for %s, which the oracle has open or empty: %s", k, o.Value)
			continue
		}
		if string(m["n"]) != strconv.FormatInt(wt.n, 10) {
			t.Errorf("rollup %s: n=%s, want %d", k, m["n"], wt.n)
		}
		if s, ok := new(big.Rat).SetString(string(m["total"])); !ok || s.Cmp(wt.sum) != 0 {
			t.Errorf("rollup %s: total=%s, want %s", k, m["total"], wt.sum.FloatString(4))
		}
	}
	for k := range want {
		if got[k] != 1 {
			t.Errorf("rollup window %s closed: %d finals, want exactly 1", k, got[k])
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
