package task

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The metamorphic test of top over windows (window Top-N, with or without ties): random amounts
// that often tie (written differently: 2, 2.0, 2.50), event times out of order, some far behind
// (late for some or all of their windows), malformed records, tumbling and hopping windows with
// grace, run in real-time mode, in backlog mode and with random switches, checkpoints, aborts
// and produce errors, with and without the end of input. Every run must write exactly the rows
// of an oracle that keeps each (key, window)'s whole input and ranks it when the window closes
// (SQL's ROW_NUMBER() or RANK() over the window, arrival order breaking ties), each once; the
// late and malformed records as dead letters; and keep state only for keys with open windows.

type wtopSpec struct {
	n                              int
	desc, ties                     bool
	size, advance, grace, maxDelay int64
}

func (w wtopSpec) config(mode string, enter, exit int64, cacheKeys int, every string) string {
	win := windowFlow(w.size, w.advance, w.grace)
	order := "asc"
	if w.desc {
		order = "desc"
	}
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    top: {input: orders, n: %d, by: amount, order: %s, ties: %v, window: %s}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, w.maxDelay, testOp, w.n, order, w.ties, win, testSink)
}

type wtopRec struct {
	off    int64
	key    string
	ts     int64
	amount *big.Rat // nil: malformed
}

func genWindowTop(rng *rand.Rand, n int, w wtopSpec) ([]*kgo.Record, []wtopRec) {
	keys := 1 + rng.IntN([]int{2, 20, 300}[rng.IntN(3)])
	spread := []int{2, 5, 1000}[rng.IntN(3)]
	step := int64(1 + rng.IntN(10))
	back := []float64{0, 0.05, 0.2}[rng.IntN(3)]
	pBad := []float64{0, 0.03}[rng.IntN(2)]
	base := int64(1_767_225_600_000)
	forms := []string{"%d", "%d.0", "%d.00"}
	var recs []*kgo.Record
	var in []wtopRec
	for i := range n {
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*step + rng.Int64N(step+1)
		if rng.Float64() < back {
			ts -= rng.Int64N(3*w.size + w.grace + w.maxDelay + 1)
		}
		v := rng.IntN(spread) - spread/3
		amt := fmt.Sprintf(forms[rng.IntN(len(forms))], v)
		if rng.IntN(4) == 0 {
			amt = fmt.Sprintf("%d.5", v)
		}
		value := fmt.Sprintf(`{"id":%d,"customer_id":%q,"amount":%s,"ts":%d}`, i, key, amt, ts)
		r := wtopRec{off: int64(i), key: key, ts: ts}
		r.amount, _ = new(big.Rat).SetString(amt)
		if rng.Float64() < pBad {
			r.amount = nil
			value = value[:rng.IntN(len(value)-1)]
		}
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ts)})
		in = append(in, r)
	}
	return recs, in
}

// windowTopOracle ranks each (key, window)'s whole input when the window closes: the watermark
// including each record (largest event time - max_delay), a record's windows by plain window
// arithmetic, late when all of them are closed, and after each record the windows the watermark
// has reached closed. It returns the rows as "key window_start id rank" lines, sorted, the late
// offsets, and per key with windows left open what they must hold: "start:id,id,..." per window
// in start order, the ids of the records whose rank is at most n, in rank order.
func windowTopOracle(in []wtopRec, w wtopSpec, end bool) (rows []string, late map[int64]bool, open map[string][]string) {
	type wkey struct {
		key   string
		start int64
	}
	wins := map[wkey][]wtopRec{}
	late, open = map[int64]bool{}, map[string][]string{}
	// ranked returns a window's records of rank at most n, in rank order, and their ranks.
	ranked := func(k wkey) (kept []wtopRec, ranks []int) {
		recs := slices.Clone(wins[k])
		sort.SliceStable(recs, func(i, j int) bool {
			c := recs[i].amount.Cmp(recs[j].amount)
			return w.desc && c > 0 || !w.desc && c < 0
		})
		for i, r := range recs {
			rank := i + 1
			if w.ties {
				rank = 1 // + the records strictly better
				for _, o := range recs {
					if c := o.amount.Cmp(r.amount); w.desc && c > 0 || !w.desc && c < 0 {
						rank++
					}
				}
			}
			if rank <= w.n {
				kept, ranks = append(kept, r), append(ranks, rank)
			}
		}
		return kept, ranks
	}
	closeWin := func(k wkey) {
		kept, ranks := ranked(k)
		delete(wins, k)
		for i, r := range kept {
			rows = append(rows, fmt.Sprintf("%s %d %d %d", k.key, k.start, r.off, ranks[i]))
		}
	}
	closeUpTo := func(wm int64) {
		var due []wkey
		for k := range wins {
			if k.start+w.size+w.grace <= wm {
				due = append(due, k)
			}
		}
		for _, k := range due {
			closeWin(k)
		}
	}
	wm := int64(math.MinInt64)
	for _, r := range in {
		if r.amount == nil {
			continue
		}
		wm = max(wm, r.ts-w.maxDelay)
		last := r.ts - ((r.ts%w.advance)+w.advance)%w.advance
		any := false
		for s := last - w.size + w.advance; s <= last; s += w.advance {
			if s+w.size+w.grace > wm {
				any = true
				wins[wkey{r.key, s}] = append(wins[wkey{r.key, s}], r)
			}
		}
		if !any {
			late[r.off] = true
		}
		closeUpTo(wm)
	}
	if end {
		closeUpTo(math.MaxInt64)
	}
	starts := slices.SortedFunc(maps.Keys(wins), func(a, b wkey) int { return cmp.Compare(a.start, b.start) })
	for _, k := range starts {
		kept, _ := ranked(k)
		ids := make([]string, len(kept))
		for i, r := range kept {
			ids[i] = strconv.FormatInt(r.off, 10)
		}
		open[k.key] = append(open[k.key], fmt.Sprintf("%d:%s", k.start, strings.Join(ids, ",")))
	}
	sort.Strings(rows)
	return rows, late, open
}

// windowTopRows returns a run's committed rows as "key id rank" lines, sorted (a row carries
// no window: the oracle's lines lose theirs in dropStart).
func windowTopRows(t *testing.T, r runResult) []string {
	var out []string
	for _, o := range r.outs {
		var m struct {
			ID   int64 `json:"id"`
			Rank int   `json:"rank"`
		}
		if err := json.Unmarshal(o.Value, &m); err != nil {
			t.Fatalf("%s: row %s: %v", r.name, o.Value, err)
		}
		out = append(out, fmt.Sprintf("%s %d %d", o.Key, m.ID, m.Rank))
	}
	sort.Strings(out)
	return out
}

// windowTopState decodes a run's stored states (StateFormat of operators.WindowTop, after the
// runtime's 9-byte timer) into the oracle's form: per key, "start:id,id,..." per window.
func windowTopState(t *testing.T, r runResult) map[string][]string {
	out := map[string][]string{}
	for _, line := range r.state {
		k, hexv, _ := strings.Cut(line, "=")
		v, err := hex.DecodeString(hexv)
		if err != nil || len(v) < 9+5 || v[9] != 1 {
			t.Fatalf("%s: state %s", r.name, line)
		}
		b := v[9+5:]
		for range binary.BigEndian.Uint32(v[10:]) {
			start, rows := int64(binary.BigEndian.Uint64(b)), int(binary.BigEndian.Uint32(b[8:]))
			b = b[12:]
			var ids []string
			for range rows {
				l := int(binary.LittleEndian.Uint32(b[16:]))
				var rec struct {
					ID int64 `json:"id"`
				}
				if err := json.Unmarshal(b[20:20+l], &rec); err != nil {
					t.Fatalf("%s: state %s: record %q: %v", r.name, line, b[20:20+l], err)
				}
				ids = append(ids, strconv.FormatInt(rec.ID, 10))
				b = b[20+l:]
			}
			out[k] = append(out[k], fmt.Sprintf("%d:%s", start, strings.Join(ids, ",")))
		}
	}
	return out
}

// dropStart removes the window start from the oracle's lines (the rows carry no window).
func dropStart(rows []string) []string {
	out := make([]string, len(rows))
	for i, l := range rows {
		var k string
		var s, id int64
		var rank int
		if _, err := fmt.Sscanf(l, "%s %d %d %d", &k, &s, &id, &rank); err != nil {
			panic(err)
		}
		out[i] = fmt.Sprintf("%s %d %d", k, id, rank)
	}
	sort.Strings(out)
	return out
}

func TestWindowTopOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 30, short: 8, long: 500, slowUnderRace: true}, func(t *testing.T, seed uint64, i int) {
		windowTopOneAnswer(t, seed)
	})
}

func windowTopOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 29))
	w := wtopSpec{n: []int{1, 1, 2, 3}[rng.IntN(4)], desc: rng.IntN(3) > 0, ties: rng.IntN(3) > 0,
		size: []int64{10, 50, 200}[rng.IntN(3)], grace: []int64{0, 0, 20}[rng.IntN(3)], maxDelay: []int64{0, 0, 30}[rng.IntN(3)]}
	w.advance = w.size
	if rng.IntN(3) == 0 {
		w.advance = w.size / []int64{2, 5}[rng.IntN(2)]
	}
	n := []int{1, 40, 400, 2000}[rng.IntN(4)]
	recs, in := genWindowTop(rng, n, w)
	end := rng.IntN(3) > 0
	want, late, open := windowTopOracle(in, w, end)
	bad := 0
	for _, r := range in {
		if r.amount == nil {
			bad++
		}
	}
	wantRows := dropStart(want)
	t.Logf("window top %+v end=%v: %d records, %d late, %d bad, %d rows, %d keys open", w, end, n, len(late), bad, len(want), len(open))
	for _, ms := range keyedModes(rng) {
		ms.config, ms.end = w.config, end
		r := runMode(t, seed, ms, genInput{recs: recs})
		t.Log(r.summary)
		if r.offset != int64(n) {
			t.Errorf("%s: committed offset %d, want %d", r.name, r.offset, n)
		}
		if got := windowTopRows(t, r); !slices.Equal(got, wantRows) {
			t.Errorf("%s: rows differ from the oracle (%d got, %d want):\n%s", r.name, len(got), len(wantRows), diffRows(wantRows, got))
		}
		// Each open window holds exactly its records of rank at most n, nothing of the rest.
		if got := windowTopState(t, r); !maps.EqualFunc(got, open, slices.Equal) {
			t.Errorf("%s: open windows differ from the oracle's:\n got  %v\n want %v", r.name, got, open)
		}
		for off := range late {
			if got := r.reasons[strconv.FormatInt(off, 10)]; got != "late" {
				t.Errorf("%s: late record %d: dead letter reason %q", r.name, off, got)
			}
		}
		if len(r.reasons) != len(late)+bad {
			t.Errorf("%s: %d dead letters, want %d late + %d malformed", r.name, len(r.reasons), len(late), bad)
		}
	}
}

// diffRows lists the lines only in want and only in got (multisets), at most 20 of each.
func diffRows(want, got []string) string {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var s string
	shown := 0
	for _, l := range slices.Sorted(func(yield func(string) bool) {
		for l := range count {
			if !yield(l) {
				return
			}
		}
	}) {
		if c := count[l]; c != 0 && shown < 40 {
			s += fmt.Sprintf("  %+d %s\n", -c, l)
			shown++
		}
	}
	return s
}
