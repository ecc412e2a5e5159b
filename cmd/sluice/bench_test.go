package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
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
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv(benchBinaryEnv, bin)
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
}

func TestChildEnvDropsSluiceConfig(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "SLUICE_HTTP__LISTEN=off", "SLUICE_TEST_KAFKA=x", benchBinaryEnv + "=/b"}, "SLUICE_KAFKA__BROKERS=a:1")
	want := []string{"PATH=/bin", "SLUICE_TEST_KAFKA=x", "SLUICE_KAFKA__BROKERS=a:1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("childEnv = %v, want %v", got, want)
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{{"bench", "--records", "0"}, {"bench", "--keys", "-1"}, {"bench", "extra"}, {"bench", "--sort-memory", "lots"}} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
