package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateExamples(t *testing.T) {
	files, err := filepath.Glob("../../configs/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	nexmark, err := filepath.Glob("../../configs/nexmark/*.yaml")
	if err != nil || len(nexmark) == 0 {
		t.Fatalf("no Nexmark pipelines: %v", err)
	}
	files = append(files, nexmark...)
	for _, f := range files {
		var out, errb bytes.Buffer
		if code := realMain([]string{"validate", "-c", f}, &out, &errb); code != 0 {
			t.Errorf("validate %s: exit %d, stderr %s", f, code, errb.String())
		}
		if !strings.Contains(out.String(), "internal topics:") {
			t.Errorf("validate %s printed no plan:\n%s", f, out.String())
		}
	}
}

func TestValidateBadConfigExitsTwoNamingTheKey(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, f, `
kafka: {brokers: [127.0.0.1:9092]}
group: g
backlog: {enter_lagg: 5}
sources: {orders: {topic: orders}}
operators:
  - name: totals
    aggregate: {input: orders, fields: {n: {count: {}}}}
    output: out
sinks: {out: {topic: out}}
`)
	var out, errb bytes.Buffer
	if code := realMain([]string{"validate", "-c", f}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2; stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "backlog.enter_lagg") {
		t.Fatalf("error does not name the key: %s", errb.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"validate"}, {"run"}, {"run", "-c"}} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	var out, errb bytes.Buffer
	if code := realMain([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "sluice ") {
		t.Errorf("version: exit %d, out %q", code, out.String())
	}
}

// TestDemo runs the embedded demo briefly: a backlog large enough to put the tasks in backlog
// mode, the switch, live traffic, and the demo's own exact verification of every total.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	t.Setenv("SLUICE_HTTP__LISTEN", "off")
	t.Setenv("SLUICE_BACKLOG__ENTER_LAG", "2000")
	var out, errb bytes.Buffer
	code := realMain([]string{"demo", "--duration", "6s", "--records", "80000", "--keys", "2000", "--rate", "1000"}, &out, &errb)
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "verify: all 2000 customers' totals equal exactly") {
		t.Fatalf("demo did not verify:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), `msg="switch to real-time mode"`) {
		t.Errorf("no task switched from backlog to real-time:\n%s", errb.String())
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDemoAtLeastOnce runs the same pipeline with processing.guarantee=at_least_once (idempotent
// producer, offsets committed after the records are acknowledged): without failures the totals
// are exact too.
func TestDemoAtLeastOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	t.Setenv("SLUICE_HTTP__LISTEN", "off")
	t.Setenv("SLUICE_BACKLOG__ENTER_LAG", "2000")
	t.Setenv("SLUICE_PROCESSING__GUARANTEE", "at_least_once")
	var out, errb bytes.Buffer
	code := realMain([]string{"demo", "--duration", "5s", "--records", "60000", "--keys", "1500", "--rate", "1000"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "verify: all 1500 customers' totals equal exactly") {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "guarantee=at_least_once") {
		t.Errorf("the pipeline did not run at-least-once:\n%s", errb.String())
	}
}
