package task

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The dedup operator's metamorphic test: random orders with duplicates of a few keys or many,
// event times out of order and some records that are not JSON, deduplicated keeping the first
// (for ever, or within a time) or the last record per key, in real-time mode, in backlog mode
// and with random switches, with aborts and injected produce errors. Every run must commit what
// an oracle that knows the rule computes from the input: keep first, each key's first record
// exactly once (with within, a key forgets its first record once the watermark, the largest
// event time so far minus max_delay, passes its time + within, and a record whose time +
// within the watermark including it has passed is late); keep last, each key's latest record as
// its last output; every bad and late record one dead letter.

func dedupConfig(keep string, within, maxDelay int64, local bool) func(mode string, enter, exit int64, cacheKeys int, every string) string {
	w := ""
	if within > 0 {
		w = fmt.Sprintf(", within: %dms", within)
	}
	if local {
		w += `, group_by: "shard, customer_id"`
	}
	return func(mode string, enter, exit int64, cacheKeys int, every string) string {
		h := testHeader(mode, enter, exit, cacheKeys, every)
		if local {
			h = localRekey(h)
		}
		return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    dedup: {input: orders, keep: %s%s}
    output: out
sinks:
  out: {topic: %s, format: json}
`, h, testTopic, maxDelay, testOp, keep, w, testSink)
	}
}

// localRekey turns processing.local_rekey on in a test header.
func localRekey(header string) string {
	return strings.Replace(header, "processing: {", "processing: {local_rekey: true, ", 1)
}

// addShard gives each record a member shard (0-2) before its others, and the oracle's records
// the key a dedup by (shard, customer_id) gives them.
func addShard(recs []*kgo.Record, in []dedupRec) {
	for i, r := range recs {
		shard := i % 3
		r.Value = append([]byte(fmt.Sprintf(`{"shard":%d,`, shard)), r.Value[min(1, len(r.Value)):]...)
		in[i].value = string(r.Value)
		in[i].key = fmt.Sprintf(`{"shard":%d,"customer_id":%q}`, shard, in[i].key)
	}
}

type dedupRec struct {
	key, value string
	ts         int64
	bad        bool
}

func genDedup(rng *rand.Rand, n int) ([]*kgo.Record, []dedupRec) {
	keys := 1 + rng.IntN([]int{3, 30, 3000}[rng.IntN(3)])
	jitter := int64([]int{0, 50, 2000}[rng.IntN(3)])
	pBad := []float64{0, 0.03}[rng.IntN(2)]
	base := int64(1_767_225_600_000)
	var recs []*kgo.Record
	var in []dedupRec
	for i := range n {
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*10 + rng.Int64N(jitter+1) - jitter/2
		value := fmt.Sprintf(`{"id":%d,"customer_id":%q,"ts":%d}`, i, key, ts)
		r := dedupRec{key: key, value: value, ts: ts}
		if rng.Float64() < pBad {
			value = value[:rng.IntN(len(value)-1)]
			r.bad = true
		}
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(key), Value: []byte(value)})
		in = append(in, r)
	}
	return recs, in
}

// dedupOracle returns, for keep first, the outputs as sorted "key value" lines (keep last: the
// last value per key) and the number of dead letters.
func dedupOracle(in []dedupRec, keep string, within, maxDelay int64) (first []string, last map[string]string, dead int) {
	last = map[string]string{}
	seen := map[string]int64{} // keep first: key -> the time its first record is forgotten (MaxInt64: never)
	wm := int64(math.MinInt64)
	for _, r := range in {
		if r.bad {
			dead++
			continue
		}
		wm = max(wm, r.ts-maxDelay)
		if keep == "last" {
			last[r.key] = r.value
			continue
		}
		if within > 0 && wm > r.ts+within {
			dead++ // late
			continue
		}
		if _, dup := seen[r.key]; !dup {
			first = append(first, r.key+" "+r.value)
			seen[r.key] = math.MaxInt64
			if within > 0 {
				seen[r.key] = r.ts + within
			}
		}
		for k, at := range seen { // timers fire after the record that moved the watermark to them
			if at <= wm {
				delete(seen, k)
			}
		}
	}
	sort.Strings(first)
	return first, last, dead
}

func TestDedupOneAnswerTwoModes(t *testing.T) {
	seeds := 20
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { dedupOneAnswer(t, seed, false) })
	}
}

// TestDedupLocalRekey is the dedup's metamorphic test by a composite key that holds the
// source's key, (shard, customer_id), with processing.local_rekey: the operator runs in the
// source's partition under that key (one chain, no repartition topic) and gives the oracle's
// answer in every mode.
func TestDedupLocalRekey(t *testing.T) {
	eachSeed(t, seedCounts{normal: 20, short: 5, long: 400}, func(t *testing.T, seed uint64, _ int) {
		dedupOneAnswer(t, seed, true)
	})
}

func dedupOneAnswer(t *testing.T, seed uint64, local bool) {
	rng := rand.New(rand.NewPCG(seed, 18))
	keep := []string{"first", "last"}[rng.IntN(2)]
	var within int64
	if keep == "first" {
		within = []int64{0, 100, 5000}[rng.IntN(3)]
	}
	maxDelay := []int64{0, 500}[rng.IntN(2)]
	recs, in := genDedup(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	if local {
		addShard(recs, in)
	}
	wantFirst, wantLast, wantDead := dedupOracle(in, keep, within, maxDelay)
	cfg := dedupConfig(keep, within, maxDelay, local)
	// keep last holds each key's latest record in a table in backlog (latest.go): its shipped
	// bounds, or ones that evict, overflow their bytes and give up on a low hit rate mid-backlog.
	lim := rand.New(rand.NewPCG(seed, 19))
	defer func(old struct {
		keys          int
		bytes, window int64
	}) {
		latestLimits = old
	}(latestLimits)
	latestLimits.keys = []int{latestLimits.keys, 1, 3, 16}[lim.IntN(4)]
	latestLimits.bytes = []int64{latestLimits.bytes, 120}[lim.IntN(2)]
	latestLimits.window = []int64{latestLimits.window, 4}[lim.IntN(2)]
	if p := mustPlan(t, cfg("auto", 50, 10, 1, "0s")); len(p.Chains) != 1 || (p.Chains[0].LocalKey != "") != local {
		t.Fatalf("local_rekey %v: want one chain, keyed locally as local_rekey says, got %+v", local, p.Chains)
	}
	for _, ms := range keyedModes(rng) {
		ms.config = cfg
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (keep %s, within %d, max_delay %d, table %+v; %s)", ms.name, keep, within, maxDelay, latestLimits, r.summary)
		checkCommitted(t, what, r, len(recs), wantDead)
		if keep == "last" {
			if !mapsEqual(r.last, wantLast) {
				t.Fatalf("%s: last record per key differs from the oracle:\n%s", what, diffMaps(wantLast, r.last))
			}
			if len(r.state) != 0 {
				t.Fatalf("%s: keep last left state after its last commit: %v", what, r.state)
			}
			continue
		}
		checkOutputLines(t, what, r, wantFirst)
	}
}

// keyedModes returns the three runs of a Keyed operator's metamorphic test, drawn from rng:
// real-time only, backlog only (with or without backlog checkpoints), and random switches on
// Pebble with injected produce errors; every run with random batches, checkpoints and aborts.
func keyedModes(rng *rand.Rand) []modeSpec {
	cacheKeys := []int{1, 4, 100000}[rng.IntN(3)]
	huge := int64(1) << 40
	enter := int64(2 + rng.IntN(60))
	exit := int64(rng.IntN(int(enter)))
	lagPoints := []int64{0, exit, exit + 1, enter, huge}
	every := []string{"0s", "0s", "3ms"}
	var cur int64
	return []modeSpec{
		{name: "realtime", mode: "never", enter: 50, exit: 10, cacheKeys: cacheKeys,
			lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }},
		{name: "backlog", mode: "always", enter: 50, exit: 10, cacheKeys: cacheKeys, every: every[rng.IntN(len(every))],
			lag: func(*driver, int) int64 { return huge }},
		{name: "switching", mode: "auto", enter: enter, exit: exit, cacheKeys: cacheKeys, pebble: true,
			pFail: []float64{0, 0.01}[rng.IntN(2)], every: every[rng.IntN(len(every))],
			lag: func(d *driver, _ int) int64 {
				if d.rng.IntN(4) == 0 {
					cur = lagPoints[d.rng.IntN(len(lagPoints))]
				}
				return cur
			}},
	}
}
