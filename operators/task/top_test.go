package task

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
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

// topConfig is the pipeline of a top of n by amount; changelog: "topic", or "output" (its rows
// are its changelog); omit: its rows without the rank column (omit_rank).
func topConfig(n int, order, changelog string, omit bool) func(mode string, enter, exit int64, cacheKeys int, every string) string {
	return func(mode string, enter, exit int64, cacheKeys int, every string) string {
		return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    top: {input: orders, n: %d, by: amount, order: %s, changelog: %s, omit_rank: %t}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, testOp, n, order, changelog, omit, testSink)
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

// topOracle returns the last value of every row by its Kafka key (without the rank column:
// omit), and the dead letters.
func topOracle(in []topRec, n int, desc, omit bool) (map[string]string, int) {
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
			row := strings.TrimSuffix(r.value, "}") + fmt.Sprintf(`,"rank":%d}`, i+1)
			if omit {
				row = r.value
			}
			want[fmt.Sprintf(`{"key":%q,"rank":%d}`, k, i+1)] = row
		}
	}
	return want, dead
}

func TestTopOneAnswerTwoModes(t *testing.T) { eachTopSeed(t, "topic", false) }

// TestTopOneAnswerTwoModesOutputLog is TestTopOneAnswerTwoModes with the top's rows as its
// changelog (changelog: output): the same rows, each to the task's partition with its key's
// header, and the stored states are what a restore gathers from the committed rows, at the
// offset after the last.
func TestTopOneAnswerTwoModesOutputLog(t *testing.T) { eachTopSeed(t, "output", false) }

// TestTopOneAnswerTwoModesOmitRank is TestTopOneAnswerTwoModesOutputLog with rows without the
// rank column (omit_rank): each row is the record as it came, and a restore takes the rank from
// the row's Kafka key.
func TestTopOneAnswerTwoModesOmitRank(t *testing.T) { eachTopSeed(t, "output", true) }

// eachTopSeed runs topOneAnswer for each seed (-long: more; -seed: one).
func eachTopSeed(t *testing.T, changelog string, omit bool) {
	seeds := 20
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { topOneAnswer(t, seed, changelog, omit) })
	}
}

func topOneAnswer(t *testing.T, seed uint64, changelog string, omit bool) {
	rng := rand.New(rand.NewPCG(seed, 19))
	n := []int{1, 3, 10}[rng.IntN(3)]
	order := []string{"desc", "asc"}[rng.IntN(2)]
	recs, in := genTop(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	want, wantDead := topOracle(in, n, order == "desc", omit)
	for _, ms := range keyedModes(rng) {
		ms.config = topConfig(n, order, changelog, omit)
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (top %d %s; %s)", ms.name, n, order, r.summary)
		if changelog == "output" {
			checkGathered(t, what, ms.config(ms.mode, ms.enter, ms.exit, ms.cacheKeys, "0s"), r)
		}
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

// checkGathered checks a run of a top whose rows are its changelog: every committed row went to
// the task's partition with its key's header, the states a restore gathers from them
// (StateChecks.Gather, in the rows' order) are the stored states byte for byte, and the stored
// changelog offset is the one after the last row.
func checkGathered(t *testing.T, what, doc string, r runResult) {
	t.Helper()
	checks, err := NewStateChecks(mustPlan(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string][]byte{}
	old := func(k []byte) ([]byte, error) { return gathered[string(k)], nil }
	for _, row := range r.outs {
		if row.Partition != 0 {
			t.Fatalf("%s: row %s went to partition %d, want the task's, 0", what, row.Key, row.Partition)
		}
		k, st, ok, err := checks.Gather(testOp, row, old)
		if !ok || err != nil {
			t.Fatalf("%s: row %s=%s: Gather = %v, %v", what, row.Key, row.Value, ok, err)
		}
		gathered[string(k)] = st
	}
	var got []string
	for k, st := range gathered {
		got = append(got, fmt.Sprintf("%s=%x", k, st))
	}
	stored := slices.Sorted(slices.Values(r.state))
	slices.Sort(got)
	for i := range max(len(got), len(stored)) {
		if i >= len(got) || i >= len(stored) || got[i] != stored[i] {
			t.Fatalf("%s: the states gathered from the rows (%d) differ from the stored ones (%d), first at %d:\ngathered %.200s\nstored   %.200s",
				what, len(got), len(stored), i, at(got, i), at(stored, i))
		}
	}
	if len(r.outs) > 0 && r.stored != r.outs[len(r.outs)-1].Offset+1 {
		t.Fatalf("%s: stored changelog offset %d, want %d (after the last row)", what, r.stored, r.outs[len(r.outs)-1].Offset+1)
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}
