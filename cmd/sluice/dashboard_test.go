package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/sluice-dev/sluice/consumer"
)

const dashboardFile = "../../deploy/grafana/sluice.json"

// exportedMetrics returns the metric families sluice serves on /metrics, by name, with their
// label names: the registry of `sluice run` (newRegistry) with the engine's metrics registered on
// it by consumer.New, as in runPipeline. Vectors without children are not gathered, so the
// names and labels come from every registered collector's descriptors; the types (for the
// _bucket, _sum and _count series of histograms and summaries) from a gather.
func exportedMetrics(t *testing.T) map[string]exported {
	t.Helper()
	rec := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	registerRuntime(rec) // what newRegistry registers
	if _, err := consumer.New(consumer.Options{Registry: rec}); err != nil {
		t.Fatal(err)
	}
	out := map[string]exported{}
	descRE := regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)
	for _, c := range rec.collectors {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read descriptor %s (has client_golang changed Desc.String?)", d)
			}
			var labels []string
			if m[2] != "" {
				for _, l := range strings.Split(m[2], ",") {
					labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
				}
			}
			out[m[1]] = exported{labels: labels}
		}
	}
	families, err := rec.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		e := out[f.GetName()]
		e.typ = f.GetType()
		out[f.GetName()] = e
	}
	return out
}

type exported struct {
	typ    dto.MetricType // known when gathered (metrics without labels, and vectors with children)
	labels []string
}

// recordingRegisterer is a registry that remembers what is registered on it.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// seriesNames returns the series names a family exposes, for matching a PromQL selector.
func seriesNames(name string, e exported) []string {
	switch e.typ {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		return []string{name + "_bucket", name + "_sum", name + "_count"}
	case dto.MetricType_SUMMARY:
		return []string{name, name + "_sum", name + "_count"}
	}
	return []string{name}
}

// grafanaVar matches Grafana's variables: $name, ${name}, ${name:format}, [[name]].
var grafanaVar = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[a-z]+)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)\]\]`)

// promQL substitutes Grafana's variables in a panel's query so that it parses: the built-in
// intervals become a duration, the dashboard's own variables a plain label value.
func promQL(q string) string {
	return grafanaVar.ReplaceAllStringFunc(q, func(v string) string {
		if strings.Contains(v, "__") {
			return "5m" // $__rate_interval, $__interval, $__range
		}
		return "x"
	})
}

// dashboardQueries returns every PromQL query of the dashboard JSON: each "expr" (panel
// targets, annotations) and the selector inside each template variable's label_values(...).
func dashboardQueries(t *testing.T, v any, where string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		if title, ok := x["title"].(string); ok {
			where += fmt.Sprintf("(%q)", title)
		}
		for k, sub := range x {
			w := where + "." + k
			switch {
			case k == "expr":
				s, ok := sub.(string)
				if !ok || s == "" {
					t.Errorf("%s: empty expr", w)
				}
				out[w] = s
			case k == "query" && x["type"] == "query":
				q, _ := sub.(map[string]any)["query"].(string)
				m := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`).FindStringSubmatch(q)
				if m == nil {
					t.Errorf("%s: variable query %q is not label_values(selector, label)", w, q)
					continue
				}
				out[w] = m[1]
			default:
				dashboardQueries(t, sub, w, out)
			}
		}
	case []any:
		for i, sub := range x {
			dashboardQueries(t, sub, where+"["+strconv.Itoa(i)+"]", out)
		}
	}
}

// TestGrafanaDashboard parses deploy/grafana/sluice.json and every PromQL expression in it,
// and checks that every metric it names is one sluice exports, with the labels it uses.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	ids := map[float64]bool{}
	for i, raw := range dash["panels"].([]any) {
		panel := raw.(map[string]any)
		id, _ := panel["id"].(float64)
		if ids[id] || id == 0 {
			t.Errorf("panels[%d] %q: missing or duplicate id %v", i, panel["title"], panel["id"])
		}
		ids[id] = true
		if panel["type"] == "row" {
			continue
		}
		if ds, _ := panel["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
			t.Errorf("panels[%d] %q: datasource %v, want the dashboard's ${datasource} variable", i, panel["title"], panel["datasource"])
		}
		if targets, _ := panel["targets"].([]any); len(targets) == 0 {
			t.Errorf("panels[%d] %q: no queries", i, panel["title"])
		}
	}
	metrics := exportedMetrics(t)
	if _, ok := metrics["sluice_backlog"]; !ok || len(metrics) < 20 {
		t.Fatalf("the registry lists too little: %v", metrics)
	}
	series := map[string]string{} // series name -> family
	for name, e := range metrics {
		for _, s := range seriesNames(name, e) {
			series[s] = name
		}
	}

	queries := map[string]string{}
	dashboardQueries(t, dash, "dashboard", queries)
	if len(queries) < 20 {
		t.Fatalf("only %d queries found in %s", len(queries), dashboardFile)
	}
	used := map[string]bool{}
	for where, q := range queries {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(promQL(q))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, q, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			family, ok := series[vs.Name]
			if !ok {
				t.Errorf("%s: metric %q is not one sluice exports (query %q)", where, vs.Name, q)
				return nil
			}
			used[family] = true
			for _, m := range vs.LabelMatchers {
				switch m.Name {
				case "__name__", "job", "instance": // the name, and the labels Prometheus adds
				default:
					if !slices.Contains(metrics[family].labels, m.Name) {
						t.Errorf("%s: %s has no label %q (its labels: %v)", where, family, m.Name, metrics[family].labels)
					}
				}
			}
			return nil
		})
	}
	// What the dashboard is for: mode, lag, progress, rates, checkpoints, restore, sorter, bad input.
	for _, m := range []string{
		"sluice_backlog", "sluice_lag_records", "sluice_backlog_progress_ratio", "sluice_records_in_total",
		"sluice_records_out_total", "sluice_commit_duration_seconds", "sluice_restore_duration_seconds",
		"sluice_sorter_memory_bytes", "sluice_sorter_spilled_bytes", "sluice_dead_letters_total",
		"sluice_late_records_total", "sluice_backlog_switches_total",
	} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	for name := range metrics {
		if strings.HasPrefix(name, "sluice_") && !used[name] {
			t.Logf("not on the dashboard: %s", name)
		}
	}
}
