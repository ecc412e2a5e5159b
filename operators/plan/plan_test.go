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

// TestTimedCombiningNeedsItsBound: a re-keying writer combines records into partial windows or
// sessions only where the largest watermark it announced bounds its reader's: under
// exactly_once (whose commits carry what it announced to the next owner) and with a source that
// never announces idleness; otherwise it projects them. An aggregate without windows is
// combined under either guarantee.
func TestTimedCombiningNeedsItsBound(t *testing.T) {
	for _, tc := range []struct {
		name, guarantee, idle, window string
		combined                      bool
	}{
		{"sessions", "exactly_once", "0s", "window: {session: 10s}", true},
		{"tumbling", "exactly_once", "0s", "window: {tumbling: 10s}", true},
		{"sessions at least once", "at_least_once", "0s", "window: {session: 10s}", false},
		{"tumbling at least once", "at_least_once", "0s", "window: {tumbling: 10s}", false},
		{"sessions idle_after", "exactly_once", "5s", "window: {session: 10s}", false},
		{"tumbling idle_after", "exactly_once", "5s", "window: {tumbling: 10s}", false},
		{"no window at least once", "at_least_once", "5s", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := planHeader + fmt.Sprintf(`processing: {guarantee: %s}
sources:
  bids: {topic: bids, format: json, key: auction, timestamp: dateTime, watermark: {idle_after: %s}}
operators:
  - name: counts
    aggregate:
      input: bids
      group_by: bidder
      %s
      fields: {n: {count: {}}}
    output: out
sinks:
  out: {topic: out, format: json}
`, tc.guarantee, tc.idle, tc.window)
			cfg, err := configs.Parse([]byte(doc), nil)
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewPlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var w *ChainPlan
			for i := range p.Chains {
				if p.Chains[i].Rekey != "" {
					w = &p.Chains[i]
				}
			}
			if w == nil {
				t.Fatal("no re-keying chain")
			}
			if got := w.Combine != nil; got != tc.combined {
				t.Fatalf("combined %v, want %v (projected %v)", got, tc.combined, w.Project != nil)
			}
			if !tc.combined && w.Project == nil {
				t.Fatal("neither combined nor projected")
			}
		})
	}
}
