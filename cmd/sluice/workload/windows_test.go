package workload

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestSpanTimes: with Span, event times start at StartTS, never decrease, stay below
// StartTS+Span and spread evenly; customers and amounts are those of the Spec without Span.
func TestSpanTimes(t *testing.T) {
	plain := Spec{Records: 10000, Keys: 300, Partitions: 8, Seed: 9}
	spanned := plain
	spanned.Span = 2 * time.Hour
	type rec struct{ key, amount string }
	var want []rec
	if err := plain.Each(func(key, value []byte, _ int64) error {
		want = append(want, rec{string(key), amountOf(t, value)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	i, last := 0, int64(-1)
	err := spanned.Each(func(key, value []byte, ts int64) error {
		var o struct{ TS int64 }
		if err := json.Unmarshal(value, &o); err != nil {
			return err
		}
		switch {
		case o.TS != ts:
			return fmt.Errorf("record %d: value ts %d, Each says %d", i, o.TS, ts)
		case ts < last:
			return fmt.Errorf("record %d: ts %d after %d", i, ts, last)
		case ts != DefaultStartTS+int64(i)*720: // 2h = 7.2M ms over 10k records
			return fmt.Errorf("record %d: ts %d, want %d", i, ts, DefaultStartTS+int64(i)*720)
		case string(key) != want[i].key || amountOf(t, value) != want[i].amount:
			return fmt.Errorf("record %d: %s %s, want the Spec without Span's %v", i, key, amountOf(t, value), want[i])
		}
		last = ts
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := spanned.MaxTS(), DefaultStartTS+9999*720; got != want {
		t.Fatalf("MaxTS = %d, want %d", got, want)
	}
	// Huge spans and counts do not overflow.
	if got := spread(1<<40-1, 1<<40, 1<<40); got != 1<<40-1 {
		t.Fatalf("spread = %d", got)
	}
	if err := (Spec{Records: 1, Keys: 1, Partitions: 1, Span: -time.Second}).Validate(); err == nil {
		t.Fatal("a negative Span is valid")
	}
}

func amountOf(t *testing.T, value []byte) string {
	var o struct{ Amount json.Number }
	if err := json.Unmarshal(value, &o); err != nil {
		t.Fatal(err)
	}
	return o.Amount.String()
}

func TestMaxTSWithJitter(t *testing.T) {
	s := Spec{Records: 5000, Keys: 10, Partitions: 2, Seed: 4}
	var want int64
	_ = s.Each(func(_, _ []byte, ts int64) error { want = max(want, ts); return nil })
	if got := s.MaxTS(); got != want {
		t.Fatalf("MaxTS = %d, want %d", got, want)
	}
	if got := (Spec{Keys: 1, Partitions: 1}).MaxTS(); got != DefaultStartTS {
		t.Fatalf("MaxTS of no orders = %d", got)
	}
}

// TestExpectedWindows recomputes the per-window totals from the generated JSON values, and
// checks that they add up to Expected's per-customer totals.
func TestExpectedWindows(t *testing.T) {
	s := Spec{Records: 30000, Keys: 500, Partitions: 8, Seed: 11, Span: 10 * time.Hour}
	want := make(map[string]Total)
	err := s.Each(func(key, value []byte, ts int64) error {
		cents, err := parseDecimal([]byte(amountOf(t, value)), 2)
		if err != nil {
			return err
		}
		start := ts - ts%(7*60_000)
		tot := want[fmt.Sprintf("%s@%d", key, start)]
		tot.SumCents += cents
		tot.Count++
		want[fmt.Sprintf("%s@%d", key, start)] = tot
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := s.ExpectedWindows(7 * time.Minute)
	if d := Diff(want, got, 5); len(d) > 0 {
		t.Fatalf("ExpectedWindows differs from the generated values:\n%s", strings.Join(d, "\n"))
	}
	perKey := make(map[string]Total)
	for wk, tot := range got {
		k := wk[:strings.IndexByte(wk, '@')]
		p := perKey[k]
		p.SumCents += tot.SumCents
		p.Count += tot.Count
		perKey[k] = p
	}
	if d := Diff(s.Expected(), perKey, 5); len(d) > 0 {
		t.Fatalf("the windows do not add up to Expected:\n%s", strings.Join(d, "\n"))
	}
}

func TestWindowStart(t *testing.T) {
	for _, tc := range []struct{ ts, size, want int64 }{
		{0, 10, 0}, {9, 10, 0}, {10, 10, 10}, {-1, 10, -10}, {-10, 10, -10},
		{DefaultStartTS + 3_600_000 - 1, 3_600_000, DefaultStartTS},
	} {
		if got := WindowStart(tc.ts, tc.size); got != tc.want {
			t.Errorf("WindowStart(%d, %d) = %d, want %d", tc.ts, tc.size, got, tc.want)
		}
	}
	if got := WindowKey([]byte("c-1"), -5); got != "c-1@-5" {
		t.Errorf("WindowKey = %q", got)
	}
}

func TestCloserKey(t *testing.T) {
	seen := map[string]bool{}
	for p := range int32(12) {
		k := CloserKey(p, 12)
		if Partition(k, 12) != p || !strings.HasPrefix(string(k), "w-") || seen[string(k)] {
			t.Fatalf("CloserKey(%d, 12) = %s (partition %d)", p, k, Partition(k, 12))
		}
		seen[string(k)] = true
	}
}

// TestWindowedPipelineParses: the windowed pipeline is a valid config with the window asked for.
func TestWindowedPipelineParses(t *testing.T) {
	doc := "kafka: {brokers: [127.0.0.1:1]}\ngroup: g\n" + WindowedPipeline("orders-x", "totals-x", 90*time.Minute)
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	a := cfg.Operators[0].Aggregate
	if a.Window == nil || a.Window.Tumbling != 90*time.Minute || a.Window.Grace != 0 || a.Emit != "final" {
		t.Fatalf("aggregate %+v window %+v", a, a.Window)
	}
	if got := cfg.ChangelogTopic(PipelineOperator); got != "g-totals-changelog" {
		t.Fatalf("changelog topic %q", got)
	}
}

// TestRollupPipelineParses: the rollup pipeline is a valid config: the first stage's windows,
// read by the second's larger ones, which write to the sink.
func TestRollupPipelineParses(t *testing.T) {
	doc := "kafka: {brokers: [127.0.0.1:1]}\ngroup: g\n" + RollupPipeline("orders-x", "totals-x", 15*time.Minute, time.Hour)
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	first, second := cfg.Operators[0], cfg.Operators[1]
	if first.Name != RollupOperator || first.Aggregate.Window.Tumbling != 15*time.Minute || first.Output != "" {
		t.Fatalf("first stage %+v", first)
	}
	if second.Name != PipelineOperator || second.Aggregate.Input != RollupOperator || second.Aggregate.Window.Tumbling != time.Hour || second.Output != "totals_out" {
		t.Fatalf("second stage %+v", second)
	}
	if got := cfg.OutputTopic(RollupOperator); got != "g-per_window-output" {
		t.Fatalf("output topic %q", got)
	}
}

// TestReadWindows writes finals the way sluice does, plus a duplicate, a wrong window end, a
// tombstone and an aborted transaction: ReadWindows keys them by window and reports the
// anomalies as problems.
func TestReadWindows(t *testing.T) {
	ctx := timeout(t)
	brokers := kafkatest.Fake(t, 3)
	topic := kafkatest.UniqueName(t, "finals")
	kafkatest.CreateTopic(t, brokers, topic, 3, nil)
	p := kafkatest.Client(t, brokers, kgo.TransactionalID(kafkatest.UniqueName(t, "tx")), kgo.DefaultProduceTopic(topic))
	txn := func(commit bool, kvs ...string) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(kvs); i += 2 {
			r := &kgo.Record{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}
			if kvs[i+1] == "<nil>" {
				r.Value = nil
			}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(true,
		"c-1", `{"key":"c-1","window_start":0,"window_end":60000,"amount":12.34,"orders":3}`,
		"c-1", `{"key":"c-1","window_start":60000,"window_end":120000,"amount":1,"orders":1}`,
		"c-2", `{"key":"c-2","window_start":0,"window_end":60000,"amount":0.29,"orders":1}`,
	)
	txn(false, "c-1", `{"key":"c-1","window_start":0,"window_end":60000,"amount":5,"orders":1}`)
	read := func() (map[string]Total, []string) {
		t.Helper()
		got, problems, err := ReadWindows(ctx, kafkatest.SplitBrokers(brokers), topic, "amount", "orders", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return got, problems
	}
	got, problems := read()
	want := map[string]Total{"c-1@0": {1234, 3}, "c-1@60000": {100, 1}, "c-2@0": {29, 1}}
	if d := Diff(want, got, 10); d != nil || problems != nil {
		t.Fatalf("ReadWindows: %v, problems %v", d, problems)
	}

	txn(true,
		"c-1", `{"key":"c-1","window_start":0,"window_end":60000,"amount":12.34,"orders":3}`,
		"c-3", `{"key":"c-3","window_start":0,"window_end":70000,"amount":1,"orders":1}`,
		"c-2", "<nil>",
	)
	_, problems = read()
	text := strings.Join(problems, "\n")
	for _, want := range []string{"c-1@0: a second final", "window_end 70000", "tombstone"} {
		if !strings.Contains(text, want) {
			t.Errorf("problems lack %q:\n%s", want, text)
		}
	}
	if len(problems) != 3 {
		t.Errorf("%d problems, want 3:\n%s", len(problems), text)
	}

	txn(true, "c-4", `{"key":"c-4","window_end":60000,"amount":1,"orders":1}`)
	if _, _, err := ReadWindows(ctx, kafkatest.SplitBrokers(brokers), topic, "amount", "orders", time.Minute); err == nil || !strings.Contains(err.Error(), `"window_start" missing`) {
		t.Fatalf("ReadWindows of a final without window_start returned %v", err)
	}
}
