package plan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestChainIDsUnique: the chains reading one topic have IDs of their own (a commit's metadata
// gives each its progress by ID), forks that share their stages and re-key for different
// operators included (Nexmark q15 and q16 re-key the same map three ways), in every shipped
// config.
func TestChainIDsUnique(t *testing.T) {
	files, err := filepath.Glob("../../configs/*/*.yaml")
	if err != nil || len(files) < 20 {
		t.Fatalf("configs: %v, %d files", err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configs.Parse(b, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		p, err := NewPlan(cfg)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		seen := map[string]string{}
		for _, c := range p.Chains {
			k := c.Source.Topic + " " + c.ID()
			if first, ok := seen[k]; ok {
				t.Errorf("%s: chains from %s and %s of topic %s share the ID %q", f, first, c.SourceName, c.Source.Topic, c.ID())
			}
			seen[k] = c.SourceName
		}
	}
}
