package task

import (
	"bytes"
	"fmt"
	"github.com/valyala/fastjson"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// TestTaps: an operator with an output that also feeds later operators sends its records to its
// sink as they leave it, and they go on down the chain: here every enriched order to "all",
// and the large ones, after a filter, to "big".
func TestTaps(t *testing.T) {
	plan := mustPlan(t, `
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
sources:
  orders: {topic: orders, key: customer_id}
operators:
  - name: tagged
    map: {input: orders, set: {tag: "'x'"}}
    output: all
  - name: large
    filter: {input: tagged, expr: amount > 100}
    output: big
sinks:
  all: {topic: all-orders}
  big: {topic: big-orders}
`)
	var desc bytes.Buffer
	plan.Describe(&desc)
	if !strings.Contains(desc.String(), "(and on to sink all, topic all-orders)") {
		t.Errorf("Describe does not show the tap:\n%s", desc.String())
	}
	prod := newFakeProducer()
	tk, err := New(plan, "orders", 0, Deps{Store: state.NewMem(), Producer: prod, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	recs := []*kgo.Record{
		{Topic: "orders", Offset: 0, Key: []byte("c1"), Value: []byte(`{"customer_id":"c1","amount":50}`)},
		{Topic: "orders", Offset: 1, Key: []byte("c2"), Value: []byte(`{"customer_id":"c2","amount":500}`)},
	}
	tk.BeforeBatch("orders", Lag{})
	if err := tk.Process("orders", recs); err != nil {
		t.Fatal(err)
	}
	prod.commit()
	all, big := prod.committed("all-orders"), prod.committed("big-orders")
	if len(all) != 2 || len(big) != 1 || string(big[0].Key) != "c2" {
		t.Fatalf("all %d records, big %d (%v); want 2 and 1 (c2)", len(all), len(big), big)
	}
	for _, r := range all {
		if !strings.Contains(string(r.Value), `"tag":"x"`) {
			t.Errorf("tapped record %s lacks the map's field", r.Value)
		}
	}
}

// tapsHeldConfig is a pipeline whose chain taps its records to the sink "copy" before an
// operator that can hold the chain's progress: agg is the operator, reading "tagged".
func tapsHeldConfig(mode string, agg string) string {
	return testHeader(mode, 20, 5, 64, "0s") + fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: 2s}}
operators:
  - name: tagged
    map: {input: orders, set: {tag: "'x'"}}
    output: copy
%ssinks:
  copy: {topic: copy-orders, format: json}
  out: {topic: %s, format: json}
`, testTopic, agg, testSink)
}

// checkTappedOnce fails unless the committed copy-orders holds each order of in once.
func checkTappedOnce(t *testing.T, prod *fakeProducer, in []*kgo.Record) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range prod.committed("copy-orders") {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(v.GetStringBytes("order_id"))+"/"+strconv.Itoa(v.GetInt("ts"))]++
	}
	dups, missing := 0, 0
	for _, r := range in {
		v := fastjson.MustParseBytes(r.Value)
		k := string(v.GetStringBytes("order_id")) + "/" + strconv.Itoa(v.GetInt("ts"))
		switch n := seen[k]; {
		case n == 0:
			missing++
		case n > 1:
			dups++
		}
		delete(seen, k)
	}
	if dups > 0 || missing > 0 || len(seen) > 0 {
		t.Fatalf("copy-orders: %d orders tapped more than once, %d never, %d unknown (of %d)", dups, missing, len(seen), len(in))
	}
}

// TestTapsOnceWhileHeld: a chain that taps its records to a sink before an operator holding its
// progress across checkpoints (a keyed operator sorting a backlog; a re-keying writer holding
// its combined table) writes each record to the tap's sink once, through aborts and restarts:
// the taps' progress is their own.
func TestTapsOnceWhileHeld(t *testing.T) {
	t.Run("keyed backlog", func(t *testing.T) {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 9))
			doc := tapsHeldConfig("always", `  - name: totals
    aggregate: {input: tagged, fields: {n: {count: {}}, total: {sum: amount}}}
    output: out
`)
			tk := newTestTask(t, mustPlan(t, doc), state.NewMem(), 1<<20, 0)
			in := genCombineOrders(rng, 300)
			d := &driver{t: t, rng: rng, task: tk, prod: newFakeProducer(), input: in,
				maxBatch: 20, pCkpt: 0.3, pAbort: 0.3, maxAborts: 5, lag: func(d *driver, end int) int64 { return int64(len(d.input) - end + 100) }}
			tk.d.Producer = d.prod
			d.run()
			checkTappedOnce(t, d.prod, in)
		}
	})
	t.Run("combining writer", func(t *testing.T) {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 10))
			doc := tapsHeldConfig("auto", `  - name: totals
    aggregate: {input: tagged, group_by: region, fields: {n: {count: {}}, total: {sum: amount}}}
    output: out
`)
			in := genCombineOrders(rng, 300)
			run := runCombine(t, seed, doc, map[string][]*kgo.Record{testTopic: in}, true)
			checkTappedOnce(t, run.prod, in)
		}
	})
}
