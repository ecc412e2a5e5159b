package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTrackerMatchesOutputsByCount(t *testing.T) {
	tr := newTracker()
	t0 := time.Unix(1000, 0)
	// Key a gets three live records (counts 11, 12, 13 after a backlog of 10), key b one.
	tr.produced("a", 11, t0)
	tr.produced("a", 12, t0.Add(10*time.Millisecond))
	tr.produced("b", 5, t0.Add(20*time.Millisecond))
	tr.produced("a", 13, t0.Add(30*time.Millisecond))
	if got := tr.outstanding(); got != 4 {
		t.Fatalf("outstanding = %d, want 4", got)
	}
	tr.visible("a", 10, t0.Add(40*time.Millisecond))  // an older output covers nothing new
	tr.visible("a", 12, t0.Add(100*time.Millisecond)) // covers counts 11 and 12
	tr.visible("c", 99, t0.Add(100*time.Millisecond)) // unknown key: ignored
	if got := tr.outstanding(); got != 2 {
		t.Fatalf("outstanding = %d, want 2", got)
	}
	tr.visible("a", 13, t0.Add(130*time.Millisecond))
	tr.visible("b", 5, t0.Add(220*time.Millisecond))
	if got := tr.outstanding(); got != 0 {
		t.Fatalf("outstanding = %d, want 0", got)
	}
	s := tr.stats()
	// Latencies: 100, 90, 100, 200 ms.
	if s.seen != 4 || s.p50 != 100*time.Millisecond || s.max != 200*time.Millisecond || s.p99 != 200*time.Millisecond {
		t.Fatalf("stats = %+v", s)
	}
}

func TestParseFlagsSmokeDefaults(t *testing.T) {
	c, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-smoke"})
	if err != nil {
		t.Fatal(err)
	}
	if c.records != 20_000 || c.keys != 1_000 || c.latDur != 5*time.Second || c.timeout != time.Minute ||
		c.enterLag != 1000 || c.exitLag != 100 || c.latBacklog != 20_000 || c.latWarmup != 2*time.Second || c.runs != 1 {
		t.Fatalf("smoke defaults: %+v", c)
	}
	c, err = parseFlags([]string{"-brokers", "127.0.0.1:19092", "-smoke", "-records", "5000"})
	if err != nil {
		t.Fatal(err)
	}
	if c.records != 5000 {
		t.Fatalf("-records with -smoke: got %d, want 5000", c.records)
	}
	for _, args := range [][]string{
		{},
		{"-brokers", "10.0.0.1:9092"},
		{"-brokers", "127.0.0.1:19092", "-records", "0"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

func TestSluiceConfigNamesTheRunsTopics(t *testing.T) {
	c := &config{brokers: "127.0.0.1:1,127.0.0.1:2", sortMemory: "256MiB"}
	y := sluiceConfig(c, launch{in: "orders", out: "g-out", group: "g", enterLag: 50000, exitLag: 500}, "auto", "/tmp/s", 9464)
	for _, want := range []string{
		"brokers: [127.0.0.1:1, 127.0.0.1:2]", "group: g\n", "state_dir: /tmp/s}",
		"enter_lag: 50000, exit_lag: 500, sort_memory: 256MiB", "mode: auto}", "listen: 127.0.0.1:9464",
		"{topic: orders, format: json, key: customer_id, timestamp: ts}", "totals_out: {topic: g-out, format: json}",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("config lacks %q:\n%s", want, y)
		}
	}
}

func TestTables(t *testing.T) {
	h := []string{"a", "bb"}
	rows := [][]string{{"xyz", "1|2"}}
	if got, want := plain(h, rows), "a    bb\nxyz  1|2\n"; got != want {
		t.Errorf("plain = %q, want %q", got, want)
	}
	if got, want := markdown(h, rows), "| a | bb |\n| --- | --- |\n| xyz | 1\\|2 |\n"; got != want {
		t.Errorf("markdown = %q, want %q", got, want)
	}
}

func TestStatCPU(t *testing.T) {
	for _, c := range []struct {
		stat string
		want float64
	}{
		{"1234 (java) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 30 0 123 456 789", 3.0},
		{"99 (a b) c)) R 1 2 3 4 5 6 7 8 9 10 1 2 3 4", 0.03},
		{"99 (short) R 1 2", 0},
		{"garbage", 0},
	} {
		if got := statCPU(c.stat); got != c.want {
			t.Errorf("statCPU(%q) = %v, want %v", c.stat, got, c.want)
		}
	}
}

func TestCPUSecondsOfAChild(t *testing.T) {
	p, err := startProc([]string{"sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 5"}, nil, t.TempDir(), filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for p.cpuSeconds() <= 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := p.cpuSeconds(); got <= 0 || got > 10 {
		t.Fatalf("cpuSeconds of a busy child = %v, want some", got)
	}
}
