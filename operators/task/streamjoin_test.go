package task

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The stream-stream join's metamorphic test: orders (left) and payments (right) with event
// times out of order, joined within W, fed in random interleavings, in backlog mode, real-time
// mode and random switches, with aborts. Every run must commit the same multiset of outputs and
// dead letters as an oracle that knows the rule: a record is late when its own input's
// watermark passed its time + W; every pair of non-late records within W is emitted once; an
// unmatched record (left: left side; outer: both) is emitted once the operator's watermark (the
// smaller input's) passed its time + 2W.

const sjOp = "paid"

// pairSelect is the select of the joins' metamorphic tests: member paths (copied), an
// expression over both sides, the key, and a column that fails on a third of the pairs (and on
// every record without a partner), null there.
const pairSelect = `, select: [{o: orders.id}, {p: payments.id}, {sum: "orders.id + payments.id"}, {k: key}, {odd: "payments.id % 3 == 0 ? orders.id % 0 : orders.id * 2"}]`

// pairWhere is a join's where on the ids of a pair's records; pairHolds computes it here.
const pairWhere = `, where: "(orders.id + payments.id) % 3 != 0"`

// pairHolds reports whether pairWhere holds for the pair of values l and r.
func pairHolds(l, r string) bool {
	var a, b struct{ ID int64 }
	if json.Unmarshal([]byte(l), &a) != nil || json.Unmarshal([]byte(r), &b) != nil {
		panic("pairHolds: not a record: " + l + " " + r)
	}
	return (a.ID+b.ID)%3 != 0
}

// pairLine is the oracle's output line of a pair (l or r "null" without a partner): the joined
// record, or with sel the columns of pairSelect, computed here from the records' ids.
func pairLine(key, l, r string, sel bool) string {
	if !sel {
		return key + " " + fmt.Sprintf(`{"orders":%s,"payments":%s}`, l, r)
	}
	id := func(v string) (int64, bool) {
		var x struct{ ID int64 }
		if v == "null" || json.Unmarshal([]byte(v), &x) != nil {
			return 0, false
		}
		return x.ID, true
	}
	o, okO := id(l)
	p, okP := id(r)
	col := func(v int64, ok bool) string {
		if !ok {
			return "null"
		}
		return strconv.FormatInt(v, 10)
	}
	odd := col(o*2, okO && okP && p%3 != 0)
	return key + " " + fmt.Sprintf(`{"o":%s,"p":%s,"sum":%s,"k":%q,"odd":%s}`,
		col(o, okO), col(p, okP), col(o+p, okO && okP), key, odd)
}

func streamJoinConfig(mode, typ string, within, maxDelay int64, cacheKeys int, sel, where bool) string {
	s := ""
	if sel {
		s = pairSelect
	}
	if where {
		s += pairWhere
	}
	return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: 100, exit_lag: 20, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
  payments: {topic: %s, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    join: {left: orders, right: payments, within: %dms, type: %s%s}
    output: out
sinks:
  out: {topic: %s}
`, cacheKeys, mode, cgOrders, maxDelay, cgRefunds, maxDelay, sjOp, within, typ, s, cgSink)
}

type sjRec struct {
	side  int
	ts    int64
	value string
	key   string
}

func genStreamJoin(rng *rand.Rand, n int, within int64) (left, right []*kgo.Record, recs [2][]sjRec) {
	keys := 1 + rng.IntN([]int{3, 30, 300}[rng.IntN(3)])
	base := int64(1_767_225_600_000)
	jitter := int64(rng.IntN(3)) * within // out of order by up to this
	for i := range n {
		side := rng.IntN(2)
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*within/4 + rng.Int64N(jitter+1) - jitter/2
		value := fmt.Sprintf(`{"id":%d,"customer_id":%q,"ts":%d}`, i, key, ts)
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		if side == 0 {
			r.Topic, r.Offset = cgOrders, int64(len(left))
			left = append(left, r)
		} else {
			r.Topic, r.Offset = cgRefunds, int64(len(right))
			right = append(right, r)
		}
		recs[side] = append(recs[side], sjRec{side: side, ts: ts, value: value, key: key})
	}
	return left, right, recs
}

// sjOracle returns the outputs (key + value lines) and the number of late records.
func sjOracle(recs [2][]sjRec, within, maxDelay int64, typ string, sel, where bool) (out []string, late int) {
	var kept [2][]sjRec
	final := [2]int64{math.MinInt64, math.MinInt64}
	for side := range 2 {
		wm := int64(math.MinInt64)
		for _, r := range recs[side] {
			wm = max(wm, r.ts-maxDelay)
			if wm > r.ts+within {
				late++
				continue
			}
			kept[side] = append(kept[side], r)
		}
		final[side] = wm
	}
	opWM := min(final[0], final[1])
	matched := [2]map[int]bool{{}, {}}
	for i, l := range kept[0] {
		for j, r := range kept[1] {
			if l.key == r.key && absI(l.ts-r.ts) <= within && (!where || pairHolds(l.value, r.value)) {
				out = append(out, pairLine(l.key, l.value, r.value, sel))
				matched[0][i], matched[1][j] = true, true
			}
		}
	}
	for side := range 2 {
		if side == 0 && typ == "inner" || side == 1 && typ != "outer" {
			continue
		}
		for i, r := range kept[side] {
			if matched[side][i] || r.ts+2*within+1 > opWM {
				continue
			}
			if side == 0 {
				out = append(out, pairLine(r.key, r.value, "null", sel))
			} else {
				out = append(out, pairLine(r.key, "null", r.value, sel))
			}
		}
	}
	sort.Strings(out)
	return out, late
}

func absI(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}

func TestStreamJoinOneAnswerTwoModes(t *testing.T) {
	seeds := 15
	if *flagLong {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { streamJoinOneAnswer(t, seed) })
	}
}

func streamJoinOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 77))
	within := int64(1000)
	maxDelay := []int64{0, 500, 3000}[rng.IntN(3)]
	typ := []string{"inner", "left", "outer"}[rng.IntN(3)]
	sel, where := rng.IntN(2) == 0, rng.IntN(2) == 0
	left, right, recs := genStreamJoin(rng, 100+rng.IntN(800), within)
	want, wantLate := sjOracle(recs, within, maxDelay, typ, sel, where)
	for run, mode := range []string{"never", "always", "auto", "auto", "auto"} {
		rr := rand.New(rand.NewPCG(seed, uint64(run)))
		r := runTwoInputs(t, rr, run, func(cacheKeys int) string {
			return streamJoinConfig(mode, typ, within, maxDelay, cacheKeys, sel, where)
		}, left, right)
		got, late, d, cacheKeys := r.got, r.dead, r.d, r.cacheKeys
		if !slices.Equal(got, want) {
			t.Fatalf("run %d (%s, %s join, select %v, where %v, max_delay %d, cache %d, aborts %d, backlog batches %v): outputs differ from the oracle (%d got, %d want):\n%s",
				run, mode, typ, sel, where, maxDelay, cacheKeys, d.aborts, d.backlogBatches, len(got), len(want), diffLines(want, got))
		}
		if late != wantLate {
			t.Fatalf("run %d (%s): %d dead letters, want %d late records", run, mode, late, wantLate)
		}
	}
	t.Logf("%s join, select %v, where %v, max_delay %d: %d outputs, %d late", typ, sel, where, maxDelay, len(want), wantLate)
}
