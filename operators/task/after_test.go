package task

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// afterPipelines are keyed operators whose results only filters and maps read before a sink
// (processing.inline_stages), each with its stages: rows and tombstones of an aggregate with
// retractions, a top's rows, the finals of windows read with their time (ts), and a map that
// fails on some results (dead letters).
var afterPipelines = []string{
	`  - name: totals
    aggregate: {input: orders, retractions: true, fields: {n: {count: {}}, total: {sum: amount}}}
  - name: cols
    map: {input: totals, select: [{customer: key}, n, total]}
  - name: some
    filter: {input: cols, expr: "n != 2"}
    output: out
`,
	`  - name: best
    top: {input: orders, n: 2, by: amount}
  - name: cols
    map: {input: best, select: [{customer: customer_id}, amount, {place: rank}]}
    output: out
`,
	`  - name: per_second
    aggregate: {input: orders, window: {tumbling: 1s}, emit: final, fields: {n: {count: {}}, hi: {max: amount}}}
  - name: cols
    map: {input: per_second, set: {at: "ts", customer: "key"}}
  - name: busy
    filter: {input: cols, expr: "n > 1"}
    output: out
`,
	`  - name: totals
    aggregate: {input: orders, fields: {n: {count: {}}, total: {sum: amount}}}
  - name: share
    map: {input: totals, set: {q: "total / (n - 2)"}}
    output: out
`,
}

// genAfterInput returns n orders of a few customers in time order (some retractions, some
// records that do not decode).
func genAfterInput(rng *rand.Rand, n int) []*kgo.Record {
	recs := make([]*kgo.Record, 0, n)
	ts := int64(1_700_000_000_000)
	for i := range n {
		ts += int64(rng.IntN(400))
		c := fmt.Sprintf("c%d", rng.IntN(12))
		v := fmt.Sprintf(`{"customer_id":%q,"amount":%d,"ts":%d}`, c, rng.IntN(50), ts)
		switch rng.IntN(20) {
		case 0:
			v = `{"customer_id":` // does not decode: the writer's dead letter
		case 1, 2:
			v = fmt.Sprintf(`{"customer_id":%q,"amount":%d,"ts":%d,"retract":true}`, c, rng.IntN(50), ts)
		}
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(c), Value: []byte(v), Timestamp: time.UnixMilli(ts)})
	}
	return recs
}

// TestInlineStagesAsReadBack: the stages run on each result in the writer's task write to the
// sink exactly what the chain that read the results back from the output topic wrote (the same
// records in the same order, tombstones included), and the same dead letters, in every backlog
// mode, with random batches, checkpoints and aborts (the oracle: processing.inline_stages
// false, the results through the output topic).
func TestInlineStagesAsReadBack(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 12
	}
	var tombstones, stageDead, rows int
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 77))
		pipe := rng.IntN(len(afterPipelines))
		mode := []string{"never", "always", "auto"}[rng.IntN(3)]
		cache := []int{1, 3, 100}[rng.IntN(3)]
		input := genAfterInput(rng, 100+rng.IntN(400))
		seed := rng.Uint64()
		writerOp := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(afterPipelines[pipe], "\n", 2)[0], "  - name:"))
		config := func(inline bool) string {
			h := strings.Replace(testHeader(mode, 30, 5, cache, "0s"), "cache_keys: ", fmt.Sprintf("inline_stages: %v, cache_keys: ", inline), 1)
			return h + `sources:
  orders: {topic: orders, format: json, key: customer_id, timestamp: ts}
operators:
` + afterPipelines[pipe] + `sinks:
  out: {topic: ` + testSink + `, format: json}
`
		}
		what := fmt.Sprintf("round %d (pipeline %d, mode %s, cache %d)", round, pipe, mode, cache)
		outTopic := testGroup + "-" + writerOp + "-output"
		internal := map[string]int32{} // a stateless reader needs no writer's announcement
		newTask := func(cfg, topic string) (*Task, *fakeProducer) {
			prod := newFakeProducer()
			clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
			tk, err := New(mustPlan(t, cfg), topic, 0, Deps{Store: state.NewMem(), Budget: sorter.NewBudget(64 << 10), SortDir: t.TempDir(),
				Clock: clk.Now, Logger: discardLogger(), Producer: prod, InternalPartitions: internal})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			t.Cleanup(tk.Close)
			return tk, prod
		}
		drive := func(tk *Task, prod *fakeProducer, topic string, in []*kgo.Record, seed uint64) {
			r := rand.New(rand.NewPCG(seed, 1))
			d := &driver{t: t, rng: r, task: tk, prod: prod, topic: topic, input: in, maxBatch: 1 + r.IntN(40),
				pCkpt: 0.2, pAbort: 0.2, maxAborts: 3, offset: -1,
				lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }}
			d.run()
			d.end()
		}

		// In the writer's task, the results written to the output topic too (afterTap), as
		// the oracle's input.
		it, ip := newTask(config(true), testTopic)
		afterTap = func(p Producer, r *kgo.Record, promise func(*kgo.Record, error)) { p.Produce(r, promise) }
		drive(it, ip, testTopic, input, seed)
		afterTap = nil
		got := ip.committed(testSink)
		gotDead := ip.committed(testGroup + "-dlq")

		// The oracle: a chain reading those results back from the output topic.
		var results []*kgo.Record
		for _, r := range ip.committed(outTopic) {
			c := *r
			c.Offset = int64(len(results))
			results = append(results, &c)
		}
		rt, rp := newTask(config(false), outTopic)
		drive(rt, rp, outTopic, results, seed+1)
		want := rp.committed(testSink)
		var wantDead []*kgo.Record
		for _, r := range gotDead {
			if hdr(r, codec.HeaderOperator) == "source orders" {
				wantDead = append(wantDead, r) // the writer's own
			}
		}
		wantDead = append(wantDead, rp.committed(testGroup+"-dlq")...)

		if len(want) == 0 {
			t.Fatalf("%s: the oracle wrote nothing to the sink: the round tests nothing", what)
		}
		for _, r := range want {
			if r.Value == nil {
				tombstones++
			} else {
				rows++
			}
		}
		for _, r := range wantDead {
			if hdr(r, codec.HeaderOperator) == "share" {
				stageDead++
			}
		}
		if !slices.EqualFunc(got, want, func(a, b *kgo.Record) bool {
			return string(a.Key) == string(b.Key) && string(a.Value) == string(b.Value) && (a.Value == nil) == (b.Value == nil)
		}) {
			t.Fatalf("%s: the sink got\n%s\nwant (through the output topic)\n%s", what, recordLines(got), recordLines(want))
		}
		byValue := func(a, b *kgo.Record) int { return strings.Compare(string(a.Value), string(b.Value)) }
		slices.SortStableFunc(gotDead, byValue)
		slices.SortStableFunc(wantDead, byValue)
		if len(gotDead) != len(wantDead) {
			t.Fatalf("%s: %d dead letters, want %d:\n%s\nwant\n%s", what, len(gotDead), len(wantDead), recordLines(gotDead), recordLines(wantDead))
		}
		for i := range gotDead {
			g, w := hdr(gotDead[i], codec.HeaderOperator), hdr(wantDead[i], codec.HeaderOperator)
			if g != w || string(gotDead[i].Value) != string(wantDead[i].Value) {
				t.Fatalf("%s: dead letter %d: operator %q value %q, want %q %q", what, i, g, gotDead[i].Value, w, wantDead[i].Value)
			}
		}
	}
	if tombstones == 0 || stageDead == 0 || rows == 0 {
		t.Fatalf("the rounds wrote %d rows, %d tombstones and %d dead letters: some case is not tested", rows, tombstones, stageDead)
	}
	t.Logf("%d rows, %d tombstones, %d dead letters compared", rows, tombstones, stageDead)
}

// recordLines prints records as "key value" lines (a tombstone's value as <nil>).
func recordLines(rs []*kgo.Record) string {
	var b strings.Builder
	for _, r := range rs {
		v := string(r.Value)
		if r.Value == nil {
			v = "<nil>"
		}
		fmt.Fprintf(&b, "  %s %s\n", r.Key, v)
	}
	return b.String()
}

// TestInlineStagesCounted: the records the stages write count under their sink in
// sluice_records_out_total, none under the output topic the plan no longer has, and the dead
// letters of the stages and of their source are declared at 0 from the start.
func TestInlineStagesCounted(t *testing.T) {
	plan := mustPlan(t, testHeader("never", 30, 5, 100, "0s")+`sources:
  orders: {topic: orders, format: json, key: customer_id, timestamp: ts}
operators:
`+afterPipelines[0]+`sinks:
  out: {topic: `+testSink+`, format: json}
`)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Declare(plan)
	prod := newFakeProducer()
	tk, err := New(plan, testTopic, 0, Deps{Store: state.NewMem(), Producer: prod, Logger: discardLogger(), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	d := &driver{t: t, rng: rng, task: tk, prod: prod, input: genAfterInput(rng, 300), maxBatch: 20, pCkpt: 0.3, offset: -1,
		lag: func(d *driver, end int) int64 { return int64(len(d.input) - end) }}
	d.run()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	dead := map[string]bool{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				switch {
				case mf.GetName() == "sluice_records_out_total" && lp.GetName() == "topic":
					out[lp.GetValue()] = s.GetCounter().GetValue()
				case mf.GetName() == "sluice_dead_letters_total" && lp.GetName() == "operator":
					dead[lp.GetValue()] = true
				}
			}
		}
	}
	// Aborted transactions count too (the counter says what was produced); this driver aborts none.
	if n := len(prod.committed(testSink)); n == 0 || out[testSink] != float64(n) {
		t.Errorf("records out for %s: %v, want %d (the sink's records)", testSink, out[testSink], n)
	}
	if v, ok := out[testGroup+"-totals-output"]; ok {
		t.Errorf("records out for the output topic the plan dropped: %v", v)
	}
	for _, op := range []string{"cols", "some", "source totals", "produce " + testSink} {
		if !dead[op] {
			t.Errorf("dead letters of %q not declared (declared: %v)", op, dead)
		}
	}
}
