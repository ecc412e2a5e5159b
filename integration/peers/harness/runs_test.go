package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		s := spreadOf(tc.in)
		if s.med != tc.med || s.lo != tc.lo || s.hi != tc.hi || s.n != len(tc.in) {
			t.Errorf("spreadOf(%v) = %+v, want med %v range %v–%v", tc.in, s, tc.med, tc.lo, tc.hi)
		}
	}
	if s := spreadOf(nil); s.n != 0 || s.format(2) != "-" || s.formatRange(2) != "-" {
		t.Errorf("spreadOf(nil) = %+v", s)
	}
}

func TestAggregateRuns(t *testing.T) {
	run := func(round int, sec, cpu float64, status string) *result {
		return &result{name: "kstreams", records: 1000, seconds: sec, cpu: cpu, status: status, round: round, peakKiB: int64(round) << 10}
	}
	// A single run is reported as it is.
	one := run(1, 2, 1, "ok")
	if got := aggregate([]*result{one}); got != one {
		t.Fatalf("aggregate of one run = %+v, want the run", got)
	}
	// Three runs: median 4 s (range 2–10), rate median 250/s, peak the largest.
	agg := aggregate([]*result{run(1, 10, 5, "ok"), run(2, 2, 1, "ok"), run(3, 4, 3, "ok")})
	f := agg.figures()
	if !agg.ok() || agg.seconds != 4 || agg.cpu != 3 || agg.peakKiB != 3<<10 || f.agreed != 3 {
		t.Fatalf("aggregate = %+v, figures %+v", agg, f)
	}
	if f.seconds.lo != 2 || f.seconds.hi != 10 || f.rate.med != 250 || f.rate.lo != 100 || f.rate.hi != 500 {
		t.Fatalf("figures = %+v", f)
	}
	if got := agg.summary(); !strings.Contains(got, "3 of 3 runs ok; median 4.00s (2.00–10.00)") {
		t.Fatalf("summary = %q", got)
	}
	// A run that disagrees makes the contender disagree, naming the run; the figures are over
	// the runs that were timed.
	agg = aggregate([]*result{run(1, 3, 1, "ok"), run(2, 0, 0, "DISAGREES"), run(3, 5, 1, "ok")})
	f = agg.figures()
	if agg.ok() || agg.status != "DISAGREES" || agg.statusCell() != "DISAGREES (run 2 of 3)" || f.agreed != 2 || f.seconds.n != 2 || f.seconds.med != 4 {
		t.Fatalf("aggregate with a disagreeing run = %+v (%q), figures %+v", agg, agg.statusCell(), f)
	}
	_, rows := catchUpRows([]*result{agg}, true)
	if got := rows[0]; got[2] != "2/3" || got[3] != "4.00" || got[4] != "3.00–5.00" || got[len(got)-1] != "DISAGREES (run 2 of 3)" || got[len(got)-2] != "-" {
		t.Fatalf("row = %q", got)
	}
}

func TestCatchUpRowsSingleRunAndNetJob(t *testing.T) {
	ks := &result{name: "kstreams", records: 1000, seconds: 4, cpu: 2, status: "ok", peakKiB: 1 << 20}
	fl := &result{name: "flink-batch", records: 1000, seconds: 2, cpu: 3, netJob: 1.25, status: "ok", peakKiB: 1 << 20}
	header, rows := catchUpRows([]*result{ks}, false)
	want := []string{"contender", "records", "seconds", "records/s", "CPU s", "peak RSS", "vs ceiling", "sluice(auto)/peer", "status"}
	if strings.Join(header, ",") != strings.Join(want, ",") {
		t.Fatalf("single-run header without Flink = %q", header)
	}
	if got := strings.Join(rows[0], ","); got != "kstreams,1000,4.00,250,2.0,1024 MiB,-,-,ok" {
		t.Fatalf("row = %q", got)
	}
	header, rows = catchUpRows([]*result{ks, fl}, false)
	if header[5] != "net job s" || rows[1][5] != "1.25" || rows[0][5] != "-" {
		t.Fatalf("net job column: %q %q", header, rows)
	}
}

func TestNetJobSeconds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "output.log")
	if err := os.WriteFile(p, []byte("flink: mode=BATCH\nflink: job finished in 12345 ms (net runtime)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := netJobSeconds(p); got != 12.345 {
		t.Fatalf("netJobSeconds = %v, want 12.345", got)
	}
	if got := netJobSeconds(filepath.Join(t.TempDir(), "none")); got != 0 {
		t.Fatalf("netJobSeconds of no log = %v", got)
	}
}

func TestJavaBytesAndTuning(t *testing.T) {
	for in, want := range map[string]int64{"4g": 4 << 30, "512m": 512 << 20, "1024k": 1 << 20, "1048576": 1 << 20} {
		if got, err := javaBytes(in); err != nil || got != want {
			t.Errorf("javaBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1g", "4x"} {
		if _, err := javaBytes(in); err == nil {
			t.Errorf("javaBytes(%q): no error", in)
		}
	}
	c, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-keys", "5000000"})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{cfg: c}
	// 5M keys × 200 bytes = 1e9 bytes, within half the 4g tuned heap.
	if tu := h.tuning(); tu.ksCacheBytes != 1_000_000_000 || tu.ksCommitMS >= tu.ksTxnTimeoutMS || tu.flinkManagedBytes != 1<<30 {
		t.Fatalf("tuning = %+v", tu)
	}
	c.keys = 1000
	if tu := h.tuning(); tu.ksCacheBytes != 512<<20 {
		t.Fatalf("small key space: cache %d, want 512 MiB", tu.ksCacheBytes)
	}
	c.keys, c.javaHeapTuned = 5_000_000, "1g"
	if tu := h.tuning(); tu.ksCacheBytes != 512<<20 {
		t.Fatalf("1g heap: cache %d, want half the heap", tu.ksCacheBytes)
	}
	if _, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-runs", "0"}); err == nil {
		t.Fatal("-runs 0: no error")
	}
	if _, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-java-heap-tuned", "lots"}); err == nil {
		t.Fatal("-java-heap-tuned lots: no error")
	}
}
