package task

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// The metamorphic tests of updating results read with retractions, one per operator:
//
//   - changes: a random upsert stream (rows of a few keys or many, often repeating the key's
//     row, tombstones, bad rows) turned into changes in real-time mode, in backlog mode and with
//     random switches, with aborts and injected produce errors. Replaying the committed changes
//     (a row adds the key's row, which must be absent; a retraction must name exactly the row
//     the key holds, and removes it) must give the table an oracle keeps from the upsert stream
//     (each key's latest row, none after a tombstone); every run leaves the same state (each
//     key's published row), and every bad row is one dead letter.
//   - an aggregate with retractions: a random change stream (rows of upstream ids under a few
//     group keys or many, each change of an id the retraction of its row and maybe a new row
//     under another group key, bad values) aggregated by group key with count, sum and avg in
//     the three modes with the pre-aggregation table's every regime. Each key's last output must
//     be what a big.Rat oracle computes from the rows the ids hold at the end (a tombstone for a
//     key left with none), and the state must be byte-identical in every mode: an addition and
//     its retraction cancel exactly, whatever the split between partials and sorted records.

func changesConfig(mode string, enter, exit int64, cacheKeys int, every string) string {
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id}
operators:
  - name: %s
    changes: {input: orders}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, testOp, testSink)
}

// genUpserts returns an upsert stream of rows {"customer_id":k,"v":x} (x from a small set, so a
// key's row often repeats), tombstones and bad rows; the table it leaves; and its bad rows.
func genUpserts(rng *rand.Rand, n int) ([]*kgo.Record, map[string]string, int) {
	keys := 1 + rng.IntN([]int{3, 30, 2000}[rng.IntN(3)])
	spread := []int{2, 5, 1000}[rng.IntN(3)]
	pDel := []float64{0, 0.1, 0.4}[rng.IntN(3)]
	pBad := []float64{0, 0.03}[rng.IntN(2)]
	table := map[string]string{}
	dead := 0
	var recs []*kgo.Record
	for i := range n {
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		var value []byte
		switch {
		case rng.Float64() < pBad:
			dead++
			if rng.IntN(2) == 0 {
				value = fmt.Appendf(nil, `{"customer_id":%q,"v":1,"retract":true}`, key) // the reserved field
			} else {
				value = fmt.Appendf(nil, `{"customer_id":%q,"v`, key)
			}
		case rng.Float64() < pDel:
			delete(table, key)
		default:
			value = fmt.Appendf(nil, `{"customer_id":%q,"v":%d}`, key, rng.IntN(spread))
			table[key] = string(value)
		}
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(key), Value: value})
	}
	return recs, table, dead
}

// replayChanges applies changes to a table: a row adds its key's row (the key must hold none),
// a retraction removes it (it must be the row the key holds).
func replayChanges(outs []*kgo.Record) (map[string]string, error) {
	const mark = `,"retract":true}`
	table := map[string]string{}
	for i, o := range outs {
		k, v := string(o.Key), string(o.Value)
		held, ok := table[k]
		if row, retract := strings.CutSuffix(v, mark); retract {
			row += "}"
			if !ok || held != row {
				return nil, fmt.Errorf("change %d of key %s retracts %s, but the key holds %q (held: %v)", i, k, row, held, ok)
			}
			delete(table, k)
			continue
		}
		if ok {
			return nil, fmt.Errorf("change %d of key %s adds %s while the key still holds %s (no retraction before it)", i, k, v, held)
		}
		table[k] = v
	}
	return table, nil
}

func TestChangesOneAnswerTwoModes(t *testing.T) {
	seeds := 20
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { changesOneAnswer(t, seed) })
	}
}

func changesOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 23))
	recs, want, wantDead := genUpserts(rng, []int{1, 50, 500, 2000}[rng.IntN(4)])
	var states [][]string
	for _, ms := range keyedModes(rng) {
		ms.config = changesConfig
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (%s)", ms.name, r.summary)
		if r.offset != int64(len(recs)) {
			t.Fatalf("%s: committed offset %d, want %d", what, r.offset, len(recs))
		}
		if len(r.dead) != wantDead {
			t.Fatalf("%s: %d dead letters, want %d", what, len(r.dead), wantDead)
		}
		got, err := replayChanges(r.outs)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !mapsEqual(got, want) {
			t.Fatalf("%s: the changes replayed differ from the upsert stream's table:\n%s", what, diffMaps(want, got))
		}
		if len(r.state) != len(want) {
			t.Fatalf("%s: %d keys in the state, want %d (a key's published row; none after a tombstone)", what, len(r.state), len(want))
		}
		states = append(states, r.state)
	}
	for i := 1; i < len(states); i++ {
		if !slices.Equal(states[0], states[i]) {
			t.Fatalf("state differs between modes 0 and %d:\n%s", i, diffLines(states[0], states[i]))
		}
	}
}

func retractionsConfig(mode string, enter, exit int64, cacheKeys int, every string) string {
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: category}
operators:
  - name: %s
    aggregate:
      input: orders
      retractions: true
      fields: {n: {count: {}}, total: {sum: v}, mean: {avg: v}}
    output: out
sinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, testOp, testSink)
}

// genRetractions returns a change stream: upstream ids holding a row {"category":..,"v":..};
// each change of an id writes the retraction of its row and, mostly, a new row (maybe under
// another category). It returns the rows the ids hold at the end per category, the categories
// that ever had a record, and the bad records.
func genRetractions(rng *rand.Rand, n int) (recs []*kgo.Record, final map[string][]*big.Rat, seen map[string]bool, dead int) {
	ids := 1 + rng.IntN([]int{3, 50, 3000}[rng.IntN(3)])
	cats := 1 + rng.IntN([]int{2, 20, 1000}[rng.IntN(3)])
	pDel := []float64{0, 0.2, 0.5}[rng.IntN(3)]
	pBad := []float64{0, 0.03}[rng.IntN(2)]
	type held struct{ cat, v string }
	rows := map[int]held{}
	seen = map[string]bool{}
	add := func(cat, value string) {
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(len(recs)), Key: []byte(cat), Value: []byte(value)})
	}
	for len(recs) < n {
		if rng.Float64() < pBad {
			dead++
			cat := "g-" + strconv.Itoa(rng.IntN(cats))
			if rng.IntN(2) == 0 {
				add(cat, fmt.Sprintf(`{"category":%q,"v":"x"}`, cat))
			} else {
				add(cat, fmt.Sprintf(`{"category":%q,"v":1,"retract":"yes"}`, cat))
			}
			continue
		}
		id := rng.IntN(ids)
		if h, ok := rows[id]; ok {
			add(h.cat, fmt.Sprintf(`{"category":%q,"id":%d,"v":%s,"retract":true}`, h.cat, id, h.v))
			delete(rows, id)
			if rng.Float64() < pDel {
				continue
			}
		}
		h := held{cat: "g-" + strconv.Itoa(rng.IntN(cats)), v: genAmount(rng)}
		rows[id] = h
		seen[h.cat] = true
		add(h.cat, fmt.Sprintf(`{"category":%q,"id":%d,"v":%s}`, h.cat, id, h.v))
	}
	final = map[string][]*big.Rat{}
	for _, h := range rows {
		v, ok := new(big.Rat).SetString(h.v)
		if !ok {
			panic(h.v)
		}
		final[h.cat] = append(final[h.cat], v)
	}
	return recs, final, seen, dead
}

// checkRetractionRow checks one category's last output against the values its ids hold.
func checkRetractionRow(cat, out string, vals []*big.Rat) error {
	if len(vals) == 0 {
		if out != "" {
			return fmt.Errorf("key %s: last output %s, want a tombstone (no row left)", cat, out)
		}
		return nil
	}
	var got struct {
		Key         string
		N           int
		Total, Mean json.Number
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		return fmt.Errorf("key %s: last output %q: %v", cat, out, err)
	}
	sum := new(big.Rat)
	for _, v := range vals {
		sum.Add(sum, v)
	}
	total, _ := new(big.Rat).SetString(string(got.Total))
	mean, _ := new(big.Rat).SetString(string(got.Mean))
	exact := new(big.Rat).Quo(sum, big.NewRat(int64(len(vals)), 1))
	off := new(big.Rat).Abs(new(big.Rat).Sub(mean, exact))
	switch {
	case got.Key != cat || got.N != len(vals) || total == nil || total.Cmp(sum) != 0:
		return fmt.Errorf("key %s: last output %s, want n=%d total=%s", cat, out, len(vals), sum.FloatString(4))
	case mean == nil || off.Cmp(big.NewRat(1, 2_000_000_000)) > 0:
		return fmt.Errorf("key %s: last output %s, want mean %s (to 9 places)", cat, out, exact.FloatString(10))
	}
	return nil
}

func TestRetractionsOneAnswerTwoModes(t *testing.T) {
	seeds := 20
	if *flagLong {
		seeds = 400
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { retractionsOneAnswer(t, seed) })
	}
}

func retractionsOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 29))
	recs, final, seen, wantDead := genRetractions(rng, []int{1, 50, 500, 3000}[rng.IntN(4)])
	var states [][]string
	for _, ms := range keyedModes(rng) {
		ms.config = retractionsConfig
		ms.window = []int64{0, 4, 16}[rng.IntN(3)] // a full pre-aggregation table may be bypassed
		r := runMode(t, seed, ms, genInput{recs: recs})
		what := fmt.Sprintf("%s (%s)", ms.name, r.summary)
		if r.offset != int64(len(recs)) {
			t.Fatalf("%s: committed offset %d, want %d", what, r.offset, len(recs))
		}
		if len(r.dead) != wantDead {
			t.Fatalf("%s: %d dead letters, want %d", what, len(r.dead), wantDead)
		}
		for cat := range seen {
			out, ok := r.last[cat]
			if !ok {
				t.Fatalf("%s: key %s: no output", what, cat)
			}
			if err := checkRetractionRow(cat, out, final[cat]); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		states = append(states, r.state)
	}
	for i := 1; i < len(states); i++ {
		if !slices.Equal(states[0], states[i]) {
			t.Fatalf("state differs between modes 0 and %d:\n%s", i, diffLines(states[0], states[i]))
		}
	}
}

// TestTombstonesPassStages: the chain that reads an aggregate with retractions passes its
// tombstones (a key that left the result) past its map to the sink under their key; its rows
// go through the map. A tombstone anywhere else stays a dead letter. (The map reads the output
// topic: processing.inline_stages off; TestInlineStagesAsReadBack compares both ways.)
func TestTombstonesPassStages(t *testing.T) {
	plan := mustPlan(t, `
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
processing: {inline_stages: false}
sources:
  orders: {topic: orders, key: tier}
operators:
  - name: per_tier
    aggregate: {input: orders, retractions: true, fields: {n: {count: {}}}}
  - name: columns
    map: {input: per_tier, select: [{tier: key}, n]}
    output: out
sinks:
  out: {topic: tiers}
`)
	topic := plan.Config.OutputTopic("per_tier")
	prod := newFakeProducer()
	tk, err := New(plan, topic, 0, Deps{Store: state.NewMem(), Producer: prod, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	recs := []*kgo.Record{
		{Topic: topic, Offset: 0, Key: []byte("gold"), Value: []byte(`{"key":"gold","n":2}`)},
		{Topic: topic, Offset: 1, Key: []byte("gold")},
	}
	tk.BeforeBatch(topic, Lag{})
	if err := tk.Process(topic, recs); err != nil {
		t.Fatal(err)
	}
	prod.commit()
	out := prod.committed("tiers")
	if len(out) != 2 || string(out[0].Value) != `{"tier":"gold","n":2}` || string(out[1].Key) != "gold" || out[1].Value != nil {
		t.Fatalf("sink got %d records (%v), want the row through the map and a tombstone of gold", len(out), out)
	}
	if dl := prod.committed("meta-dlq"); len(dl) != 0 {
		t.Fatalf("%d dead letters, want none", len(dl))
	}
}
