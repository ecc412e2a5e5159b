package consumer

import (
	"testing"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/plan"
)

const statusConfig = `
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
sources:
  orders: {topic: orders, format: json, key: customer_id, timestamp: ts}
operators:
  - name: totals
    aggregate:
      input: orders
      fields: {total: {sum: amount}}
    output: out
sinks:
  out: {topic: totals, format: json}
`

// TestStatusBeforeTaskBuilt checks a runner whose goroutine has not built its task yet (assigned
// registers runners; each builds its task itself): Status shows it as restoring, by topic and
// partition, and the engine is not ready.
func TestStatusBeforeTaskBuilt(t *testing.T) {
	cfg, err := configs.Parse([]byte(statusConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := plan.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Config: cfg, Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	k := tp{"orders", 3}
	e.mu.Lock()
	e.runs[k] = &runner{key: k, topics: []string{"orders"}, first: map[string]int64{}}
	e.joined = true
	e.mu.Unlock()
	st := e.Status()
	if len(st) != 1 || st[0].Partition != 3 || len(st[0].Chains) != 1 {
		t.Fatalf("Status = %+v, want one task of partition 3 with one chain", st)
	}
	if c := st[0].Chains[0]; c.Topic != "orders" || c.Operator != "totals" || c.Mode != "restoring" || c.NextOffset != -1 {
		t.Errorf("chain status %+v, want orders/totals restoring with no offsets", c)
	}
	if e.Ready() {
		t.Error("Ready with a task not restored")
	}
}
