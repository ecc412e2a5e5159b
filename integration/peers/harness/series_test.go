package main

import (
	"bytes"
	"image/png"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBucketPerSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	obs := []observation{
		{at(-100), 400 * time.Millisecond}, // visible before the phase began: left out
		{at(100), 10 * time.Millisecond},
		{at(500), 30 * time.Millisecond},
		{at(999), 20 * time.Millisecond},
		// nothing in second 1
		{at(2000), 5 * time.Millisecond},
	}
	// Second 3: 200 records of 1..200 ms, visible in shuffled order. Sorted, p50 is the 101st
	// (index 100) and p99 the 199th (index 198).
	rng := rand.New(rand.NewPCG(1, 2))
	for _, i := range rng.Perm(200) {
		obs = append(obs, observation{at(3000 + i), time.Duration(i+1) * time.Millisecond})
	}
	want := []point{
		{second: 0, records: 3, p50: 20 * time.Millisecond, p99: 30 * time.Millisecond, max: 30 * time.Millisecond},
		{second: 1},
		{second: 2, records: 1, p50: 5 * time.Millisecond, p99: 5 * time.Millisecond, max: 5 * time.Millisecond},
		{second: 3, records: 200, p50: 101 * time.Millisecond, p99: 199 * time.Millisecond, max: 200 * time.Millisecond},
	}
	got := bucket(obs, t0)
	if len(got) != len(want) {
		t.Fatalf("got %d points, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("second %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := bucket(nil, t0); len(got) != 0 {
		t.Fatalf("no observations: got %+v", got)
	}
}

func TestTrackerObservations(t *testing.T) {
	tr := newTracker()
	t0 := time.Unix(1000, 0)
	tr.produced("a", 1, t0)
	tr.produced("a", 2, t0.Add(500*time.Millisecond))
	tr.visible("a", 2, t0.Add(1200*time.Millisecond)) // both: 1200 and 700 ms, in second 1
	pts := bucket(tr.observations(), t0)
	want := []point{{second: 0}, {second: 1, records: 2, p50: 1200 * time.Millisecond, p99: 1200 * time.Millisecond, max: 1200 * time.Millisecond}}
	if len(pts) != 2 || pts[0] != want[0] || pts[1] != want[1] {
		t.Fatalf("got %+v, want %+v", pts, want)
	}
}

func TestChartPNG(t *testing.T) {
	for _, logY := range []bool{true, false} {
		c := chart{
			title: "p99 per second", xLabel: "seconds into the phase", yLabel: "p99 (ms)", logY: logY,
			lines: []series{
				{label: "floor", x: []float64{0, 1, 2, 3}, y: []float64{0, 3, 2, 4}},
				{label: "sluice-auto", x: []float64{0, 1, 2, 3}, y: []float64{120, math.NaN(), 80, 2500}},
			},
		}
		img := c.draw(900, 500)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		dec, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("log %v: decoding: %v", logY, err)
		}
		if b := dec.Bounds(); b.Dx() != 900 || b.Dy() != 500 {
			t.Fatalf("log %v: size %v, want 900x500", logY, b)
		}
		// Both lines' colours are on the image (their lines and legend keys).
		for i := range c.lines {
			found := false
			for y := 0; y < 500 && !found; y++ {
				for x := 0; x < 900 && !found; x++ {
					r, g, b, _ := dec.At(x, y).RGBA()
					p := palette[i]
					found = r>>8 == uint32(p.R) && g>>8 == uint32(p.G) && b>>8 == uint32(p.B)
				}
			}
			if !found {
				t.Errorf("log %v: no pixel of line %d's colour", logY, i)
			}
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{{0.3, 0.5}, {1, 1}, {3, 5}, {7, 10}, {12, 20}, {450, 500}, {0, 1}} {
		if got := niceStep(c.raw); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceStep(%v) = %v, want %v", c.raw, got, c.want)
		}
	}
}

func TestParseVariants(t *testing.T) {
	got, err := parseVariants("10ms, 10ms+catchup,1s,never:50ms+catchup")
	if err != nil {
		t.Fatal(err)
	}
	want := []variant{{10 * time.Millisecond, false, false}, {10 * time.Millisecond, true, false}, {time.Second, false, false},
		{50 * time.Millisecond, true, true}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("variant %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := got[1].name(); n != "sluice-auto-10ms-catchup" {
		t.Errorf("name = %q", n)
	}
	if n, m := got[3].name(), got[3].mode(); n != "sluice-never-50ms-catchup" || m != "never" {
		t.Errorf("name, mode = %q, %q", n, m)
	}
	for _, bad := range []string{"", "10", "1500us", "0ms", "10ms,10ms", "10ms+fast", "auto:10ms"} {
		if _, err := parseVariants(bad); err == nil {
			t.Errorf("parseVariants(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseFlagsLatencySweep(t *testing.T) {
	c, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-latency-sweep", "20000, 50000", "-sluice-variants", "50ms+catchup",
		"-sluice-commit-interval", "10ms", "-latency-runs", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.sweepRates) != 2 || c.sweepRates[0] != 20000 || c.sweepRates[1] != 50000 || c.latRuns != 3 ||
		c.commitInterval != 10*time.Millisecond || len(c.variants) != 1 || !c.variants[0].catchUp || c.sweepLimit != time.Second {
		t.Fatalf("parsed %+v", c)
	}
	for _, args := range [][]string{
		{"-latency-sweep", "20000,x"}, {"-latency-sweep", "0"}, {"-latency-runs", "0"}, {"-sluice-commit-interval", "0s"},
		{"-latency-sweep", "20000", "-workload", "windows"},
	} {
		if _, err := parseFlags(append([]string{"-brokers", "127.0.0.1:19092"}, args...)); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

func TestSluiceConfigCommitSettings(t *testing.T) {
	c := &config{brokers: "127.0.0.1:1", sortMemory: "256MiB", commitInterval: 100 * time.Millisecond}
	y := sluiceConfig(c, launch{in: "orders", out: "g-out", group: "g"}, "auto", "/tmp/s", 9464)
	if !strings.Contains(y, "commit_interval: 100ms, commit_on_catch_up: false,") {
		t.Errorf("default commit settings missing:\n%s", y)
	}
	y = sluiceConfig(c, launch{in: "orders", out: "g-out", group: "g", commit: variant{50 * time.Millisecond, true, false}}, "auto", "/tmp/s", 9464)
	if !strings.Contains(y, "commit_interval: 50ms, commit_on_catch_up: true,") {
		t.Errorf("the variant's commit settings missing:\n%s", y)
	}
}

func TestSweepVerdicts(t *testing.T) {
	run := func(rate int, produced, seen int64, achieved float64, p99 time.Duration, err string) latencyRun {
		return latencyRun{name: "sluice-auto", rate: rate, round: 1, err: err,
			stats: &latencyStats{produced: produced, seen: seen, rate: achieved, p99: p99}}
	}
	runs := []latencyRun{
		{name: floorName, rate: 20000, stats: &latencyStats{p99: 3 * time.Millisecond}},
		run(20000, 400000, 400000, 19990, 150*time.Millisecond, ""),
		run(50000, 1000000, 1000000, 49900, 900*time.Millisecond, ""),
		run(80000, 1600000, 1600000, 70000, 300*time.Millisecond, ""),          // rate not reached
		run(100000, 2000000, 1999000, 99000, 2*time.Second, "1000 of 2000000"), // records lost, p99 over
	}
	limit := time.Second
	want := []string{"yes", "yes", "no: rate not reached (70000 rec/s)", "no: 1000 of 2000000; p99 2000 ms"}
	_, rows := sweepRows(runs, limit)
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d (the floor is a column, not a row)", len(rows), len(want))
	}
	for i, w := range want {
		if got := rows[i][len(rows[i])-1]; got != w {
			t.Errorf("row %d: sustained = %q, want %q", i, got, w)
		}
	}
	if rows[0][8] != "3 ms" || rows[1][8] != "-" {
		t.Errorf("floor p99 column: %q, %q", rows[0][8], rows[1][8])
	}
	best := highestSustained([]contender{{name: "sluice-auto"}}, runs, limit)
	if len(best) != 1 || !strings.Contains(best[0], "highest sustained rate 50000 rec/s") {
		t.Errorf("highestSustained = %q", best)
	}
}
