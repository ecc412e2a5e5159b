package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// windowed is the "windows" workload (-workload windows): the orders of spec, the same keys,
// amounts and order ids as the orders workload, but with event times spread evenly over span
// (ts = start + i·span/records for the i-th order, so ts never decreases within a partition
// and no record is late), followed by one closing record per partition whose ts is the end of
// the last window, so that every window of the backlog closes with grace 0. Every contender
// computes tumbling windows of size per customer_id (sum of amount, count) and emits one final
// result per (key, window). A windowed is a plain value, safe to copy and to share.
type windowed struct {
	spec workload.Spec
	span time.Duration // event time covered by the backlog
	size time.Duration // tumbling window size
}

// window identifies one (customer, window) final: cust is the customer number of the key
// "c-0000042" (42), start the window start in epoch ms.
type window struct {
	cust  int
	start int64
}

func (w windowed) startTS() int64 {
	if w.spec.StartTS == 0 {
		return workload.DefaultStartTS
	}
	return w.spec.StartTS
}

// ts is the event time of order i (0-based).
func (w windowed) ts(i int64) int64 {
	if w.spec.Records <= 1 {
		return w.startTS()
	}
	// i·span/records in 128 bits: exact for any span and record count (i < records, so the
	// quotient is below span and the division cannot overflow).
	hi, lo := bits.Mul64(uint64(i), uint64(w.span.Milliseconds()))
	q, _ := bits.Div64(hi, lo, uint64(w.spec.Records))
	return w.startTS() + int64(q)
}

// windowStart is the start of the tumbling window holding ts (windows aligned to the epoch).
func (w windowed) windowStart(ts int64) int64 {
	size := w.size.Milliseconds()
	m := ts % size
	if m < 0 {
		m += size
	}
	return ts - m
}

// closeTS is the event time of the closing records: the end of the last window of the backlog.
// With grace 0 a watermark (or Kafka Streams' stream time) at closeTS closes every window of the
// backlog; the closing records' own window starts there and never closes.
func (w windowed) closeTS() int64 {
	return w.windowStart(w.ts(max(w.spec.Records-1, 0))) + w.size.Milliseconds()
}

// closingKeys returns one key per partition that the default partitioner sends there. They
// are not customer ids ("close-<n>"), so their windows are told apart from the backlog's.
func (w windowed) closingKeys() [][]byte {
	keys := make([][]byte, w.spec.Partitions)
	left := int(w.spec.Partitions)
	for n := 0; left > 0; n++ {
		k := []byte("close-" + strconv.Itoa(n))
		if p := workload.Partition(k, w.spec.Partitions); keys[p] == nil {
			keys[p] = k
			left--
		}
	}
	return keys
}

// each calls fn for every record in production order: the orders, then the closing records
// (closing = true). key and value are reused between calls. cents is the order's amount.
func (w windowed) each(fn func(key, value []byte, ts, cents int64, closing bool) error) error {
	var i int64
	var buf []byte
	err := w.spec.Each(func(key, value []byte, _ int64) error {
		ts := w.ts(i)
		i++
		cents, err := orderCents(value)
		if err != nil {
			return err
		}
		// The workload's value ends with `,"ts":<ms>}`: replace its event time.
		at := bytes.LastIndex(value, []byte(`"ts":`))
		if at < 0 {
			return fmt.Errorf("windows workload: no ts in %s", value)
		}
		buf = append(append(buf[:0], value[:at]...), `"ts":`...)
		buf = append(strconv.AppendInt(buf, ts, 10), '}')
		return fn(key, buf, ts, cents, false)
	})
	if err != nil {
		return err
	}
	closeTS := w.closeTS()
	for p, k := range w.closingKeys() {
		buf = fmt.Appendf(buf[:0], `{"order_id":"o-%012d","customer_id":"%s","amount":0.01,"ts":%d}`,
			w.spec.Records+int64(p)+1, k, closeTS)
		if err := fn(k, buf, closeTS, 1, true); err != nil {
			return err
		}
	}
	return nil
}

// orderCents extracts the amount of a workload order value (`"amount":123.45`) in cents.
func orderCents(value []byte) (int64, error) {
	const field = `"amount":`
	at := bytes.Index(value, []byte(field))
	if at < 0 {
		return 0, fmt.Errorf("windows workload: no amount in %s", value)
	}
	rest := value[at+len(field):]
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return 0, fmt.Errorf("windows workload: bad amount in %s", value)
	}
	return decimalCents(rest[:end])
}

// decimalCents parses a JSON number exactly and returns it in cents; it fails if the number is
// not a whole number of cents.
func decimalCents(text []byte) (int64, error) {
	var r big.Rat
	if _, ok := r.SetString(string(text)); !ok {
		return 0, fmt.Errorf("not a number: %q", text)
	}
	r.Mul(&r, big.NewRat(100, 1))
	if !r.IsInt() || !r.Num().IsInt64() {
		return 0, fmt.Errorf("not a whole number of cents: %q", text)
	}
	return r.Num().Int64(), nil
}

// expected returns the final of every (customer, window) of the backlog; the closing records'
// windows are not in it.
func (w windowed) expected() (map[window]workload.Total, error) {
	want := make(map[window]workload.Total)
	err := w.each(func(key, _ []byte, ts, cents int64, closing bool) error {
		if closing {
			return nil
		}
		c, ok := customer(key)
		if !ok {
			return fmt.Errorf("windows workload: unexpected key %q", key)
		}
		k := window{c, w.windowStart(ts)}
		t := want[k]
		t.SumCents += cents
		t.Count++
		want[k] = t
		return nil
	})
	return want, err
}

// customer parses a workload key "c-0000042" into 42.
func customer(key []byte) (int, bool) {
	d, ok := bytes.CutPrefix(key, []byte("c-"))
	if !ok || len(d) == 0 || len(d) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// produce writes every record of w to topic (record key = customer_id, timestamp = ts) and
// waits until all are acknowledged. The closing records follow the backlog in every partition.
func (w windowed) produce(ctx context.Context, cl *kgo.Client, topic string) error {
	return workload.ProduceEach(ctx, cl, topic, func(fn func(key, value []byte, ts int64) error) error {
		return w.each(func(key, value []byte, ts, _ int64, _ bool) error { return fn(key, value, ts) })
	})
}

// finals checks a contender's windowed outputs against the expected finals: every output is
// {"key":..,"window_start":..,"window_end":..,"amount":..,"orders":..}; each (key, window) of
// the backlog must appear exactly once with the expected values; the closing records' own
// windows may appear (a bounded job closes every window at the end of its input) and are
// ignored. Not safe for concurrent use.
type finals struct {
	w       windowed
	want    map[window]workload.Total
	closing map[string]bool
	got     map[window]workload.Total
	read    int      // outputs read
	dups    int      // outputs of a (key, window) already seen
	bad     []string // outputs that are no final of the backlog (first few)
	nBad    int
	ignored int // outputs of the closing records' windows
}

func newFinals(w windowed, want map[window]workload.Total) *finals {
	f := &finals{w: w, want: want, closing: map[string]bool{}, got: make(map[window]workload.Total, len(want))}
	for _, k := range w.closingKeys() {
		f.closing[string(k)] = true
	}
	return f
}

func (f *finals) badf(format string, args ...any) {
	f.nBad++
	if len(f.bad) < 5 {
		f.bad = append(f.bad, fmt.Sprintf(format, args...))
	}
}

// add records one output value (partition and offset for messages only).
func (f *finals) add(p *fastjson.Parser, value []byte, partition int32, offset int64) {
	f.read++
	at := func() string { return fmt.Sprintf("partition %d offset %d", partition, offset) }
	v, err := p.ParseBytes(value)
	if err != nil {
		f.badf("%s: %v: %q", at(), err, value)
		return
	}
	key := v.GetStringBytes("key")
	start, errS := intField(v, "window_start")
	end, errE := intField(v, "window_end")
	orders, errO := intField(v, "orders")
	var cents int64
	errA := errors.New("missing")
	if a := v.Get("amount"); a != nil {
		if a.Type() == fastjson.TypeString {
			cents, errA = decimalCents(a.GetStringBytes())
		} else {
			cents, errA = decimalCents(a.MarshalTo(nil))
		}
	}
	if len(key) == 0 || errors.Join(errS, errE, errO, errA) != nil {
		f.badf("%s: not a windowed final: %s", at(), value)
		return
	}
	if end-start != f.w.size.Milliseconds() || f.w.windowStart(start) != start {
		f.badf("%s: window [%d, %d) is not a %s tumbling window: %s", at(), start, end, f.w.size, value)
		return
	}
	c, ok := customer(key)
	if !ok {
		if f.closing[string(key)] && start == f.w.closeTS() {
			f.ignored++
		} else {
			f.badf("%s: unexpected final %s", at(), value)
		}
		return
	}
	k := window{c, start}
	if _, ok := f.want[k]; !ok {
		f.badf("%s: a final of no window of the backlog: %s", at(), value)
		return
	}
	t := workload.Total{SumCents: cents, Count: orders}
	if prev, seen := f.got[k]; seen {
		f.dups++
		if prev == t {
			f.badf("%s: duplicate final (same values) %s", at(), value)
		} else {
			f.badf("%s: duplicate final, first %s, now %s", at(), prev, value)
		}
		return
	}
	f.got[k] = t
}

// intField returns the integer field name of v.
func intField(v *fastjson.Value, name string) (int64, error) {
	f := v.Get(name)
	if f == nil {
		return 0, fmt.Errorf("no %s", name)
	}
	return f.Int64()
}

// diff returns the differences (at most max lines, the first one a summary), and whether the
// only differences are finals not seen yet (which a later read may still bring).
func (f *finals) diff(max int) (out []string, onlyMissing bool) {
	var missing, wrong []window
	for k, w := range f.want {
		if g, ok := f.got[k]; !ok {
			missing = append(missing, k)
		} else if g != w {
			wrong = append(wrong, k)
		}
	}
	if len(missing)+len(wrong)+f.nBad == 0 {
		return nil, false
	}
	out = append(out, fmt.Sprintf("%d finals read (%d distinct, %d closing-record windows ignored), want %d: "+
		"%d missing, %d wrong, %d duplicates, %d other bad outputs",
		f.read, len(f.got), f.ignored, len(f.want), len(missing), len(wrong), f.dups, f.nBad-f.dups))
	cmp := func(a, b window) int {
		if a.cust != b.cust {
			return a.cust - b.cust
		}
		return int(a.start - b.start)
	}
	slices.SortFunc(wrong, cmp)
	slices.SortFunc(missing, cmp)
	key := func(k window) string { return string(f.w.spec.Key(k.cust)) + "@" + strconv.FormatInt(k.start, 10) }
	for _, s := range f.bad {
		out = append(out, s)
	}
	for _, k := range wrong {
		out = append(out, fmt.Sprintf("%s: got %s, want %s", key(k), f.got[k], f.want[k]))
	}
	for _, k := range missing {
		out = append(out, fmt.Sprintf("%s: missing, want %s", key(k), f.want[k]))
	}
	if len(out) > max {
		out = append(out[:max-1], fmt.Sprintf("... and %d more", len(out)-max+1))
	}
	return out, len(wrong)+f.nBad == 0
}

// readFinals reads topic with read_committed from its start to its end (taken once no
// transaction is open) into a new finals check.
func readFinals(ctx context.Context, seeds []string, topic string, w windowed, want map[window]workload.Total) (*finals, error) {
	f := newFinals(w, want)
	var parser fastjson.Parser
	err := readTopic(ctx, seeds, topic, func(r *kgo.Record) { f.add(&parser, r.Value, r.Partition, r.Offset) })
	if err != nil {
		return nil, err
	}
	return f, nil
}

// windowsPipeline is the sluice pipeline of the windows workload: tumbling windows of size,
// grace 0, emit: final, the watermark at the largest ts seen (max_delay 0).
func windowsPipeline(topic, sink string, size time.Duration) string {
	return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: 0s}}
operators:
  - name: windows
    aggregate:
      input: orders
      window: {tumbling: %s, grace: 0s}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: windows_out
sinks:
  windows_out: {topic: %s, format: json}
`, topic, yamlDuration(size), sink)
}

// yamlDuration formats d for a sluice config: "1h", "30m", "90s" or "1500ms".
func yamlDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
