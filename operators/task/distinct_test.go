package task

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
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
	seeds := 20
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { distinctOneAnswer(t, seed) })
	}
}

func distinctOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 15))
	recs, in := genDistinct(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	want, wantDead := distinctOracle(in)
	for _, ms := range keyedModes(rng) {
		ms.config = distinctConfig
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (%s)", ms.name, r.summary)
		if r.offset != int64(len(recs)) {
			t.Fatalf("%s: committed offset %d, want %d", what, r.offset, len(recs))
		}
		if len(r.dead) != wantDead {
			t.Fatalf("%s: %d dead letters, want %d", what, len(r.dead), wantDead)
		}
		var got []string
		for _, o := range r.outs {
			got = append(got, string(o.Key)+" "+string(o.Value))
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: outputs differ from the oracle (%d got, %d want):\n%s", what, len(got), len(want), diffLines(want, got))
		}
	}
}
