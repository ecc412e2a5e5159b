package task

import (
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/plan"
)

// TestMetricsDeclared: every labelled counter series a pipeline can move exists at 0 from the
// start (Metrics.Declare), so an alert on rate(sluice_dead_letters_total[5m]) or
// absent(...) works before the first dead letter.
// planHeader is prepended to the test's pipeline.
const planHeader = `kafka: {brokers: [127.0.0.1:9092]}
group: shop
instance_id: pod-0
`

func TestMetricsDeclared(t *testing.T) {
	cfg, err := configs.Parse([]byte(planHeader+`
sources:
  orders: {topic: orders, key: customer_id, timestamp: ts}
operators:
  - name: big
    filter: {input: orders, expr: "amount > 100"}
  - name: per_minute
    aggregate: {input: big, group_by: region, window: {tumbling: 1m}, emit: final, fields: {n: {count: {}}}}
    output: out
sinks:
  out: {topic: minutes}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Declare(p)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			if s.GetCounter().GetValue() != 0 {
				t.Errorf("%s%v = %v before any record, want 0", mf.GetName(), s.GetLabel(), s.GetCounter().GetValue())
			}
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "operator" {
					got[mf.GetName()] = append(got[mf.GetName()], lp.GetValue())
				}
			}
		}
	}
	for name, want := range map[string][]string{
		"sluice_dead_letters_total": {"big", "per_minute", "produce minutes", "produce shop-per_minute-repartition", "source orders", "source per_minute-repartition"},
		"sluice_late_records_total": {"per_minute"},
	} {
		sort.Strings(got[name])
		if !equalStrings(got[name], want) {
			t.Errorf("%s series: %q, want %q", name, got[name], want)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
