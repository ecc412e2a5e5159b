package task

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The top operator's metamorphic test: random orders with amounts that often tie, a few keys
// or many, and some bad records, ranked per key (n largest or smallest, ties in arrival order) in
// real-time mode, in backlog mode and with random switches, with aborts and produce errors. The
// last value of every row (Kafka key {"key":k,"rank":r}) must be what an oracle that ranks each
// key's good records in offset order computes, and every bad record one dead letter.

func topConfig(n int, order string) func(mode string, enter, exit int64, cacheKeys int, every string) string {
	return func(mode string, enter, exit int64, cacheKeys int, every string) string {
		return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    top: {input: orders, n: %d, by: amount, order: %s}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, testOp, n, order, testSink)
	}
}

type topRec struct {
	key, value string
	amount     *big.Rat // nil: a bad record
}

func genTop(rng *rand.Rand, n int) ([]*kgo.Record, []topRec) {
	keys := 1 + rng.IntN([]int{3, 30, 1000}[rng.IntN(3)])
	spread := []int{3, 50, 100000}[rng.IntN(3)] // few distinct amounts: many ties
	pBad := []float64{0, 0.05}[rng.IntN(2)]
	var recs []*kgo.Record
	var in []topRec
	for i := range n {
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		amt := strconv.Itoa(rng.IntN(spread) - spread/3)
		if rng.IntN(3) == 0 {
			amt += ".5"
		}
		value := fmt.Sprintf(`{"id":%d,"customer_id":%q,"amount":%s,"ts":%d}`, i, key, amt, 1_767_225_600_000+int64(i))
		r := topRec{key: key, value: value}
		r.amount, _ = new(big.Rat).SetString(amt)
		if rng.Float64() < pBad {
			r.amount = nil
			if rng.IntN(2) == 0 {
				value = fmt.Sprintf(`{"id":%d,"customer_id":%q,"amount":"x","ts":1}`, i, key)
			} else {
				value = value[:rng.IntN(len(value)-1)]
			}
		}
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(key), Value: []byte(value)})
		in = append(in, r)
	}
	return recs, in
}

// topOracle returns the last value of every row by its Kafka key, and the dead letters.
func topOracle(in []topRec, n int, desc bool) (map[string]string, int) {
	ranked := map[string][]topRec{}
	dead := 0
	for _, r := range in {
		if r.amount == nil {
			dead++
			continue
		}
		rows := ranked[r.key]
		at := len(rows)
		for i, x := range rows {
			if c := r.amount.Cmp(x.amount); desc && c > 0 || !desc && c < 0 {
				at = i
				break
			}
		}
		rows = append(rows[:at], append([]topRec{r}, rows[at:]...)...)
		ranked[r.key] = rows[:min(len(rows), n)]
	}
	want := map[string]string{}
	for k, rows := range ranked {
		for i, r := range rows {
			want[fmt.Sprintf(`{"key":%q,"rank":%d}`, k, i+1)] = strings.TrimSuffix(r.value, "}") + fmt.Sprintf(`,"rank":%d}`, i+1)
		}
	}
	return want, dead
}

func TestTopOneAnswerTwoModes(t *testing.T) {
	seeds := 20
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { topOneAnswer(t, seed) })
	}
}

func topOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 19))
	n := []int{1, 3, 10}[rng.IntN(3)]
	order := []string{"desc", "asc"}[rng.IntN(2)]
	recs, in := genTop(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	want, wantDead := topOracle(in, n, order == "desc")
	for _, ms := range keyedModes(rng) {
		ms.config = topConfig(n, order)
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (top %d %s; %s)", ms.name, n, order, r.summary)
		if r.offset != int64(len(recs)) {
			t.Fatalf("%s: committed offset %d, want %d", what, r.offset, len(recs))
		}
		if len(r.dead) != wantDead {
			t.Fatalf("%s: %d dead letters, want %d", what, len(r.dead), wantDead)
		}
		if !mapsEqual(r.last, want) {
			t.Fatalf("%s: rows differ from the oracle:\n%s", what, diffMaps(want, r.last))
		}
		if ms.name == "backlog" && ms.every == "0s" && len(r.outs) != len(want) {
			// One fold at the switch (no backlog checkpoints): each row written once.
			t.Fatalf("%s: %d outputs for %d rows", what, len(r.outs), len(want))
		}
	}
}
