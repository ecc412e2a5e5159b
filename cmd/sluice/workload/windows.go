package workload

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
)

// The windowed variant of the workload: the same orders, with Spec.Span spreading their event
// times over a known range, aggregated per customer and epoch-aligned tumbling window with
// emit: final (WindowedPipeline). Each (customer, window) that got an order has exactly one
// final result, which ExpectedWindows computes and ReadWindows reads back, both keyed by
// WindowKey. A window's final is written when the watermark reaches its end; ProduceClosers
// writes, after the orders, one record per partition that moves every partition's watermark
// past the orders' last window.

// WindowStart returns the start (epoch ms) of the epoch-aligned tumbling window of size ms that
// contains ts: the largest multiple of size ≤ ts.
func WindowStart(ts, size int64) int64 {
	q := ts / size
	if ts%size != 0 && ts < 0 {
		q--
	}
	return q * size
}

// WindowKey is the key of a customer's window in the maps of ExpectedWindows and ReadWindows:
// the customer key, "@", and the window start in epoch ms ("c-0000042@1767225600000").
func WindowKey(key []byte, start int64) string {
	b := make([]byte, 0, len(key)+21)
	b = append(b, key...)
	b = append(b, '@')
	return string(strconv.AppendInt(b, start, 10))
}

// WindowedPipeline is Pipeline with the aggregate per tumbling window of the given size (grace
// 0, emit: final) and the source's watermark max_delay 0: what ReadWindows(..., "amount",
// "orders", size) reads back from sink is one result per (customer_id, window). With a Spec
// whose Span is set, no order is late.
func WindowedPipeline(topic, sink string, size time.Duration) string {
	return windowedPipeline(topic, sink, windowStage(PipelineOperator, "orders", size, "{count: {}}"))
}

// windowedPipeline is a pipeline of the orders of topic through stages (windowStage), the
// last of which writes to sink.
func windowedPipeline(topic, sink, stages string) string {
	return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: 0s}}
operators:
%s    output: totals_out
sinks:
  totals_out: {topic: %s, format: json}
`, topic, stages, sink)
}

// windowStage is an operator of a windowed pipeline: name's totals of input per customer and
// tumbling window of size (grace 0, emit: final), with orders as the count's field spec.
func windowStage(name, input string, size time.Duration, orders string) string {
	return fmt.Sprintf(`  - name: %s
    aggregate:
      input: %s
      window: {tumbling: %s, grace: 0s}
      emit: final
      fields: {amount: {sum: amount}, orders: %s}
`, name, input, size, orders)
}

// RollupOperator is the first operator of RollupPipeline: its results go through
// "<group>-per_window-output" to the second, PipelineOperator.
const RollupOperator = "per_window"

// RollupPipeline returns the sources, operators and sinks sections of a sluice config (YAML)
// of windows over windows: RollupOperator's totals per customer and tumbling window of size,
// rolled up by PipelineOperator into tumbling windows of rollup (a multiple of size), with the
// same fields as WindowedPipeline's (grace 0, emit: final, watermark max_delay 0). Its finals
// are ExpectedWindows(rollup).
func RollupPipeline(topic, sink string, size, rollup time.Duration) string {
	return windowedPipeline(topic, sink, windowStage(RollupOperator, "orders", size, "{count: {}}")+
		windowStage(PipelineOperator, RollupOperator, rollup, "{sum: orders}"))
}

// ExpectedWindows returns the totals of the orders of s per customer and tumbling window of the
// given size, keyed by WindowKey. Windows without an order are absent. The caller owns the map.
// It panics if s is invalid (see Validate) or size is below a millisecond.
func (s Spec) ExpectedWindows(size time.Duration) map[string]Total {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	ms := size.Milliseconds()
	if ms < 1 {
		panic(fmt.Sprintf("workload: window size %v, want ≥ 1ms", size))
	}
	type window struct {
		customer int
		start    int64
	}
	sums := make(map[window]Total)
	g := s.generator()
	for range s.Records {
		o := g.order()
		w := window{o.customer, WindowStart(o.ts, ms)}
		t := sums[w]
		t.SumCents += o.cents
		t.Count++
		sums[w] = t
	}
	out := make(map[string]Total, len(sums))
	digits := s.keyDigits()
	var key []byte
	for w, t := range sums {
		key = appendKey(key[:0], w.customer, digits)
		out[WindowKey(key, w.start)] = t
	}
	return out
}

// MaxTS returns the largest event time among the orders of s (StartTS, resolved, when there
// are none). It panics if s is invalid (see Validate).
func (s Spec) MaxTS() int64 {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	g := s.generator()
	if s.Records == 0 {
		return g.startTS
	}
	if g.spanMS > 0 {
		return g.startTS + spread(uint64(s.Records-1), g.spanMS, g.records)
	}
	maxTS := int64(-1 << 63)
	for range s.Records {
		maxTS = max(maxTS, g.order().ts)
	}
	return maxTS
}

// CloserKey returns the key ProduceClosers uses for partition p of n: the first of "w-0",
// "w-1", … that Partition places on p. It is never a customer key (those start with "c-").
func CloserKey(p, n int32) []byte {
	var key []byte
	for i := uint64(0); ; i++ {
		key = strconv.AppendUint(append(key[:0], 'w', '-'), i, 10)
		if Partition(key, n) == p {
			return key
		}
	}
}

// ProduceClosers writes one order per partition of s to topic, after whatever was produced
// before, with event time ts and key CloserKey (amount 0.01): with watermark max_delay 0 it
// moves every partition's watermark to ts, so every window whose end + grace is ≤ ts closes,
// while the closer's own window stays open. It returns once every record is acknowledged.
func ProduceClosers(ctx context.Context, cl *kgo.Client, topic string, s Spec, ts int64) error {
	if err := s.Validate(); err != nil {
		return err
	}
	recs := make([]*kgo.Record, 0, s.Partitions)
	for p := range s.Partitions {
		key := CloserKey(p, s.Partitions)
		v := fmt.Appendf(nil, `{"order_id":"o-closer-%d","customer_id":"%s","amount":0.01,"ts":%d}`, p, key, ts)
		recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: v, Timestamp: time.UnixMilli(ts)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("workload: producing closers to %s: %w", topic, err)
	}
	return nil
}

// maxProblems bounds the problems ReadWindows lists.
const maxProblems = 10

// ReadWindows reads the output topic of a windowed aggregate with emit: final the way
// ReadTotals reads an unwindowed one, and returns each (key, window)'s result keyed by
// WindowKey(key, window_start). A final must come exactly once per (key, window) and carry
// window_start and window_end = window_start + size: a second output of a (key, window) (the
// last one is kept), a tombstone or a wrong window_end is a problem, listed in problems (at
// most 10 lines, the last counting the rest). A value that cannot be read exactly (a missing
// or inexact field) is an error naming its partition and offset. The caller owns the results.
func ReadWindows(ctx context.Context, brokers []string, topic string, sumField, countField string, size time.Duration) (map[string]Total, []string, error) {
	totals := make(map[string]Total)
	var (
		parser   fastjson.Parser
		problems []string
		more     int
	)
	problem := func(r *kgo.Record, format string, args ...any) {
		if len(problems) < maxProblems-1 {
			problems = append(problems, fmt.Sprintf("%s partition %d offset %d: ", r.Topic, r.Partition, r.Offset)+fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	ms := size.Milliseconds()
	err := readCommitted(ctx, brokers, topic, func(r *kgo.Record) error {
		at := func(err error) error {
			return fmt.Errorf("workload: %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		if r.Value == nil {
			problem(r, "tombstone for key %q (a final is never deleted)", r.Key)
			return nil
		}
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			return at(err)
		}
		key := r.Key
		if len(key) == 0 {
			if key = v.GetStringBytes("key"); len(key) == 0 {
				return at(errors.New(`no record key and no "key" field`))
			}
		}
		start, err := decimalField(v, "window_start", 0)
		if err != nil {
			return at(err)
		}
		end, err := decimalField(v, "window_end", 0)
		if err != nil {
			return at(err)
		}
		sum, err := decimalField(v, sumField, 2)
		if err != nil {
			return at(err)
		}
		count, err := decimalField(v, countField, 0)
		if err != nil {
			return at(err)
		}
		if end != start+ms {
			problem(r, "%s window_start %d window_end %d, want a window of %v", key, start, end, size)
		}
		wk := WindowKey(key, start)
		t := Total{SumCents: sum, Count: count}
		if prev, dup := totals[wk]; dup {
			problem(r, "%s: a second final (%s), after %s", wk, t, prev)
		}
		totals[wk] = t
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if more > 0 {
		problems = append(problems, fmt.Sprintf("... and %d more problems (%d in all)", more, len(problems)+more))
	}
	return totals, problems, nil
}
