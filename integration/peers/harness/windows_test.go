package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

func testWindowed() windowed {
	return windowed{
		spec: workload.Spec{Records: 5000, Keys: 50, Partitions: 4, Seed: 7},
		span: 2 * time.Hour,
		size: time.Hour,
	}
}

// TestWindowedRecords checks the generated records: the orders workload's keys and amounts,
// event time never decreasing within a partition, and one closing record per partition at the
// end of the last window, after the backlog.
func TestWindowedRecords(t *testing.T) {
	w := testWindowed()
	start := workload.DefaultStartTS
	if got, want := w.closeTS(), start+2*3600_000; got != want {
		t.Fatalf("closeTS = %d, want %d", got, want)
	}
	last := make([]int64, w.spec.Partitions)
	closed := make([]bool, w.spec.Partitions)
	perKey := map[string]workload.Total{}
	var n int64
	var p fastjson.Parser
	err := w.each(func(key, value []byte, ts, cents int64, closing bool) error {
		part := workload.Partition(key, w.spec.Partitions)
		v, err := p.ParseBytes(value)
		if err != nil {
			return fmt.Errorf("%s: %w", value, err)
		}
		if got := v.GetInt64("ts"); got != ts {
			return fmt.Errorf("%s: ts %d, want %d", value, got, ts)
		}
		if got := string(v.GetStringBytes("customer_id")); got != string(key) {
			return fmt.Errorf("%s: customer_id %s, want the key %s", value, got, key)
		}
		if ts < last[part] {
			return fmt.Errorf("partition %d: ts %d after %d", part, ts, last[part])
		}
		last[part] = ts
		if closing {
			if closed[part] || ts != w.closeTS() {
				return fmt.Errorf("closing record %s of partition %d (closed before: %v)", value, part, closed[part])
			}
			closed[part] = true
			return nil
		}
		if closed[part] {
			return fmt.Errorf("order %s after the closing record of partition %d", value, part)
		}
		if ts < start || ts >= w.closeTS() {
			return fmt.Errorf("order %s: ts outside [%d, %d)", value, start, w.closeTS())
		}
		tot := perKey[string(key)]
		tot.SumCents += cents
		tot.Count++
		perKey[string(key)] = tot
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for part, c := range closed {
		if !c {
			t.Errorf("partition %d has no closing record", part)
		}
	}
	if n != w.spec.Records {
		t.Errorf("%d orders, want %d", n, w.spec.Records)
	}
	if d := workload.Diff(w.spec.Expected(), perKey, 5); len(d) > 0 {
		t.Errorf("orders differ from the orders workload's: %v", d)
	}

	want, err := w.expected()
	if err != nil {
		t.Fatal(err)
	}
	var sum workload.Total
	starts := map[int64]bool{}
	for k, tot := range want {
		sum.SumCents += tot.SumCents
		sum.Count += tot.Count
		starts[k.start] = true
	}
	var all workload.Total
	for _, tot := range perKey {
		all.SumCents += tot.SumCents
		all.Count += tot.Count
	}
	if sum != all {
		t.Errorf("finals add up to %s, orders to %s", sum, all)
	}
	if len(starts) != 2 || !starts[start] || !starts[start+3600_000] {
		t.Errorf("window starts %v, want the two hours from %d", starts, start)
	}
}

func TestWindowedTSIsExactAndSpread(t *testing.T) {
	w := windowed{spec: workload.Spec{Records: 10_000_000, Keys: 1, Partitions: 1}, span: 2 * time.Hour, size: time.Hour}
	start := workload.DefaultStartTS
	for _, c := range []struct{ i, want int64 }{{0, start}, {5_000_000, start + 3600_000}, {9_999_999, start + 7199_999}} {
		if got := w.ts(c.i); got != c.want {
			t.Errorf("ts(%d) = %d, want %d", c.i, got, c.want)
		}
	}
	if got := w.windowStart(start + 3600_000 - 1); got != start {
		t.Errorf("windowStart = %d, want %d", got, start)
	}
}

// TestFinalsCheck feeds outputs to the finals check: the right finals pass; a missing one is
// "only missing" (a later read may bring it); duplicates, wrong values, wrong windows and
// unknown keys are disagreements; the closing records' own windows are ignored.
func TestFinalsCheck(t *testing.T) {
	w := testWindowed()
	want, err := w.expected()
	if err != nil {
		t.Fatal(err)
	}
	size := w.size.Milliseconds()
	render := func(k window, tot workload.Total) string {
		amount := fmt.Sprintf("%d.%02d", tot.SumCents/100, tot.SumCents%100)
		amount = strings.TrimSuffix(strings.TrimRight(amount, "0"), ".") // sluice drops trailing zeros
		return fmt.Sprintf(`{"key":%q,"window_start":%d,"window_end":%d,"amount":%s,"orders":%d}`,
			w.spec.Key(k.cust), k.start, k.start+size, amount, tot.Count)
	}
	var keys []window
	for k := range want {
		keys = append(keys, k)
	}
	closing := fmt.Sprintf(`{"key":%q,"window_start":%d,"window_end":%d,"amount":0.01,"orders":1}`,
		w.closingKeys()[0], w.closeTS(), w.closeTS()+size)
	check := func(extra []string, skip int) ([]string, bool) {
		f := newFinals(w, want)
		var p fastjson.Parser
		for i, k := range keys {
			if i != skip {
				f.add(&p, []byte(render(k, want[k])), 0, int64(i))
			}
		}
		for _, v := range extra {
			f.add(&p, []byte(v), 1, 0)
		}
		return f.diff(8)
	}
	if d, _ := check([]string{closing}, -1); len(d) > 0 {
		t.Fatalf("right finals: %v", d)
	}
	if d, only := check(nil, 3); len(d) == 0 || !only {
		t.Errorf("one missing: diff %v, onlyMissing %v; want a difference, only missing", d, only)
	}
	k := keys[0]
	wrong := want[k]
	wrong.Count++
	other := window{cust: w.spec.Keys + 1, start: k.start}
	for name, extra := range map[string]string{
		"duplicate":         render(k, want[k]),
		"duplicate, other":  render(k, wrong),
		"unknown key":       render(other, want[k]),
		"not a final":       `{"key":"c-0000001","amount":1}`,
		"not a window":      fmt.Sprintf(`{"key":%q,"window_start":%d,"window_end":%d,"amount":1,"orders":1}`, w.spec.Key(k.cust), k.start+1, k.start+1+size),
		"inexact amount":    fmt.Sprintf(`{"key":%q,"window_start":%d,"window_end":%d,"amount":0.001,"orders":1}`, w.spec.Key(k.cust), k.start, k.start+size),
		"closing, too late": fmt.Sprintf(`{"key":%q,"window_start":%d,"window_end":%d,"amount":1,"orders":1}`, w.closingKeys()[0], w.closeTS()+size, w.closeTS()+2*size),
	} {
		if d, only := check([]string{extra}, -1); len(d) == 0 || only {
			t.Errorf("%s: diff %v, onlyMissing %v; want a disagreement", name, d, only)
		}
	}
	// A wrong value in place of the right one.
	f := newFinals(w, want)
	var p fastjson.Parser
	for i, kk := range keys {
		tot := want[kk]
		if i == 0 {
			tot = wrong
		}
		f.add(&p, []byte(render(kk, tot)), 0, int64(i))
	}
	if d, only := f.diff(8); len(d) < 2 || only || !strings.Contains(d[1], "got") {
		t.Errorf("wrong value: diff %v, onlyMissing %v", d, only)
	}
}

func TestParseFlagsWindows(t *testing.T) {
	c, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-smoke", "-workload", "windows"})
	if err != nil {
		t.Fatal(err)
	}
	if c.latency || c.windowSpan != 2*time.Hour || c.windowSize != time.Hour || c.records != 20_000 {
		t.Fatalf("windows defaults: %+v", c)
	}
	for _, args := range [][]string{
		{"-brokers", "127.0.0.1:19092", "-workload", "joins"},
		{"-brokers", "127.0.0.1:19092", "-workload", "windows", "-latency=true"},
		{"-brokers", "127.0.0.1:19092", "-workload", "windows", "-window-size", "0s"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

func TestSluiceConfigWindows(t *testing.T) {
	c := &config{brokers: "127.0.0.1:1", sortMemory: "256MiB", workload: "windows", windowSize: time.Hour}
	y := sluiceConfig(c, launch{in: "orders", out: "g-out", group: "g"}, "never", "/tmp/s", 9464)
	for _, want := range []string{
		"timestamp: ts, watermark: {max_delay: 0s}}", "window: {tumbling: 1h, grace: 0s}", "emit: final",
		"windows_out: {topic: g-out, format: json}", "mode: never}",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("config lacks %q:\n%s", want, y)
		}
	}
	for d, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "90m", 1500 * time.Millisecond: "1500ms", 30 * time.Second: "30s"} {
		if got := yamlDuration(d); got != want {
			t.Errorf("yamlDuration(%s) = %s, want %s", d, got, want)
		}
	}
}
