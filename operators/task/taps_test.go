package task

import (
	"bytes"
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
