package task

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/state"
)

// windowFlow is a tumbling (advance = size) or hopping window as a YAML flow mapping, in ms.
func windowFlow(size, advance, grace int64) string {
	if advance != size {
		return fmt.Sprintf("{hopping: %dms, advance: %dms, grace: %dms}", size, advance, grace)
	}
	return fmt.Sprintf("{tumbling: %dms, grace: %dms}", size, grace)
}

// windowSpec is one random windowed pipeline.
type windowSpec struct {
	size, advance, grace, maxDelay int64 // ms
	final                          bool
	// del: half the keys end in a DEL ("c-1" and "c-1\x7f" both occur), which a sliced fold
	// cannot order (sliceSafe): a backlog's slices become window entries.
	del bool
}

func (w windowSpec) config(mode string, enter, exit int64, cacheKeys int, every string) string {
	win := windowFlow(w.size, w.advance, w.grace)
	emit := "updates"
	if w.final {
		emit = "final"
	}
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    aggregate:
      input: orders
      window: %s
      emit: %s
      fields:
        total: {sum: amount}
        n: {count: {}}
        lo: {min: amount}
        hi: {max: amount}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, w.maxDelay, testOp, win, emit, testSink)
}

// winWant is the oracle's result of one (key, window).
type winWant struct {
	n      int64
	sum    *big.Rat
	lo, hi *big.Rat
}

// winInput is a random windowed input and what the oracle expects of it: per (key, window
// start) the totals of its records, the offsets of late records, and of malformed ones.
type winInput struct {
	recs   []*kgo.Record
	want   map[string]*winWant // "key@start"
	late   map[int64]bool
	bad    map[int64]bool
	wm     int64                  // watermark after the input
	closed func(start int64) bool // closed at the end of the input (without EndInput)
}

// genWindowInput generates n records of partition 0 with event times that mostly advance and
// sometimes jump back (late records), and runs the oracle: the watermark in offset order, each
// record into every window of its time still open, in exact rational arithmetic.
func genWindowInput(rng *rand.Rand, n int, w windowSpec) winInput {
	g := winInput{want: map[string]*winWant{}, late: map[int64]bool{}, bad: map[int64]bool{}, wm: math.MinInt64}
	win := &operators.Windows{Size: w.size, Advance: w.advance, Grace: w.grace}
	keys := 1 + rng.IntN([]int{3, 20, 200}[rng.IntN(3)])
	base := int64(1_767_225_600_000)
	step := int64(1 + rng.IntN(20))
	back := []float64{0, 0.05, 0.2}[rng.IntN(3)]
	pBad := []float64{0, 0.02}[rng.IntN(2)]
	for i := range n {
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		if w.del && rng.IntN(2) == 0 {
			key += "\x7f"
		}
		ts := base + int64(i)*step + int64(rng.IntN(int(step)+1))
		if rng.Float64() < back {
			ts -= int64(rng.IntN(int(3*w.size + w.grace + w.maxDelay + 1)))
		}
		amt := genAmount(rng)
		value := fmt.Sprintf(`{"customer_id":%s,"amount":%s,"ts":%d}`, jsonString(key), amt, ts)
		if rng.Float64() < pBad {
			value = value[:len(value)/2]
			g.bad[int64(i)] = true
		} else {
			g.wm = max(g.wm, ts-w.maxDelay)
			a, _ := new(big.Rat).SetString(amt)
			open := 0
			win.Assign(ts, g.wm, func(start int64) {
				open++
				k := key + "@" + strconv.FormatInt(start, 10)
				ww := g.want[k]
				if ww == nil {
					ww = &winWant{sum: new(big.Rat), lo: new(big.Rat).Set(a), hi: new(big.Rat).Set(a)}
					g.want[k] = ww
				}
				ww.n++
				ww.sum.Add(ww.sum, a)
				if a.Cmp(ww.lo) < 0 {
					ww.lo.Set(a)
				}
				if a.Cmp(ww.hi) > 0 {
					ww.hi.Set(a)
				}
			})
			if open == 0 {
				g.late[int64(i)] = true
			}
		}
		g.recs = append(g.recs, &kgo.Record{Topic: testTopic, Partition: 0, Offset: int64(i), Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ts)})
	}
	wm := g.wm
	g.closed = func(start int64) bool { return win.Close(start) <= wm }
	return g
}

// TestWindowsOneAnswerTwoModes is the metamorphic test for windows: random tumbling and hopping
// windows, grace, watermark delay, late records, emit final and updates, run in real-time only,
// in backlog only and with random switches, checkpoints and aborts, with and without a final
// EndInput (a bounded run). Every run must emit each closed (key, window)'s final exactly once
// (emit: final) or end with its exact value (emit: updates), agree with the oracle, send the
// same records to the dead-letter topic (late ones with sluice.error=late), and leave the same
// state: the windows still open.
func TestWindowsOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 40, short: 10, long: 600, slowUnderRace: true}, func(t *testing.T, seed uint64, i int) {
		windowsOneAnswer(t, seed, i%3 == 0, false)
	})
}

// TestSlicesOneAnswer is TestWindowsOneAnswerTwoModes over hopping windows only (which a
// backlog folds by slice, slice.go), half the seeds with keys a sliced fold cannot order.
func TestSlicesOneAnswer(t *testing.T) {
	eachSeed(t, seedCounts{normal: 20, short: 6, long: 300, slowUnderRace: true}, func(t *testing.T, seed uint64, i int) {
		windowsOneAnswer(t, seed, i%3 == 0, true)
	})
}

// windowsOneAnswer runs one seed's windows in every mode against the oracle; hopping: only
// sliced hopping windows, half the time with keys that end in a DEL.
func windowsOneAnswer(t *testing.T, seed uint64, pebble, hopping bool) {
	rng := rand.New(rand.NewPCG(seed, 2))
	size := []int64{10, 50, 200, 1000}[rng.IntN(4)]
	w := windowSpec{size: size, advance: size, grace: []int64{0, 5, 100}[rng.IntN(3)], maxDelay: []int64{0, 0, 20, 300}[rng.IntN(4)], final: rng.IntN(3) > 0}
	if hopping {
		w.advance = size / []int64{2, 5}[rng.IntN(2)]
		w.del = rng.IntN(2) == 0
	} else if rng.IntN(3) == 0 {
		w.advance = size / []int64{1, 2, 5}[rng.IntN(3)]
		w.del = rng.IntN(4) == 0
	}
	n := []int{1, 30, 300, 2000}[rng.IntN(4)]
	in := genWindowInput(rng, n, w)
	end := rng.IntN(2) == 0
	cacheKeys := []int{1, 3, 16, 100000}[rng.IntN(4)]
	loader := []int{1, 5, 1 << 30}[rng.IntN(3)]
	huge := int64(1) << 40
	every := []string{"0s", "0s", "3ms", "40ms"}
	realtime := modeSpec{name: "realtime", mode: "never", enter: 50, exit: 10, cacheKeys: cacheKeys, config: w.config, end: end,
		lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }}
	backlog := modeSpec{name: "backlog", mode: "always", enter: 50, exit: 10, cacheKeys: cacheKeys, loader: loader, config: w.config, end: end,
		every: every[rng.IntN(len(every))], window: []int64{0, 4, 16}[rng.IntN(3)],
		lag: func(d *driver, end int) int64 { return huge }}
	enter := int64(2 + rng.IntN(60))
	exit := int64(rng.IntN(int(enter)))
	stick := 0.5 + rng.Float64()/2
	var cur int64
	lagPoints := []int64{0, exit - 1, exit, exit + 1, enter - 1, enter, enter + 1, huge}
	switching := modeSpec{name: "switching", mode: "auto", enter: enter, exit: exit, cacheKeys: []int{1, 2, 5, 100000}[rng.IntN(4)],
		loader: loader, pebble: pebble, pFail: []float64{0, 0, 0.001, 0.01}[rng.IntN(4)], every: every[rng.IntN(len(every))],
		window: []int64{0, 4, 16}[rng.IntN(3)], config: w.config, end: end,
		lag: func(d *driver, end int) int64 {
			if d.rng.Float64() > stick {
				cur = max(lagPoints[d.rng.IntN(len(lagPoints))], 0)
			}
			return cur
		}}
	var res []runResult
	for _, ms := range []modeSpec{realtime, backlog, switching} {
		res = append(res, runMode(t, seed, ms, in.recs2()))
	}
	for _, r := range res {
		t.Log(r.summary)
	}
	t.Logf("windows %+v end=%v: %d records, %d late, %d bad, %d (key, window)s", w, end, n, len(in.late), len(in.bad), len(in.want))
	for _, r := range res {
		if r.offset != int64(n) {
			t.Errorf("%s: committed offset %d, want %d", r.name, r.offset, n)
		}
		checkWindowOracle(t, r, in, w)
		if r.stored != r.clNext {
			t.Errorf("%s: store's changelog offset %d, want %d", r.name, r.stored, r.clNext)
		}
	}
	ref := res[0]
	for _, r := range res[1:] {
		if !slices.Equal(ref.state, r.state) {
			t.Errorf("state differs: %s vs %s:\n%s", ref.name, r.name, diffLines(ref.state, r.state))
		}
		if w.final && !slices.Equal(finals(ref), finals(r)) {
			t.Errorf("finals differ: %s vs %s", ref.name, r.name)
		}
		if !mapsEqual(ref.reasons, r.reasons) {
			t.Errorf("dead letters differ: %s %v vs %s %v", ref.name, ref.reasons, r.name, r.reasons)
		}
	}
}

// recs2 returns the input records (runMode takes a genInput).
func (g winInput) recs2() genInput { return genInput{recs: g.recs} }

// finals returns a run's committed outputs as sorted "key value" lines.
func finals(r runResult) []string {
	var out []string
	for _, o := range r.outs {
		out = append(out, string(o.Key)+" "+string(o.Value))
	}
	sort.Strings(out)
	return out
}

// checkWindowOracle checks one windowed run against the oracle.
func checkWindowOracle(t *testing.T, r runResult, in winInput, w windowSpec) {
	t.Helper()
	closed := in.closed
	if r.ended {
		closed = func(int64) bool { return true }
	}
	// Outputs: per (key, window) the last value must be the oracle's; with emit: final, exactly
	// one output per closed window and none for an open one.
	count := map[string]int{}
	last := map[string]map[string]json.RawMessage{}
	for _, o := range r.outs {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.Value, &m); err != nil {
			t.Fatalf("%s: output %s: %v", r.name, o.Value, err)
		}
		var key string
		_ = json.Unmarshal(m["key"], &key)
		if key != string(o.Key) {
			t.Errorf("%s: output key %q but value key %q", r.name, o.Key, key)
		}
		ws, _ := strconv.ParseInt(string(m["window_start"]), 10, 64)
		we, _ := strconv.ParseInt(string(m["window_end"]), 10, 64)
		if we-ws != w.size {
			t.Errorf("%s: window [%d, %d) is not %dms", r.name, ws, we, w.size)
		}
		k := key + "@" + strconv.FormatInt(ws, 10)
		count[k]++
		last[k] = m
	}
	for k, want := range in.want {
		_, s, _ := cutAt(k)
		isClosed := closed(s)
		m, ok := last[k]
		switch {
		case w.final && isClosed && count[k] != 1:
			t.Errorf("%s: window %s closed: %d finals, want exactly 1", r.name, k, count[k])
		case w.final && !isClosed && count[k] != 0:
			t.Errorf("%s: window %s open: %d outputs before it closed", r.name, k, count[k])
		case !w.final && !ok:
			t.Errorf("%s: window %s: no output", r.name, k)
		}
		if !ok {
			continue
		}
		if got := string(m["n"]); got != strconv.FormatInt(want.n, 10) {
			t.Errorf("%s: window %s: n=%s, want %d", r.name, k, got, want.n)
		}
		for _, f := range []struct {
			name string
			want *big.Rat
		}{{"total", want.sum}, {"lo", want.lo}, {"hi", want.hi}} {
			got, ok := new(big.Rat).SetString(string(m[f.name]))
			if !ok || got.Cmp(f.want) != 0 {
				t.Errorf("%s: window %s: %s=%s, want %s", r.name, k, f.name, m[f.name], f.want.FloatString(4))
			}
		}
	}
	for k := range count {
		if in.want[k] == nil {
			t.Errorf("%s: output for window %s, which has no records", r.name, k)
		}
	}
	// State: exactly the windows still open, each equal to its last changelog record.
	open := 0
	for k := range in.want {
		if _, s, _ := cutAt(k); !closed(s) {
			open++
		}
	}
	if len(r.state) != open {
		t.Errorf("%s: %d windows in state, want %d open", r.name, len(r.state), open)
	}
	for _, line := range r.state {
		k, v, _ := cutEq(line)
		if r.clLast[k] != v {
			t.Errorf("%s: state of %x is not its last changelog record", r.name, k)
		}
	}
	// Dead letters: the late records with sluice.error=late, the malformed ones, each once.
	for off := range in.late {
		if got := r.reasons[strconv.FormatInt(off, 10)]; got != "late" {
			t.Errorf("%s: late record %d: dead letter reason %q, want late", r.name, off, got)
		}
	}
	for off := range in.bad {
		if r.reasons[strconv.FormatInt(off, 10)] == "" {
			t.Errorf("%s: malformed record %d is not a dead letter", r.name, off)
		}
	}
	if len(r.reasons) != len(in.late)+len(in.bad) {
		t.Errorf("%s: %d dead letters, want %d late + %d malformed", r.name, len(r.reasons), len(in.late), len(in.bad))
	}
}

func cutAt(k string) (key string, start int64, ok bool) {
	i := len(k) - 1
	for i >= 0 && k[i] != '@' {
		i--
	}
	if i < 0 {
		return "", 0, false
	}
	s, err := strconv.ParseInt(k[i+1:], 10, 64)
	return k[:i], s, err == nil
}

func cutEq(line string) (k, v string, ok bool) {
	for i := len(line) - 1; i >= 0; i-- {
		if line[i] == '=' {
			return line[:i], line[i+1:], true
		}
	}
	return line, "", false
}

// TestWindowTimersSurviveRestart checks that a task rebuilt over the same store (a restart, or
// a restore from the changelog) keeps the watermark and the timers of its open windows: they
// close at the right watermark after the restart, once.
func TestWindowTimersSurviveRestart(t *testing.T) {
	w := windowSpec{size: 100, advance: 100, grace: 10, final: true}
	plan := mustPlan(t, w.config("never", 50, 10, 100000, "0s"))
	store := state.NewMem()
	rec := func(off int64, key string, ts int64) *kgo.Record {
		return &kgo.Record{Topic: testTopic, Offset: off, Key: []byte(key), Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":1,"ts":%d}`, key, ts), Timestamp: time.UnixMilli(ts)}
	}
	prod := newFakeProducer()
	step := func(tk *Task, recs ...*kgo.Record) {
		t.Helper()
		tk.Observe(testTopic, 0, 0)
		if err := tk.Process(testTopic, recs); err != nil {
			t.Fatal(err)
		}
		pd, err := tk.Checkpoint(prod)
		if err != nil {
			t.Fatal(err)
		}
		prod.commit()
		if err := tk.Committed(pd); err != nil {
			t.Fatal(err)
		}
	}
	tk := newTestTask(t, plan, store, 1<<20, 0)
	step(tk, rec(0, "a", 1000), rec(1, "b", 1050), rec(2, "a", 1080))
	if got := len(prod.committed(testSink)); got != 0 {
		t.Fatalf("%d outputs before any window closed", got)
	}
	tk.Close()
	// A new task over the same store: a record at 1150 moves the watermark past 1110, the close
	// of [1000, 1100): both keys' windows close, [1100, 1200) stays open.
	tk2 := newTestTask(t, plan, store, 1<<20, 0)
	step(tk2, rec(3, "c", 1150))
	outs := finals(runResult{outs: prod.committed(testSink)})
	want := []string{
		`a {"key":"a","window_start":1000,"window_end":1100,"hi":1,"lo":1,"n":2,"total":2}`,
		`b {"key":"b","window_start":1000,"window_end":1100,"hi":1,"lo":1,"n":1,"total":1}`,
	}
	if !slices.Equal(outs, want) {
		t.Fatalf("finals after restart:\n%v\nwant\n%v", outs, want)
	}
	// A record of the closed window is late, also after the restart.
	tk2.Close()
	tk3 := newTestTask(t, plan, store, 1<<20, 0)
	step(tk3, rec(4, "a", 1010))
	if got := tk3.Status().Chains[0].LateRecords; got != 1 {
		t.Fatalf("late records after restart: %d, want 1", got)
	}
}

// replayChangelog rebuilds a store from the committed changelog records of prod as
// changelog.Restorer does: the latest value per key, tombstones delete, the watermark record
// goes to its namespace, the offset after the last record is stored.
func replayChangelog(t *testing.T, prod *fakeProducer) state.Store {
	return replayChangelogOf(t, prod, testOp)
}

// replayChangelogOf is replayChangelog for operator op (partition 0): each watermark record
// under its own key (the operator's, an input's, a writer's).
func replayChangelogOf(t *testing.T, prod *fakeProducer, op string) state.Store {
	t.Helper()
	st := state.NewMem()
	ns := state.Namespace{Operator: op, Partition: 0}
	b := st.NewBatch()
	defer b.Close()
	next := int64(0)
	for _, r := range prod.committed(testGroup + "-" + op + "-changelog") {
		next = r.Offset + 1
		wm := false
		for _, h := range r.Headers {
			wm = wm || h.Key == codec.HeaderWatermark
		}
		var err error
		switch {
		case wm:
			err = b.Set(codec.WatermarkNamespace(ns), r.Key, r.Value)
		case r.Value == nil:
			err = b.Delete(ns, r.Key)
		default:
			err = b.Set(ns, r.Key, r.Value)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetOffset(ns, next); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRestoreFromChangelogMidStream: a task that loses its state dir halfway through and is
// restored from the changelog (states, the watermark; timers rebuilt from the states) ends with
// the same finals, dead letters and state as a task that ran uninterrupted, for tumbling,
// hopping and session windows, whether the restored task goes on in real-time or backlog mode.
func TestRestoreFromChangelogMidStream(t *testing.T) {
	cfgs := map[string]func(mode string) string{
		"tumbling": func(mode string) string {
			return windowSpec{size: 50, advance: 50, grace: 5, maxDelay: 20, final: true}.config(mode, 50, 10, 16, "0s")
		},
		"hopping": func(mode string) string {
			return windowSpec{size: 100, advance: 50, grace: 0, maxDelay: 0, final: true}.config(mode, 50, 10, 16, "0s")
		},
		"sessions": func(mode string) string {
			return sessionSpec{gap: 30, grace: 10, maxDelay: 20}.config(mode, 50, 10, 16, "0s")
		},
	}
	for name, cfg := range cfgs {
		for _, after := range []string{"never", "always"} {
			t.Run(name+"/then-"+after, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 7))
				in := genWindowInput(rng, 1500, windowSpec{size: 50, advance: 50, grace: 5, maxDelay: 20})
				run := func(store state.Store, prod *fakeProducer, mode string, recs []*kgo.Record) *Task {
					tk := newTestTask(t, mustPlan(t, cfg(mode)), store, 1<<20, 0)
					d := &driver{t: t, rng: rand.New(rand.NewPCG(1, 2)), task: tk, prod: prod, input: recs, maxBatch: 50, pCkpt: 0.2, offset: -1,
						lag: func(d *driver, end int) int64 {
							if mode == "always" {
								return 1 << 40
							}
							return 0
						}}
					d.run()
					return tk
				}
				// Uninterrupted.
				refProd := newFakeProducer()
				refStore := state.NewMem()
				run(refStore, refProd, "never", in.recs)
				// Halfway, then a restore from the changelog into a new store, then the rest.
				half := len(in.recs) / 2
				prod := newFakeProducer()
				first := run(state.NewMem(), prod, "never", in.recs[:half])
				first.Close()
				restored := replayChangelog(t, prod)
				run(restored, prod, after, in.recs[half:])
				if got, want := finals(runResult{outs: prod.committed(testSink)}), finals(runResult{outs: refProd.committed(testSink)}); !slices.Equal(got, want) {
					t.Errorf("finals after the restore differ from an uninterrupted run:\n%s", diffLines(lines(got), lines(want)))
				}
				if got, want := scanState(t, restored), scanState(t, refStore); !slices.Equal(got, want) {
					t.Errorf("state after the restore differs:\n%s", diffLines(got, want))
				}
				if got, want := len(prod.committed(testGroup+"-dlq")), len(refProd.committed(testGroup+"-dlq")); got != want {
					t.Errorf("%d dead letters after the restore, want %d", got, want)
				}
			})
		}
	}
}

// jsonString is s as a JSON string (a DEL stays a raw byte, as JSON allows).
func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
