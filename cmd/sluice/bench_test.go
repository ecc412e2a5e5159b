package main

import (
	"bytes"
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
	code := realMain([]string{"bench", "--records", "20000", "--keys", "500", "--stall", "20s"}, &out, &errb)
	if code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"mode=never records=20000 ", "mode=auto records=20000 ", "equivalent=true"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "window") {
		t.Errorf("the orders workload mentions windows:\n%s", out.String())
	}
}

// TestBenchWindows runs the windowed workload small: 20k orders over 2k customers and two
// one-hour windows, a cache of 50 keys per task (so auto sorts most windows and never evicts
// them), every window closed by the closers; both runs must write exactly one final per
// (customer, window), equal to the generator's.
func TestBenchWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds the sluice binary and runs two child processes")
	}
	buildBenchBinary(t)
	var out, errb bytes.Buffer
	code := realMain([]string{"bench", "--workload", "windows", "--records", "20000", "--keys", "2000", "--cache", "50", "--stall", "20s"}, &out, &errb)
	if code != 0 {
		t.Fatalf("bench exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	// 20k orders over 2k customers and 2 windows: all 4000 (customer, window) pairs but a few.
	windows := regexp.MustCompile(`mode=(never|auto) records=20000 .* windows=(\d+)\n`).FindAllStringSubmatch(out.String(), -1)
	if len(windows) != 2 || windows[0][2] != windows[1][2] {
		t.Fatalf("want a line with the same windows= per run:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(windows[0][2]); n < 3900 || n > 4000 {
		t.Errorf("%d windows, want about 4000", n)
	}
	for _, want := range []string{"workload=windows window=1h0m0s span=2h0m0s", "\nspeedup=", " equivalent=true\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
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
		{"bench", "--workload", "joins"}, {"bench", "--workload", "windows", "--window", "0s"}, {"bench", "--workload", "windows", "--span", "0s"}} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
