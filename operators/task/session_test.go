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
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// sessionSpec is one random session-window pipeline.
type sessionSpec struct {
	gap, grace, maxDelay int64
	updates              bool // emit: updates (retractions of merged sessions)
}

func (w sessionSpec) config(mode string, enter, exit int64, cacheKeys int, every string) string {
	emit := "final"
	if w.updates {
		emit = "updates"
	}
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    aggregate:
      input: orders
      window: {session: %dms, grace: %dms}
      emit: %s
      fields:
        total: {sum: amount}
        n: {count: {}}
        lo: {min: amount}
        hi: {max: amount}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, w.maxDelay, testOp, w.gap, w.grace, emit, testSink)
}

// oSession is the oracle's session: its span and the exact totals of its records.
type oSession struct {
	start, last int64
	n           int64
	sum, lo, hi *big.Rat
}

// sessionOracle runs session windows over recs in offset order, independently of the runtime:
// the watermark including each record, lateness of a record whose own session would be closed,
// merging of the sessions within the gap, and after each record the closing of every session
// the watermark has reached. It returns the finals (as "key start end n sum lo hi" lines), the
// late offsets, the sessions still open per key, and those sessions' current values (lines).
func sessionOracle(recs []*kgo.Record, bad map[int64]bool, w sessionSpec, end bool) (finals []string, late map[int64]bool, open map[string]int, current []string) {
	late = map[int64]bool{}
	open = map[string]int{}
	sess := map[string][]*oSession{}
	wm := int64(math.MinInt64)
	line := func(k string, s *oSession) string {
		return fmt.Sprintf("%s %d %d %d %s %s %s", k, s.start, s.last+w.gap, s.n, s.sum.RatString(), s.lo.RatString(), s.hi.RatString())
	}
	closeUpTo := func(upTo int64) {
		for k, ss := range sess {
			keep := ss[:0]
			for _, s := range ss {
				if s.last+w.gap+w.grace <= upTo {
					finals = append(finals, line(k, s))
				} else {
					keep = append(keep, s)
				}
			}
			sess[k] = keep
		}
	}
	for _, r := range recs {
		if bad[r.Offset] {
			continue
		}
		var v struct {
			Amount json.Number `json:"amount"`
			TS     int64       `json:"ts"`
		}
		_ = json.Unmarshal(r.Value, &v)
		ts := v.TS
		wm = max(wm, ts-w.maxDelay)
		if ts+w.gap+w.grace <= wm {
			late[r.Offset] = true
			continue
		}
		a, _ := new(big.Rat).SetString(string(v.Amount))
		k := string(r.Key)
		m := &oSession{start: ts, last: ts, n: 1, sum: new(big.Rat).Set(a), lo: new(big.Rat).Set(a), hi: new(big.Rat).Set(a)}
		var keep []*oSession
		for _, s := range sess[k] {
			if ts-s.last < w.gap && s.start-ts < w.gap {
				m.start, m.last = min(m.start, s.start), max(m.last, s.last)
				m.n += s.n
				m.sum.Add(m.sum, s.sum)
				if s.lo.Cmp(m.lo) < 0 {
					m.lo.Set(s.lo)
				}
				if s.hi.Cmp(m.hi) > 0 {
					m.hi.Set(s.hi)
				}
				continue
			}
			keep = append(keep, s)
		}
		sess[k] = append(keep, m)
		closeUpTo(wm)
	}
	if end {
		closeUpTo(math.MaxInt64)
	}
	for k, ss := range sess {
		if len(ss) > 0 {
			open[k] = len(ss)
		}
		for _, s := range ss {
			current = append(current, line(k, s))
		}
	}
	sort.Strings(finals)
	sort.Strings(current)
	return finals, late, open, current
}

// sessionFinals returns a run's committed outputs in the oracle's line format.
func sessionFinals(t *testing.T, r runResult) []string {
	var out []string
	for _, o := range r.outs {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.Value, &m); err != nil {
			t.Fatalf("%s: output %s: %v", r.name, o.Value, err)
		}
		rat := func(f string) string {
			x, ok := new(big.Rat).SetString(string(m[f]))
			if !ok {
				t.Fatalf("%s: output %s: field %s", r.name, o.Value, f)
			}
			return x.RatString()
		}
		out = append(out, fmt.Sprintf("%s %s %s %s %s %s %s", o.Key, m["window_start"], m["window_end"], m["n"], rat("total"), rat("lo"), rat("hi")))
	}
	sort.Strings(out)
	return out
}

// sessionTable applies a run's committed updates (emit: updates) in order, as a consumer would:
// an update upserts (key, window_start), a retraction deletes it and must name a session
// published before with the same window_end. It returns the sessions left, in sessionFinals'
// line format, and the number of retractions.
func sessionTable(t *testing.T, r runResult) (table []string, retractions int) {
	type id struct{ key, start string }
	cur := map[id]string{}
	for _, o := range r.outs {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.Value, &m); err != nil {
			t.Fatalf("%s: output %s: %v", r.name, o.Value, err)
		}
		k := id{string(o.Key), string(m["window_start"])}
		if string(m["retract"]) == "true" {
			retractions++
			was, ok := cur[k]
			if !ok || strings.Fields(was)[2] != string(m["window_end"]) {
				t.Fatalf("%s: retraction %s of a session not published as such (published: %q)", r.name, o.Value, was)
			}
			delete(cur, k)
			continue
		}
		cur[k] = sessionFinals(t, runResult{name: r.name, outs: []*kgo.Record{o}})[0]
	}
	for _, l := range cur {
		table = append(table, l)
	}
	sort.Strings(table)
	return table, retractions
}

// TestSessionsOneAnswerTwoModes is the metamorphic test of the Keyed runtime with session
// windows: random gaps, grace, watermark delays, late and malformed records, run in real-time
// only, in backlog only (the fold replays each key's records) and with random switches,
// checkpoints and aborts, with and without the end of input. Every run's finals must be exactly
// the oracle's (each session once), the late records the oracle's, and the keys left in state
// those with open sessions. With emit: updates, the table a consumer builds from the updates
// and retractions must hold exactly the oracle's closed and open sessions, in every mode.
func TestSessionsOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 40, short: 10, long: 600, slowUnderRace: true}, func(t *testing.T, seed uint64, i int) {
		sessionsOneAnswer(t, seed, i%3 == 0)
	})
}

func sessionsOneAnswer(t *testing.T, seed uint64, pebble bool) {
	rng := rand.New(rand.NewPCG(seed, 3))
	w := sessionSpec{gap: []int64{5, 30, 200}[rng.IntN(3)], grace: []int64{0, 10, 100}[rng.IntN(3)], maxDelay: []int64{0, 0, 20, 300}[rng.IntN(4)],
		updates: seed%2 == 1}
	n := []int{1, 30, 300, 2000}[rng.IntN(4)]
	// Event times reuse the window generator (mostly increasing, some far behind).
	in := genWindowInput(rng, n, windowSpec{size: w.gap, advance: w.gap, grace: w.grace, maxDelay: w.maxDelay})
	end := rng.IntN(2) == 0
	finals, late, open, current := sessionOracle(in.recs, in.bad, w, end)
	table := slices.Sorted(slices.Values(append(slices.Clone(finals), current...)))
	cacheKeys := []int{1, 3, 16, 100000}[rng.IntN(4)]
	loader := []int{1, 5, 1 << 30}[rng.IntN(3)]
	huge := int64(1) << 40
	realtime := modeSpec{name: "realtime", mode: "never", enter: 50, exit: 10, cacheKeys: cacheKeys, config: w.config, end: end,
		lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }}
	every := []string{"0s", "0s", "3ms", "40ms"} // backlog checkpoints replay the backlog so far
	backlog := modeSpec{name: "backlog", mode: "always", enter: 50, exit: 10, cacheKeys: cacheKeys, loader: loader, config: w.config, end: end,
		every: every[rng.IntN(len(every))], lag: func(d *driver, end int) int64 { return huge }}
	enter := int64(2 + rng.IntN(60))
	exit := int64(rng.IntN(int(enter)))
	stick := 0.5 + rng.Float64()/2
	var cur int64
	lagPoints := []int64{0, exit - 1, exit, exit + 1, enter - 1, enter, enter + 1, huge}
	switching := modeSpec{name: "switching", mode: "auto", enter: enter, exit: exit, cacheKeys: []int{1, 2, 5, 100000}[rng.IntN(4)],
		loader: loader, pebble: pebble, pFail: []float64{0, 0, 0.001, 0.01}[rng.IntN(4)], config: w.config, end: end,
		every: every[rng.IntN(len(every))],
		lag: func(d *driver, end int) int64 {
			if d.rng.Float64() > stick {
				cur = max(lagPoints[d.rng.IntN(len(lagPoints))], 0)
			}
			return cur
		}}
	t.Logf("sessions %+v end=%v: %d records, %d late, %d bad, %d finals, %d keys open", w, end, n, len(late), len(in.bad), len(finals), len(open))
	for _, ms := range []modeSpec{realtime, backlog, switching} {
		r := runMode(t, seed, ms, in.recs2())
		t.Log(r.summary)
		if r.offset != int64(n) {
			t.Errorf("%s: committed offset %d, want %d", r.name, r.offset, n)
		}
		if w.updates {
			got, retractions := sessionTable(t, r)
			if !slices.Equal(got, table) {
				t.Errorf("%s: the table of the updates differs from the oracle's sessions:\n%s", r.name, diffLines(lines(got), lines(table)))
			}
			t.Logf("%s: %d updates, %d retractions", r.name, len(r.outs)-retractions, retractions)
		} else if got := sessionFinals(t, r); !slices.Equal(got, finals) {
			t.Errorf("%s: finals differ from the oracle:\n%s", r.name, diffLines(lines(got), lines(finals)))
		}
		if len(r.state) != len(open) {
			t.Errorf("%s: %d keys in state, want %d with open sessions", r.name, len(r.state), len(open))
		}
		for off := range late {
			if got := r.reasons[strconv.FormatInt(off, 10)]; got != "late" {
				t.Errorf("%s: late record %d: dead letter reason %q", r.name, off, got)
			}
		}
		if len(r.reasons) != len(late)+len(in.bad) {
			t.Errorf("%s: %d dead letters, want %d late + %d malformed", r.name, len(r.reasons), len(late), len(in.bad))
		}
		if r.stored != r.clNext {
			t.Errorf("%s: store's changelog offset %d, want %d", r.name, r.stored, r.clNext)
		}
	}
}

// lines turns "k rest" lines into "k rest=1" lines for diffLines.
func lines(ls []string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l + "=1"
	}
	return out
}
