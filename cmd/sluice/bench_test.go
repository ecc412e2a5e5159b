package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBench runs a small bench end to end: an embedded broker, a prefilled backlog, the
// pipeline as a child `sluice run` in mode never and auto, and the exact verification of both.
// bench spawns its children from a binary; in a test os.Executable is the test binary, so the
// test builds sluice and points SLUICE_BENCH_BINARY at it.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds the sluice binary and runs two child processes")
	}
	buildBenchBinary(t)
	var out, errb bytes.Buffer
	code := realMain([]string{"bench", "--records", "20000", "--keys", "500", "--stall", "20s", "--pprof"}, &out, &errb)
	if code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, mode := range []string{"never", "auto"} {
		if !regexp.MustCompile(`bench: ` + mode + ` \(pid \d+\) serves http://127\.0\.0\.1:\d+/debug/pprof/\n`).MatchString(errb.String()) {
			t.Errorf("--pprof: stderr does not give %s's profile address:\n%s", mode, errb.String())
		}
	}
	for _, want := range []string{"mode=never records=20000 ", "mode=auto records=20000 ", "\nspeedup=", " equivalent=true ceiling_ratio="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkCeiling(t, out.String(), 20000, 20000)
	if strings.Contains(out.String(), "window") {
		t.Errorf("the orders workload mentions windows:\n%s", out.String())
	}
}

// TestBenchScaleOut runs the orders workload as two child processes per run in one group, with
// the results as the aggregate's changelog: both runs are equivalent to the produced totals,
// and each child wrote its own log. The children stop one after the other while the group may
// still be rebalancing: in about one run in five the second child's JoinGroup waited for the
// first (gone) member for the embedded broker's 5-minute rebalance timeout, and the child did not
// exit on SIGTERM (producer.Session.Close now bounds that wait).
func TestBenchScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds the sluice binary and runs four child processes")
	}
	buildBenchBinary(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errb bytes.Buffer
	code := realMain([]string{"bench", "--records", "20000", "--keys", "500", "--stall", "20s", "--instances", "2", "--changelog", "output", "--keep"}, &out, &errb)
	if code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{" instances=2 changelog=output\n", "mode=never records=20000 ", "mode=auto records=20000 ", " equivalent=true ceiling_ratio="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	logs, err := filepath.Glob(filepath.Join(tmp, "sluice-bench-*", "*-[01].log"))
	if err != nil || len(logs) != 4 {
		t.Errorf("child logs %v (%v), want never-0, never-1, auto-0, auto-1", logs, err)
	}
	for _, args := range [][]string{{"--instances", "0"}, {"--changelog", "both"}, {"--workload", "windows", "--changelog", "output"}} {
		errb.Reset()
		if code := realMain(append([]string{"bench"}, args...), &out, &errb); code != 2 {
			t.Errorf("bench %v: exit %d, want 2 (usage); stderr %s", args, code, errb.String())
		}
	}
}

// TestBenchWindows runs the windowed workloads small, 20k orders over 2k customers and two
// one-hour windows, with a cache of 50 keys per task (so auto sorts most windows and never
// evicts them), every window closed by the closers: the windows themselves, and 15-minute
// windows rolled up into the hours through the first stage's output topic. Both runs must
// write exactly one final per (customer, hour), equal to the generator's.
func TestBenchWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds the sluice binary and runs two child processes")
	}
	buildBenchBinary(t)
	for _, tc := range []struct {
		args   []string
		header string
	}{
		{[]string{"--workload", "windows"}, "workload=windows window=1h0m0s span=2h0m0s"},
		{[]string{"--workload", "rollup", "--window", "15m", "--rollup", "1h"}, "workload=rollup window=15m0s rollup=1h0m0s span=2h0m0s"},
	} {
		t.Run(tc.args[1], func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"bench", "--records", "20000", "--keys", "2000", "--cache", "50", "--stall", "20s"}, tc.args...)
			if code := realMain(args, &out, &errb); code != 0 {
				t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
			}
			// 20k orders over 2k customers and 2 hours: all 4000 (customer, hour) pairs but a few.
			windows := regexp.MustCompile(`mode=(never|auto) records=20000 .* windows=(\d+)\n`).FindAllStringSubmatch(out.String(), -1)
			if len(windows) != 2 || windows[0][2] != windows[1][2] {
				t.Fatalf("want a line with the same windows= per run:\n%s", out.String())
			}
			if n, _ := strconv.Atoi(windows[0][2]); n < 3900 || n > 4000 {
				t.Errorf("%d windows, want about 4000", n)
			}
			for _, want := range []string{tc.header, "\nspeedup=", " equivalent=true ceiling_ratio="} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			checkCeiling(t, out.String(), 20000, 20000+8) // and a closer per partition
		})
	}
}

// TestBenchJoin runs the join workload small: 20k orders, then a table of 500 customers
// produced after them; both runs must join every order exactly once with its customer's row.
func TestBenchJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds the sluice binary and runs two child processes")
	}
	buildBenchBinary(t)
	var out, errb bytes.Buffer
	code := realMain([]string{"bench", "--workload", "join", "--records", "20000", "--keys", "500", "--stall", "20s"}, &out, &errb)
	if code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"records=20000 keys=500 ", " workload=join table_rows=500\n",
		"mode=never records=20000 ", "mode=auto records=20000 ", " joined=20000\n", "\nspeedup=", " equivalent=true ceiling_ratio="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkCeiling(t, out.String(), 20000, 20000+500) // the orders and the table
	if n := strings.Count(out.String(), " joined=20000\n"); n != 2 {
		t.Errorf("%d runs joined every order, want 2:\n%s", n, out.String())
	}
}

// TestBenchCogroup runs the cogroup workload small: 20k orders and 20k refunds over 2k
// customers, a cache of 50 keys per task; both runs' balances must equal both specs' totals. A
// sluice without the cogroup operator must make bench fail before it produces anything, saying
// that the children's sluice refuses the pipeline and why.
func TestBenchCogroup(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds the sluice binary and runs two child processes")
	}
	buildBenchBinary(t)
	t.Setenv("TMPDIR", t.TempDir()) // a failed bench keeps its temp dir
	var out, errb bytes.Buffer
	code := realMain([]string{"bench", "--workload", "cogroup", "--records", "20000", "--keys", "2000", "--cache", "50", "--stall", "20s"}, &out, &errb)
	if code != 0 && strings.Contains(errb.String(), "refuses the pipeline of mode=never") {
		if !strings.Contains(errb.String(), "cogroup") || out.Len() != 0 {
			t.Fatalf("a refused pipeline: exit %d, stdout %q, stderr:\n%s", code, out.String(), errb.String())
		}
		t.Skipf("this sluice has no cogroup operator; bench says:\n%s", errb.String())
	}
	if code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	// 20k orders and 20k refunds over 2k customers: every customer has both, but a few.
	lines := regexp.MustCompile(`mode=(never|auto) records=40000 .* customers=(\d+)\n`).FindAllStringSubmatch(out.String(), -1)
	if len(lines) != 2 || lines[0][2] != lines[1][2] {
		t.Fatalf("want a line with the same customers= per run:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(lines[0][2]); n < 1990 || n > 2000 {
		t.Errorf("%d customers, want about 2000", n)
	}
	for _, want := range []string{" workload=cogroup refunds=20000\n", "\nspeedup=", " equivalent=true ceiling_ratio="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkCeiling(t, out.String(), 40000, 40000) // the orders and the refunds
}

// checkCeiling checks bench's ceiling line and ceiling_ratio in out: the ceiling read every
// record of the inputs (read, the records the test produced into every input topic) and rated
// the runs' records; the last line's ratio is positive and equals auto's rate over the
// ceiling's, recomputed here from the two lines (within their rounding).
func checkCeiling(t *testing.T, out string, records, read int) {
	t.Helper()
	c := regexp.MustCompile(`(?m)^ceiling records=(\d+) seconds=[0-9.]+ rate=(\d+)/s read=(\d+) bytes=(\d+) cpu=[0-9.]+s$`).FindStringSubmatch(out)
	auto := regexp.MustCompile(`(?m)^mode=auto records=\d+ seconds=[0-9.]+ rate=(\d+)/s `).FindStringSubmatch(out)
	last := regexp.MustCompile(`(?m)^speedup=[0-9.]+ equivalent=(?:true|false) ceiling_ratio=([0-9.]+)\n\z`).FindStringSubmatch(out)
	if c == nil || auto == nil || last == nil {
		t.Fatalf("want a ceiling line, a mode=auto line and a last line ending in ceiling_ratio=:\n%s", out)
	}
	if c[1] != strconv.Itoa(records) || c[3] != strconv.Itoa(read) {
		t.Errorf("ceiling records=%s read=%s, want %d and %d:\n%s", c[1], c[3], records, read, out)
	}
	if n, _ := strconv.Atoi(c[4]); n < 80*read { // a record is a key and a value of ~90 bytes
		t.Errorf("ceiling read %d bytes for %d records:\n%s", n, read, out)
	}
	ratio, _ := strconv.ParseFloat(last[1], 64)
	autoRate, _ := strconv.ParseFloat(auto[1], 64)
	ceilRate, _ := strconv.ParseFloat(c[2], 64)
	if want := autoRate / ceilRate; ratio <= 0 || math.Abs(ratio-want) > 0.006 {
		t.Errorf("ceiling_ratio=%s, want auto's rate over the ceiling's, %.4f, and > 0:\n%s", last[1], want, out)
	}
}

// TestLogErrors: a failed child's log is quoted by its error lines, else by its last lines.
func TestLogErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ log, want string }{
		{"", ""},
		{"time=1 level=INFO msg=a\ntime=2 level=ERROR msg=\"task failed\"\ntime=3 level=INFO msg=b\nsluice: run: task failed\n",
			":\n  time=2 level=ERROR msg=\"task failed\"\n  sluice: run: task failed"},
		{"a\nb\nc\nd\n", ":\n  b\n  c\n  d"},
	} {
		path := filepath.Join(dir, "log")
		if err := os.WriteFile(path, []byte(c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := logErrors(path); got != c.want {
			t.Errorf("logErrors(%q) = %q, want %q", c.log, got, c.want)
		}
	}
	if got := logErrors(filepath.Join(dir, "none")); got != "" {
		t.Errorf("logErrors of no file = %q", got)
	}
}

// buildBenchBinary builds sluice for bench to run as its children: in a test os.Executable is
// the test binary.
func buildBenchBinary(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv(benchBinaryEnv, bin)
}

func TestChildEnvDropsSluiceConfig(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "SLUICE_HTTP__LISTEN=off", "SLUICE_TEST_KAFKA=x", benchBinaryEnv + "=/b"}, "SLUICE_KAFKA__BROKERS=a:1")
	want := []string{"PATH=/bin", "SLUICE_TEST_KAFKA=x", "SLUICE_KAFKA__BROKERS=a:1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("childEnv = %v, want %v", got, want)
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{{"bench", "--records", "0"}, {"bench", "--keys", "-1"}, {"bench", "extra"}, {"bench", "--sort-memory", "lots"},
		{"bench", "--workload", "joins"}, {"bench", "--workload", "join", "--keys", "0"}, {"bench", "--workload", "cogroup", "--records", "0"}, {"bench", "--workload", "windows", "--window", "0s"}, {"bench", "--workload", "windows", "--span", "0s"},
		{"bench", "--workload", "rollup", "--window", "1h", "--rollup", "90m"}} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
