package task

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
)

// The distinct operator's metamorphic test: random orders of a few keys or many, amounts that
// pass some of three flags, some records that are not JSON, some that lack the field a flag
// compares, and some that carry a member named as a flag (replaced), in real-time mode, in
// backlog mode and with random switches, with aborts and injected produce errors. Every run must
// commit exactly what an oracle that knows the rule computes from the input: every good record
// that is its key's first passing some flag (in offset order) once, with each flag's column 1
// if it is the key's first passing that flag, and every bad record one dead letter; so the
// columns summed per key are the number of flags seen, whatever the mode. (A distinct that also
// passed on the other records, with zero columns, failed this test with -long: entering backlog
// did not checkpoint the outbox first, so its outputs were committed before their offsets and an
// abort replayed them. The mode policy now counts the outbox as dirty:
// TestOutboxCheckpointsBeforeBacklog.)

func distinctConfig(mode string, enter, exit int64, cacheKeys int, every string) string {
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    distinct:
      input: orders
      flags: {all: "true", small: "amount < 50", mid: "amount >= 50 && amount < 90"}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, testOp, testSink)
}

type distinctRec struct {
	key, value string // value: as the operator writes it, without the flag columns
	amount     int    // -1: no amount (the flags that compare it fail: a dead letter)
	bad        bool
}

func genDistinct(rng *rand.Rand, n int) ([]*kgo.Record, []distinctRec) {
	keys := 1 + rng.IntN([]int{3, 30, 3000}[rng.IntN(3)])
	pBad := []float64{0, 0.03}[rng.IntN(2)]
	base := int64(1_767_225_600_000)
	var recs []*kgo.Record
	var in []distinctRec
	for i := range n {
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*10
		r := distinctRec{key: key, amount: rng.IntN(100)}
		r.value = fmt.Sprintf(`{"id":%d,"customer_id":%q,"amount":%d,"ts":%d}`, i, key, r.amount, ts)
		value := r.value
		switch x := rng.Float64(); {
		case x < pBad:
			value = value[:rng.IntN(len(value)-1)]
			r.bad = true
		case x < 2*pBad:
			r.amount = -1
			r.value = fmt.Sprintf(`{"id":%d,"customer_id":%q,"ts":%d}`, i, key, ts)
			value = r.value
		case x < 0.2:
			value = value[:len(value)-1] + `,"small":"stale"}` // replaced by the column
		}
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(key), Value: []byte(value)})
		in = append(in, r)
	}
	return recs, in
}

// distinctOracle returns the outputs as sorted "key value" lines and the number of dead letters.
func distinctOracle(in []distinctRec) (outs []string, dead int) {
	seen := map[string][3]bool{} // key -> all, mid, small seen (the columns in name order)
	for _, r := range in {
		if r.bad || r.amount < 0 {
			dead++
			continue
		}
		pass := [3]bool{true, r.amount >= 50 && r.amount < 90, r.amount < 50}
		s := seen[r.key]
		var col [3]int
		for i := range pass {
			if pass[i] && !s[i] {
				s[i], col[i] = true, 1
			}
		}
		seen[r.key] = s
		if col == [3]int{} {
			continue // no first: dropped
		}
		v := r.value[:len(r.value)-1] + fmt.Sprintf(`,"all":%d,"mid":%d,"small":%d}`, col[0], col[1], col[2])
		outs = append(outs, r.key+" "+v)
	}
	sort.Strings(outs)
	return outs, dead
}

func TestDistinctOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 20, short: 5, long: 400}, func(t *testing.T, seed uint64, _ int) { distinctOneAnswer(t, seed, false) })
}

// TestDistinctLocalRekey is the distinct's metamorphic test grouped by its source's key field
// with processing.local_rekey: keyed in the source's partition, behind the filter that drops the
// records setting no new flag (newOwnFilter), which an abort must forget with the records.
func TestDistinctLocalRekey(t *testing.T) {
	eachSeed(t, seedCounts{normal: 20, short: 5, long: 400}, func(t *testing.T, seed uint64, _ int) { distinctOneAnswer(t, seed, true) })
}

// localDistinctConfig is distinctConfig grouped by customer_id, with processing.local_rekey.
func localDistinctConfig(mode string, enter, exit int64, cacheKeys int, every string) string {
	return strings.Replace(localRekey(distinctConfig(mode, enter, exit, cacheKeys, every)),
		"      input: orders\n", "      input: orders\n      group_by: customer_id\n", 1)
}

func distinctOneAnswer(t *testing.T, seed uint64, local bool) {
	rng := rand.New(rand.NewPCG(seed, 15))
	recs, in := genDistinct(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	want, wantDead := distinctOracle(in)
	cfg := distinctConfig
	if local {
		cfg = localDistinctConfig
		if p := mustPlan(t, cfg("auto", 50, 10, 1, "0s")); len(p.Chains) != 1 || p.Chains[0].LocalKey == "" {
			t.Fatalf("want one chain keyed locally, got %+v", p.Chains)
		}
	}
	for _, ms := range keyedModes(rng) {
		ms.config = cfg
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (%s)", ms.name, r.summary)
		checkCommitted(t, what, r, len(recs), wantDead)
		checkOutputLines(t, what, r, want)
	}
}

// checkCommitted checks that a run of n records committed every offset and wantDead dead
// letters.
func checkCommitted(t *testing.T, what string, r runResult, n int, wantDead int) {
	t.Helper()
	if r.offset != int64(n) {
		t.Fatalf("%s: committed offset %d, want %d", what, r.offset, n)
	}
	if len(r.dead) != wantDead {
		t.Fatalf("%s: %d dead letters, want %d", what, len(r.dead), wantDead)
	}
}

// checkOutputLines checks the run's committed outputs, as sorted "key value" lines, against
// the oracle's.
func checkOutputLines(t *testing.T, what string, r runResult, want []string) {
	t.Helper()
	var got []string
	for _, o := range r.outs {
		got = append(got, string(o.Key)+" "+string(o.Value))
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: outputs differ from the oracle (%d got, %d want):\n%s", what, len(got), len(want), diffLines(want, got))
	}
}

// The windowed distinct's metamorphic test: the flags are per (key, window), tumbling or
// hopping windows with grace, records out of order by up to a jitter, a watermark max_delay
// behind the largest time seen. Every run must commit what the oracle computes from the input:
// for each good record on time, once per window of it still open at the watermark including
// it in which it is the key's first passing some flag, the record with the flag columns and
// the window's (a sink's records; the event time they carry for later operators is checked by
// the e2e test of count_distinct over windows); a record whose every window is closed one dead letter;
// and no state left for a window the final watermark has closed.

func distinctWindowConfig(window string, maxDelay int64) func(mode string, enter, exit int64, cacheKeys int, every string) string {
	return func(mode string, enter, exit int64, cacheKeys int, every string) string {
		return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    distinct:
      input: orders
      flags: {all: "true", small: "amount < 50", mid: "amount >= 50 && amount < 90"}
      window: %s
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, maxDelay, testOp, window, testSink)
	}
}

// distinctWindowOracle returns the outputs as sorted "key value" lines, the number of dead
// letters and the final watermark. size, advance and grace in ms.
func distinctWindowOracle(in []distinctRec, ts []int64, size, advance, grace, maxDelay int64) (outs []string, dead int, wm int64) {
	seen := map[string][3]bool{} // key and window start -> all, mid, small seen
	wm = math.MinInt64
	for i, r := range in {
		if r.bad {
			dead++
			continue
		}
		wm = max(wm, ts[i]-maxDelay)
		if r.amount < 0 {
			dead++ // a flag fails on it
			continue
		}
		last := ts[i] - ((ts[i]%advance)+advance)%advance
		if last+size+grace <= wm {
			dead++ // late: every window closed
			continue
		}
		pass := [3]bool{true, r.amount >= 50 && r.amount < 90, r.amount < 50}
		for start := last - size + advance; start <= last; start += advance {
			if start+size+grace <= wm {
				continue // this window is closed
			}
			k := fmt.Sprintf("%s/%d", r.key, start)
			s := seen[k]
			var col [3]int
			for i := range pass {
				if pass[i] && !s[i] {
					s[i], col[i] = true, 1
				}
			}
			seen[k] = s
			if col == [3]int{} {
				continue
			}
			v := r.value[:len(r.value)-1] + fmt.Sprintf(`,"all":%d,"mid":%d,"small":%d,"window_start":%d,"window_end":%d}`, col[0], col[1], col[2], start, start+size)
			outs = append(outs, r.key+" "+v)
		}
	}
	sort.Strings(outs)
	return outs, dead, wm
}

func TestDistinctWindowsOneAnswerTwoModes(t *testing.T) {
	eachSeed(t, seedCounts{normal: 20, short: 5, long: 400}, func(t *testing.T, seed uint64, _ int) { distinctWindowsOneAnswer(t, seed) })
}

func distinctWindowsOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 16))
	recs, in := genDistinct(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	// Out of order by up to a jitter: the time in the value is the record's event time.
	jitter := int64([]int{0, 50, 400}[rng.IntN(3)])
	ts := make([]int64, len(in))
	for i := range in {
		base := int64(1_767_225_600_000) + int64(i)*10
		ts[i] = base + rng.Int64N(jitter+1) - jitter/2
		old := fmt.Sprintf(`"ts":%d}`, base)
		in[i].value = strings.Replace(in[i].value, old, fmt.Sprintf(`"ts":%d}`, ts[i]), 1)
		recs[i].Value = []byte(strings.Replace(string(recs[i].Value), old, fmt.Sprintf(`"ts":%d}`, ts[i]), 1))
		recs[i].Value = []byte(strings.Replace(string(recs[i].Value), fmt.Sprintf(`"ts":%d,`, base), fmt.Sprintf(`"ts":%d,`, ts[i]), 1))
	}
	size := []int64{100, 1000}[rng.IntN(2)]
	advance := []int64{size, size / 4}[rng.IntN(2)]
	grace := []int64{0, 100}[rng.IntN(2)]
	maxDelay := []int64{0, 200}[rng.IntN(2)]
	window := fmt.Sprintf("{tumbling: %dms, grace: %dms}", size, grace)
	if advance != size {
		window = fmt.Sprintf("{hopping: %dms, advance: %dms, grace: %dms}", size, advance, grace)
	}
	want, wantDead, wm := distinctWindowOracle(in, ts, size, advance, grace, maxDelay)
	for _, ms := range keyedModes(rng) {
		ms.config = distinctWindowConfig(window, maxDelay)
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (window %s, max_delay %d, jitter %d; %s)", ms.name, window, maxDelay, jitter, r.summary)
		checkCommitted(t, what, r, len(recs), wantDead)
		checkOutputLines(t, what, r, want)
		// What is left in state: only windows the final watermark has not closed.
		for _, kv := range r.state {
			_, v, _ := strings.Cut(kv, "=")
			raw, err := hex.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			hasTimer, timer, b, err := codec.ParseKeyed(raw)
			if err != nil || len(b) < 17 || (len(b)-1)%16 != 0 {
				t.Fatalf("%s: state %s is not a windowed distinct's", what, kv)
			}
			if !hasTimer || timer != int64(binary.BigEndian.Uint64(b[1:]))+size+grace {
				t.Fatalf("%s: state %s: the timer is not the first window's close", what, kv)
			}
			for w := b[1:]; len(w) > 0; w = w[16:] {
				if start := int64(binary.BigEndian.Uint64(w)); start+size+grace <= wm {
					t.Fatalf("%s: state %s keeps window %d, closed at the final watermark %d", what, kv, start, wm)
				}
			}
		}
	}
}
