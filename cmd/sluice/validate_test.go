package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const explainYAML = `
kafka: {brokers: [127.0.0.1:9092]}
group: revenue
backlog: {exit_lag: 100}
sources:
  orders: {topic: orders, key: customer_id, timestamp: ts, watermark: {max_delay: 5s}}
operators:
  - name: per_minute
    aggregate:
      input: orders
      window: {tumbling: 1m, grace: 10s}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
sinks:
  out: {topic: totals}
`

func TestValidateExplain(t *testing.T) {
	f := filepath.Join(t.TempDir(), "explain.yaml")
	writeFile(t, f, explainYAML)
	t.Setenv("SLUICE_BACKLOG__ENTER_LAG", "1000")
	t.Setenv("SLUICE_INSTANCE_ID", "pod-7")
	var out, errb bytes.Buffer
	if code := realMain([]string{"validate", "--explain", "-c", f}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	s := out.String()
	for _, want := range []string{
		`kafka\.brokers +file +\['127\.0\.0\.1:9092'\]`,
		`kafka\.transaction_timeout +default +2m`,
		`instance_id +env SLUICE_INSTANCE_ID +pod-7`,
		`backlog\.enter_lag +env SLUICE_BACKLOG__ENTER_LAG +1000`,
		`backlog\.exit_lag +file +100`,
		`backlog\.sort_memory +default +256MiB`,
		`sources\.orders\.watermark\.max_delay +file +5s`,
		`sources\.orders\.watermark\.idle_after +default +0s`,
		`operators\[0\]\.aggregate\.window\.tumbling +file +1m`,
		`operators\[0\]\.aggregate\.window\.grace +file +10s`,
		`operators\[0\]\.aggregate\.emit +file +final`,
		`operators\[0\]\.aggregate\.fields +file +\{amount: \{sum: amount\}, orders: \{count: \{\}\}\}`,
		`sinks\.out\.format +default +json`,
	} {
		if !regexp.MustCompile(`(?m)^  ` + want + `$`).MatchString(s) {
			t.Errorf("no line matching %q in:\n%s", want, s)
		}
	}
	// The plan follows, as without --explain.
	if !strings.Contains(s, "internal topics:") || strings.Index(s, "internal topics:") < strings.Index(s, "effective config") {
		t.Errorf("no plan after the effective config:\n%s", s)
	}

	out.Reset()
	if code := realMain([]string{"validate", "-c", f}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	if strings.Contains(out.String(), "effective config") {
		t.Errorf("the effective config printed without --explain:\n%s", out.String())
	}
}

func TestValidateExplainBadConfigExitsTwo(t *testing.T) {
	f := filepath.Join(t.TempDir(), "explain.yaml")
	writeFile(t, f, explainYAML)
	for _, tc := range []struct {
		env, value, want string
	}{
		{"SLUICE_BACKLOG__ENTER_LAGG", "5", "SLUICE_BACKLOG__ENTER_LAGG"},
		{"SLUICE_BACKLOG__ENTER_LAG", "50", "backlog.exit_lag"},
		{"SLUICE_SOURCES__ORDERS__WATERMARK__MAX_DELAY", "5", "sources.orders.watermark.max_delay"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			var out, errb bytes.Buffer
			if code := realMain([]string{"validate", "--explain", "-c", f}, &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("error does not name %s: %s", tc.want, errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("printed a config for a bad one:\n%s", out.String())
			}
		})
	}
}
