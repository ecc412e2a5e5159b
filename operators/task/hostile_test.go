package task

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// sumMetric returns the sum of the samples of the counter name in reg.
func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestHostileInputTask: each class of hostile input, between two good records, in real-time
// and in backlog mode: it goes to the dead-letter topic with its reason (or is processed, as
// the README documents), counts in sluice_dead_letters_total, and the task goes on: the good
// records' totals are exact and the committed offset is past all three.
func TestHostileInputTask(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	for _, tc := range []struct {
		name   string
		key    []byte
		value  []byte
		reason string // "" = processed: it counts in the totals of its key
	}{
		{"malformed JSON", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1,`), "invalid JSON"},
		{"wrong type", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":"1","ts":5}`), `field "amount" is a string, want a number`},
		{"missing key field", []byte("c-9"), []byte(`{"amount":1,"ts":5}`), `key field "customer_id" missing`},
		{"missing timestamp", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1}`), `timestamp field "ts" missing`},
		{"null key", nil, []byte(`{"customer_id":"c-9","amount":1,"ts":5}`), "the record has no key"},
		{"tombstone", []byte("c-9"), nil, "empty value"},
		{"5 MiB value", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1,"ts":5,"pad":"` + strings.Repeat("x", 5<<20) + `"}`), ""},
		{"5 MiB malformed value", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1,"ts":5,"pad":"` + strings.Repeat("x", 5<<20)), "unterminated string"},
		{"10k nesting", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1,"ts":5,"x":` + deep + `}`), "nesting too deep"},
		{"non-UTF-8 key", []byte("c-\xff"), []byte("{\"customer_id\":\"c-\xff\",\"amount\":1,\"ts\":5}"), ""},
		{"non-UTF-8 outside strings", []byte("c-9"), []byte("{\"customer_id\":\"c-9\",\"amount\":1\xff}"), "invalid JSON"},
		{"beyond 128 bits", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1e30,"ts":5}`), "number out of range"},
		{"NaN", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":NaN,"ts":5}`), "invalid JSON"},
		{"Infinity", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":-Infinity,"ts":5}`), "invalid JSON"},
		{"far future", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1,"ts":1767225600000000000}`), "out of range (years 0000 to 9999)"},
		{"far past", []byte("c-9"), []byte(`{"customer_id":"c-9","amount":1,"ts":-9223372036854775808}`), "out of range (years 0000 to 9999)"},
	} {
		for _, mode := range []string{"never", "always"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				recs := []*kgo.Record{
					order(0, "c-1", "1.5"),
					{Topic: testTopic, Offset: 1, Key: tc.key, Value: tc.value, Timestamp: time.UnixMilli(5)},
					order(2, "c-2", "2.25"),
				}
				reg := prometheus.NewRegistry()
				plan := mustPlan(t, testConfig(mode, 50, 10, 100))
				tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
				tk.d.Metrics = NewMetrics(reg)
				d := &driver{t: t, rng: rand.New(rand.NewPCG(1, 2)), task: tk, prod: newFakeProducer(), input: recs, maxBatch: 2, pCkpt: 0.5,
					lag: func(d *driver, end int) int64 {
						if mode == "always" {
							return 1 << 40
						}
						return int64(len(d.input) - end)
					}}
				d.run()
				if d.offset != 3 {
					t.Errorf("committed offset %d, want 3", d.offset)
				}
				last := d.prod.lastByKey(testSink)
				for key, want := range map[string]string{"c-1": `"n":1,"total":1.5`, "c-2": `"n":1,"total":2.25`} {
					if !strings.Contains(last[key], want) {
						t.Errorf("output of %s = %s, want it to contain %s", key, last[key], want)
					}
				}
				dead := d.prod.committed(testGroup + "-dlq")
				n := sumMetric(t, reg, "sluice_dead_letters_total")
				if tc.reason == "" {
					if len(dead) != 0 || n != 0 {
						t.Fatalf("%d dead letters (counted %v), want the record processed", len(dead), n)
					}
					if !strings.Contains(last[string(tc.key)], `"n":1`) {
						t.Errorf("output of %q = %s, want the record counted", tc.key, last[string(tc.key)])
					}
					return
				}
				if len(dead) != 1 || n != 1 {
					t.Fatalf("%d dead letters (counted %v), want 1", len(dead), n)
				}
				if reason, _ := header(dead[0], codec.HeaderError); !strings.Contains(reason, tc.reason) {
					t.Errorf("reason %.300q, want it to contain %q", reason, tc.reason)
				}
			})
		}
	}
}

// TestFarFutureWatermark documents what a far-future event time does to a windowed aggregate:
// the watermark is the largest event time seen, so the record moves it to its own time. Every
// window before it closes (emit: final writes its result at the next checkpoint), and every later
// record of an ordinary time is late: a dead letter with sluice.error=late, counted in
// sluice_late_records_total and sluice_dead_letters_total. The same in both modes. (Event times
// beyond the year 9999 are dead letters of their own: TestHostileInputTask.)
func TestFarFutureWatermark(t *testing.T) {
	const t0 = int64(1_767_225_600_000) // 2026-01-01
	const future = int64(253_402_300_799_999)
	w := windowSpec{size: 60_000, advance: 60_000, final: true}
	rec := func(off int64, key string, ts int64) *kgo.Record {
		return &kgo.Record{Topic: testTopic, Offset: off, Key: []byte(key), Timestamp: time.UnixMilli(5),
			Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":1,"ts":%d}`, key, ts)}
	}
	for _, mode := range []string{"never", "always"} {
		t.Run(mode, func(t *testing.T) {
			recs := []*kgo.Record{rec(0, "c-1", t0), rec(1, "c-2", t0+1000), rec(2, "c-3", future), rec(3, "c-1", t0+2000), rec(4, "c-4", t0+120_000)}
			plan := mustPlan(t, w.config(mode, 50, 10, 100, "0s"))
			tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
			reg := prometheus.NewRegistry()
			tk.d.Metrics = NewMetrics(reg)
			d := &driver{t: t, rng: rand.New(rand.NewPCG(3, 4)), task: tk, prod: newFakeProducer(), input: recs, maxBatch: 2, pCkpt: 0.5,
				lag: func(d *driver, end int) int64 {
					if mode == "always" {
						return 1 << 40
					}
					return int64(len(d.input) - end)
				}}
			d.run()
			if d.offset != 5 {
				t.Errorf("committed offset %d, want 5", d.offset)
			}
			var finals []string
			for _, o := range d.prod.committed(testSink) {
				var v struct {
					Key   string `json:"key"`
					Start int64  `json:"window_start"`
					N     int64  `json:"n"`
				}
				if err := json.Unmarshal(o.Value, &v); err != nil {
					t.Fatal(err)
				}
				finals = append(finals, fmt.Sprintf("%s@%d:%d", v.Key, v.Start, v.N))
			}
			if want := fmt.Sprintf("[c-1@%d:1 c-2@%d:1]", t0, t0); fmt.Sprint(finals) != want {
				t.Errorf("finals %v, want %s (the windows the far-future record closed; its own stays open)", finals, want)
			}
			var late []string
			for _, dl := range d.prod.committed(testGroup + "-dlq") {
				reason, _ := header(dl, codec.HeaderError)
				off, _ := header(dl, codec.HeaderSourceOffset)
				late = append(late, off+":"+reason)
			}
			if fmt.Sprint(late) != "[3:late 4:late]" {
				t.Errorf("dead letters %v, want the records after the far-future one, late: [3:late 4:late]", late)
			}
			if n := sumMetric(t, reg, "sluice_late_records_total"); n != 2 {
				t.Errorf("sluice_late_records_total = %v, want 2", n)
			}
			if n := sumMetric(t, reg, "sluice_dead_letters_total"); n != 2 {
				t.Errorf("sluice_dead_letters_total = %v, want 2", n)
			}
		})
	}
}

// TestWindowedExtremeTimestamps pins a hang: a windowed aggregate assigned a record with an
// event time near int64's limits (ts 9223372036854775807) to its windows in a loop whose window
// start overflowed, and never returned: one record stopped its partition. Event times outside
// the years 0000 to 9999 are now dead letters, for tumbling, hopping and session windows, in
// both modes, and the records after them are aggregated.
func TestWindowedExtremeTimestamps(t *testing.T) {
	const t0 = int64(1_767_225_600_000)
	configs := map[string]func(mode string, enter, exit int64, cacheKeys int, every string) string{
		"tumbling": windowSpec{size: 60_000, advance: 60_000, final: true}.config,
		"hopping":  windowSpec{size: 60_000, advance: 20_000, grace: 1000}.config,
		"session":  sessionSpec{gap: 30_000, grace: 1000}.config,
	}
	for name, cfg := range configs {
		for _, mode := range []string{"never", "always"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				var recs []*kgo.Record
				for i, ts := range []string{"9223372036854775807", "-9223372036854775808", "9.3e18", "253402300800000", strconv.FormatInt(t0, 10)} {
					recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte("c"), Timestamp: time.UnixMilli(5),
						Value: fmt.Appendf(nil, `{"customer_id":"c","amount":1,"ts":%s}`, ts)})
				}
				plan := mustPlan(t, cfg(mode, 50, 10, 100, "0s"))
				tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
				d := &driver{t: t, rng: rand.New(rand.NewPCG(5, 6)), task: tk, prod: newFakeProducer(), input: recs, maxBatch: 2, pCkpt: 0.5,
					lag: func(d *driver, end int) int64 {
						if mode == "always" {
							return 1 << 40
						}
						return int64(len(d.input) - end)
					}}
				d.run()
				d.end() // close every window: the good record's result goes out
				dead := d.prod.committed(testGroup + "-dlq")
				if len(dead) != 4 {
					t.Fatalf("%d dead letters, want the 4 out-of-range records", len(dead))
				}
				for _, dl := range dead {
					if reason, _ := header(dl, codec.HeaderError); !strings.Contains(reason, "out of range (years 0000 to 9999)") {
						t.Errorf("reason %q", reason)
					}
				}
				outs := d.prod.committed(testSink)
				if len(outs) == 0 || !strings.Contains(string(outs[len(outs)-1].Value), `"n":1`) {
					t.Errorf("outputs %d, want the good record's window", len(outs))
				}
			})
		}
	}
}
