package task

import (
	"github.com/sluice-dev/sluice/changelog/codec"

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

	"github.com/twmb/franz-go/pkg/kgo"
)

// The session cogroup's metamorphic test: orders and refunds of random customers with event
// times out of order (some far behind: late) and some records without an amount (dead letters),
// session windows with a random gap, grace and watermark delay, emit final or updates. Every run (real-time
// only, backlog only, random switches of either input, random interleavings of the two inputs'
// batches, checkpoints and aborts, the Mem or the Pebble store) must commit exactly the oracle's
// finals and the oracle's dead letters, with identical dead-letter contents in every run. With
// emit: updates, the table a consumer builds from the updates and retractions (sessionTable's
// rule) must hold exactly the oracle's closed and open sessions.
//
// The oracle knows the rule without the runtime: a record is late when its own input's watermark
// (including it, in its input's offset order) has reached its time + gap + grace; a key's
// sessions are the runs of its other good records of both inputs, sorted by time, whose
// neighbours are less than the gap apart; a session is emitted once the smaller of the two final
// watermarks has reached its last time + gap - 1 + gap + grace. None of that depends on how the
// two inputs interleave, which is what the session cogroup's later close buys.

func sessionCogroupConfig(mode string, gap, grace, maxDelay int64, cacheKeys int, emit string) string {
	return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: 100, exit_lag: 20, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
  refunds: {topic: %s, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    cogroup:
      inputs: [orders, refunds]
      window: {session: %dms, grace: %dms}
      emit: %s
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
`, cacheKeys, mode, cgOrders, maxDelay, cgRefunds, maxDelay, cgOp, gap, grace, emit, cgSink)
}

// scRec is one generated record of the session cogroup test.
type scRec struct {
	side int
	off  int64
	key  string
	ts   int64
	amt  *big.Rat // nil: the record has no amount (a dead letter)
}

// scSession is the oracle's session: its span and its totals per input.
type scSession struct {
	start, last int64
	n           [2]int64
	sum         [2]*big.Rat
	hi, lo      *big.Rat // biggest order, smallest refund
}

// sessionCogroupOracle returns the finals (sorted "key value" lines as the sink gets them), the
// dead letters ("topic@offset late" or "topic@offset bad" lines, sorted) and the sessions still
// open, with their current values (as finals).
func sessionCogroupOracle(recs [2][]scRec, gap, grace, maxDelay int64) (finals, dead, open []string) {
	good := map[string][]scRec{}
	final := [2]int64{math.MinInt64, math.MinInt64}
	for side := range 2 {
		topic := []string{cgOrders, cgRefunds}[side]
		wm := int64(math.MinInt64)
		for _, r := range recs[side] {
			wm = max(wm, r.ts-maxDelay) // a record without an amount decodes: it moves the watermark
			switch {
			case r.amt == nil:
				dead = append(dead, fmt.Sprintf("%s@%d bad", topic, r.off))
			case r.ts+gap+grace <= wm:
				dead = append(dead, fmt.Sprintf("%s@%d late", topic, r.off))
			default:
				good[r.key] = append(good[r.key], r)
			}
		}
		final[side] = wm
	}
	opWM := min(final[0], final[1])
	for key, rs := range good {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].ts < rs[j].ts })
		var cur *scSession
		flush := func() {
			if cur == nil {
				return
			}
			to := &finals
			if cur.last+gap-1+gap+grace > opWM {
				to = &open // still open
			}
			*to = append(*to, fmt.Sprintf(`%s {"key":%q,"window_start":%d,"window_end":%d,"biggest":%s,"orders":%d,"refunded":%s,"refunds":%d,"smallest_refund":%s,"spent":%s}`,
				key, key, cur.start, cur.last+gap, ratOrNull(cur.hi), cur.n[0], ratText(cur.sum[1]), cur.n[1], ratOrNull(cur.lo), ratText(cur.sum[0])))
		}
		for _, r := range rs {
			if cur == nil || r.ts-cur.last >= gap {
				flush()
				cur = &scSession{start: r.ts, last: r.ts, sum: [2]*big.Rat{new(big.Rat), new(big.Rat)}}
			}
			cur.last = r.ts
			cur.n[r.side]++
			cur.sum[r.side].Add(cur.sum[r.side], r.amt)
			if r.side == 0 && (cur.hi == nil || r.amt.Cmp(cur.hi) > 0) {
				cur.hi = new(big.Rat).Set(r.amt)
			}
			if r.side == 1 && (cur.lo == nil || r.amt.Cmp(cur.lo) < 0) {
				cur.lo = new(big.Rat).Set(r.amt)
			}
		}
		flush()
	}
	sort.Strings(finals)
	sort.Strings(dead)
	sort.Strings(open)
	return finals, dead, open
}

// cogroupSessionTable applies a run's committed updates and retractions in order (see
// sessionTable) and returns the sessions left as sorted "key value" lines.
func cogroupSessionTable(t *testing.T, what string, ordered []string) []string {
	type id struct{ key, start string }
	cur := map[id]string{}
	for _, l := range ordered {
		key, value, _ := strings.Cut(l, " ")
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(value), &m); err != nil {
			t.Fatalf("%s: output %s: %v", what, value, err)
		}
		k := id{key, string(m["window_start"])}
		if string(m["retract"]) == "true" {
			var was map[string]json.RawMessage
			if v, ok := cur[k]; !ok || json.Unmarshal([]byte(v[len(key)+1:]), &was) != nil || string(was["window_end"]) != string(m["window_end"]) {
				t.Fatalf("%s: retraction %s of a session not published as such (published: %q)", what, value, cur[k])
			}
			delete(cur, k)
			continue
		}
		cur[k] = l
	}
	return slices.Sorted(maps.Values(cur))
}

func TestSessionCogroupOneAnswerTwoModes(t *testing.T) {
	seeds := 12
	if *flagLong {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sessionCogroupOneAnswer(t, seed) })
	}
}

func sessionCogroupOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 4321))
	gap := []int64{1, 60, 300, 1500}[rng.IntN(4)]
	grace := []int64{0, 200}[rng.IntN(2)]
	maxDelay := []int64{0, 300, 1500}[rng.IntN(3)]
	n := 200 + rng.IntN(800)
	keys := 1 + rng.IntN([]int{3, 30}[rng.IntN(2)])
	base := int64(1_767_225_600_000)
	jitter := int64(rng.IntN(3)) * 800
	// One input may run ahead of the other in event time: its watermark then closes nothing
	// alone, and records of the other input still join sessions it has passed.
	skew := [2]int64{0, []int64{0, 0, 2000, -2000}[rng.IntN(4)]}
	var inputs [2][]*kgo.Record
	var recs [2][]scRec
	for i := range n {
		side := rng.IntN(2)
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + skew[side] + int64(i)*50 + rng.Int64N(jitter+1) - jitter/2
		if rng.IntN(40) == 0 {
			ts -= 5000 // far behind: late unless the watermark delay covers it
		}
		off := int64(len(inputs[side]))
		value := fmt.Sprintf(`{"customer_id":%q,"ts":%d}`, key, ts)
		var amt *big.Rat
		if rng.IntN(50) != 0 {
			a := genAmount(rng)
			amt, _ = new(big.Rat).SetString(a)
			value = fmt.Sprintf(`{"customer_id":%q,"amount":%s,"ts":%d}`, key, a, ts)
		}
		topic := []string{cgOrders, cgRefunds}[side]
		inputs[side] = append(inputs[side], &kgo.Record{Topic: topic, Offset: off, Key: []byte(key), Value: []byte(value)})
		recs[side] = append(recs[side], scRec{side: side, off: off, key: key, ts: ts, amt: amt})
	}
	want, wantDead, open := sessionCogroupOracle(recs, gap, grace, maxDelay)
	emit := "final"
	if seed%2 == 1 {
		emit = "updates"
		want = slices.Sorted(slices.Values(append(want, open...)))
	}
	var first twoInputRun
	for run, mode := range []string{"never", "always", "auto", "auto", "auto"} {
		rr := rand.New(rand.NewPCG(seed, uint64(run)+20))
		r := runTwoInputs(t, rr, run, func(cacheKeys int) string {
			return sessionCogroupConfig(mode, gap, grace, maxDelay, cacheKeys, emit)
		}, inputs[0], inputs[1])
		d := r.d
		what := fmt.Sprintf("run %d (%s, cache %d, gap %d, grace %d, max_delay %d, skew %d, aborts %d, backlog %v)",
			run, mode, r.cacheKeys, gap, grace, maxDelay, skew[1], d.aborts, d.backlogBatches)
		switch {
		case mode == "never" && len(d.backlogBatches) > 0:
			t.Fatalf("%s: batches in backlog", what)
		case mode == "always" && (d.backlogBatches[cgOrders] == 0 && len(inputs[0]) > 0 || d.backlogBatches[cgRefunds] == 0 && len(inputs[1]) > 0):
			t.Fatalf("%s: both inputs must be sorted in backlog", what)
		}
		got := r.got
		if emit == "updates" {
			got = cogroupSessionTable(t, what, r.ordered)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: emit %s: sessions differ from the oracle (%d got, %d want):\n%s", what, emit, len(got), len(want), diffLines(want, got))
		}
		var dead []string
		for _, l := range r.dlq {
			kind := "bad"
			if strings.Contains(l, `sluice.error="late"`) {
				kind = "late"
			}
			dead = append(dead, fmt.Sprintf("%s@%s %s", hdrIn(l, codec.HeaderSourceTopic), hdrIn(l, codec.HeaderSourceOffset), kind))
		}
		sort.Strings(dead)
		if !slices.Equal(dead, wantDead) {
			t.Fatalf("%s: dead letters differ from the oracle's:\n%s", what, diffLines(wantDead, dead))
		}
		if run == 0 {
			first = r
		} else if !slices.Equal(r.dlq, first.dlq) {
			t.Fatalf("%s: dead-letter contents differ from run 0's:\n%s", what, diffLines(first.dlq, r.dlq))
		}
	}
	t.Logf("emit %s gap %d grace %d max_delay %d skew %d: %d records, %d sessions, %d dead letters", emit, gap, grace, maxDelay, skew[1], n, len(want), len(wantDead))
}

// hdrIn returns header key's value in a dead-letter line of twoInputRun.dlq.
func hdrIn(line, key string) string {
	_, rest, ok := strings.Cut(line, key+"=")
	if !ok {
		return ""
	}
	v, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return ""
	}
	u, _ := strconv.Unquote(v)
	return u
}
