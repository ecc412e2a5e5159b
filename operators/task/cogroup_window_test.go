package task

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The windowed cogroup's metamorphic test: orders and refunds with out-of-order event times,
// tumbling windows with grace, emit final. A record is late when its own input's watermark
// (including it) has reached its window's end + grace; a window closes when the smaller of the
// two inputs' watermarks does. Every run (modes, switches, aborts, interleavings) must commit
// exactly the oracle's finals and as many dead letters as late records.

func cogroupWindowConfig(mode string, size, grace, maxDelay int64, cacheKeys int) string {
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
      window: {tumbling: %dms, grace: %dms}
      emit: final
      fields:
        spent: {sum: amount, from: orders}
        orders: {count: {}, from: orders}
        refunded: {sum: amount, from: refunds}
        refunds: {count: {}, from: refunds}
    output: out
sinks:
  out: {topic: %s}
`, cacheKeys, mode, cgOrders, maxDelay, cgRefunds, maxDelay, cgOp, size, grace, cgSink)
}

func TestCogroupWindowsOneAnswerTwoModes(t *testing.T) {
	seeds := 12
	if *flagLong {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { cogroupWindowsOneAnswer(t, seed) })
	}
}

func cogroupWindowsOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1234))
	size, grace := int64(1000), []int64{0, 200}[rng.IntN(2)]
	maxDelay := []int64{0, 300, 1500}[rng.IntN(3)]
	n := 200 + rng.IntN(800)
	keys := 1 + rng.IntN([]int{3, 30}[rng.IntN(2)])
	base := int64(1_767_225_600_000)
	jitter := int64(rng.IntN(3)) * 800
	var inputs [2][]*kgo.Record
	type rec struct {
		key string
		ts  int64
		amt *big.Rat
	}
	var recs [2][]rec
	for i := range n {
		side := rng.IntN(2)
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*50 + rng.Int64N(jitter+1) - jitter/2
		amt := genAmount(rng)
		a, _ := new(big.Rat).SetString(amt)
		topic := []string{cgOrders, cgRefunds}[side]
		inputs[side] = append(inputs[side], &kgo.Record{Topic: topic, Offset: int64(len(inputs[side])), Key: []byte(key),
			Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%s,"ts":%d}`, key, amt, ts)})
		recs[side] = append(recs[side], rec{key, ts, a})
	}
	// The oracle.
	type agg struct {
		sum [2]*big.Rat
		n   [2]int64
	}
	windows := map[string]*agg{} // key + window start
	late := 0
	final := [2]int64{math.MinInt64, math.MinInt64}
	for side := range 2 {
		wm := int64(math.MinInt64)
		for _, r := range recs[side] {
			wm = max(wm, r.ts-maxDelay)
			start := r.ts - ((r.ts%size)+size)%size
			if wm >= start+size+grace {
				late++
				continue
			}
			k := r.key + "@" + strconv.FormatInt(start, 10)
			w := windows[k]
			if w == nil {
				w = &agg{sum: [2]*big.Rat{new(big.Rat), new(big.Rat)}}
				windows[k] = w
			}
			w.sum[side].Add(w.sum[side], r.amt)
			w.n[side]++
		}
		final[side] = wm
	}
	opWM := min(final[0], final[1])
	var want []string
	for k, w := range windows {
		key, startS, _ := cut(k, "@")
		start, _ := strconv.ParseInt(startS, 10, 64)
		if start+size+grace > opWM {
			continue // still open at the end
		}
		want = append(want, fmt.Sprintf(`%s {"key":%q,"window_start":%d,"window_end":%d,"orders":%d,"refunded":%s,"refunds":%d,"spent":%s}`,
			key, key, start, start+size, w.n[0], ratText(w.sum[1]), w.n[1], ratText(w.sum[0])))
	}
	sort.Strings(want)
	for run, mode := range []string{"never", "always", "auto", "auto", "auto"} {
		rr := rand.New(rand.NewPCG(seed, uint64(run)+10))
		r := runTwoInputs(t, rr, run, func(cacheKeys int) string { return cogroupWindowConfig(mode, size, grace, maxDelay, cacheKeys) }, inputs[0], inputs[1])
		got, dead, d, cacheKeys := r.got, r.dead, r.d, r.cacheKeys
		if !slices.Equal(got, want) {
			t.Fatalf("run %d (%s, cache %d, max_delay %d, grace %d, aborts %d, backlog %v): finals differ from the oracle (%d got, %d want):\n%s",
				run, mode, cacheKeys, maxDelay, grace, d.aborts, d.backlogBatches, len(got), len(want), diffLines(want, got))
		}
		if dead != late {
			t.Fatalf("run %d (%s): %d dead letters, want %d late records", run, mode, dead, late)
		}
	}
}

func cut(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
