package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluice-dev/sluice/configs"
)

// planHeader is prepended to every pipeline of the plan tests.
const planHeader = `kafka: {brokers: [127.0.0.1:9092]}
group: shop
instance_id: pod-0
`

// TestPlan is a datadriven test of NewPlan and Plan.Describe (testdata/plan; rewrite the
// expected output with -rewrite). Commands:
//
//	plan      the input is a pipeline (sources, operators, sinks, optionally backlog); prints
//	          Plan.Describe and Plan.Topics, or the error of configs.Parse or NewPlan.
func TestPlan(t *testing.T) {
	datadriven.RunTest(t, "testdata/plan", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "plan":
			cfg, err := configs.Parse([]byte(planHeader+d.Input), nil)
			if err != nil {
				return "config error: " + err.Error() + "\n"
			}
			p, err := NewPlan(cfg)
			if err != nil {
				var ce *configs.Error
				if !errors.As(err, &ce) {
					return fmt.Sprintf("plan error (not a *configs.Error): %v\n", err)
				}
				return fmt.Sprintf("plan error: key=%s: %v\n", ce.Key, err)
			}
			var b strings.Builder
			p.Describe(&b)
			fmt.Fprintf(&b, "topics: %v\n", p.Topics())
			return b.String()
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}
