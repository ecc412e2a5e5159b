package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
)

// ErrDecimal is wrapped by every error about a number that is not an exact decimal of the
// wanted scale.
var ErrDecimal = errors.New("workload: not an exact decimal")

// ReadTotals reads topic with read_committed from its start to its end, taken as soon as no
// transaction is open on any partition (last stable offset = high watermark), and returns the
// last value per key parsed as a sluice aggregate, e.g. {"key":"c-1","amount":12.34,"orders":3}
// with sumField "amount" and countField "orders". The key is the record key, or the value's "key" field when the record
// has none; a tombstone deletes its key. Amounts are parsed exactly into cents from their
// decimal text (a JSON number or string), never through float64; a value with a missing or
// inexact field is an error naming its partition and offset.
//
// It expects the topic's writers to have finished or paused: while a transaction stays open it
// waits, until ctx ends. The caller owns the returned map.
func ReadTotals(ctx context.Context, brokers []string, topic string, sumField, countField string) (map[string]Total, error) {
	totals := make(map[string]Total)
	var parser fastjson.Parser
	err := readCommitted(ctx, brokers, topic, func(r *kgo.Record) error {
		return addTotal(totals, &parser, r, sumField, countField)
	})
	if err != nil {
		return nil, err
	}
	return totals, nil
}

// ReadTotalsDecoded is ReadTotals for a sink of another format: decode turns each record's
// value into the JSON object ReadTotals reads (format avro: an avro.Registry's AppendJSON).
func ReadTotalsDecoded(ctx context.Context, brokers []string, topic string, sumField, countField string, decode func(dst, value []byte) ([]byte, error)) (map[string]Total, error) {
	totals := make(map[string]Total)
	var parser fastjson.Parser
	var buf []byte
	err := readCommitted(ctx, brokers, topic, func(r *kgo.Record) error {
		var err error
		if buf, err = decode(buf[:0], r.Value); err != nil {
			return fmt.Errorf("workload: %s[%d] offset %d: %w", topic, r.Partition, r.Offset, err)
		}
		dr := *r
		dr.Value = buf
		return addTotal(totals, &parser, &dr, sumField, countField)
	})
	if err != nil {
		return nil, err
	}
	return totals, nil
}

// readCommitted reads topic with read_committed from its start to its end, taken as soon as no
// transaction is open on any partition, and calls fn with each data record in offset order
// per partition, until fn returns an error, which it returns unwrapped.
func readCommitted(ctx context.Context, brokers []string, topic string, fn func(r *kgo.Record) error) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the consumer sees the offset of a trailing commit marker
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(16<<20),
	)
	if err != nil {
		return fmt.Errorf("workload: reading %s: %w", topic, err)
	}
	defer cl.Close()

	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("workload: start offsets of %s: %w", topic, err)
	}
	ends, err := settledEnds(ctx, adm, topic)
	if err != nil {
		return err
	}

	want := make(map[int32]int64) // partition -> offset to reach
	assign := make(map[int32]kgo.Offset)
	for p, end := range ends {
		start, ok := starts.Lookup(topic, p)
		if !ok || end > start.Offset {
			want[p] = end
			assign[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign})

	var ferr error
	for len(want) > 0 && ferr == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("workload: reading %s: %w (%d partitions not at their end)", topic, err, len(want))
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("workload: reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || ferr != nil || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			ferr = fn(r)
		})
	}
	return ferr
}

// settledEnds waits until no partition of topic has an undecided transaction (last stable
// offset = high watermark) and returns those end offsets. A producer's EndTransaction returns
// before the commit markers are written, so right after a commit the last stable offset can
// still be below the committed records.
func settledEnds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		hwm, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwm.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("workload: end offsets of %s: %w", topic, err)
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("workload: last stable offsets of %s: %w", topic, err)
		}
		if _, ok := hwm[topic]; !ok {
			return nil, fmt.Errorf("workload: end offsets of %s: %w", topic, kerr.UnknownTopicOrPartition)
		}
		ends := make(map[int32]int64, len(hwm[topic]))
		open := 0
		for p, h := range hwm[topic] {
			ends[p] = h.Offset
			if l, ok := lso.Lookup(topic, p); !ok || l.Offset != h.Offset {
				open++
			}
		}
		if open == 0 {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("workload: %s still has %d partitions with an open transaction: %w", topic, open, ctx.Err())
		case <-tick.C:
		}
	}
}

// addTotal records r's aggregate in totals.
func addTotal(totals map[string]Total, p *fastjson.Parser, r *kgo.Record, sumField, countField string) error {
	at := func(err error) error {
		return fmt.Errorf("workload: %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if r.Value == nil {
		delete(totals, string(r.Key))
		return nil
	}
	v, err := p.ParseBytes(r.Value)
	if err != nil {
		return at(err)
	}
	key := r.Key
	if len(key) == 0 {
		if key = v.GetStringBytes("key"); len(key) == 0 {
			return at(errors.New(`no record key and no "key" field`))
		}
	}
	sum, err := decimalField(v, sumField, 2)
	if err != nil {
		return at(err)
	}
	count, err := decimalField(v, countField, 0)
	if err != nil {
		return at(err)
	}
	totals[string(key)] = Total{SumCents: sum, Count: count}
	return nil
}

// decimalField parses field of object v as an exact decimal scaled by 10^scale.
func decimalField(v *fastjson.Value, field string, scale int) (int64, error) {
	f := v.Get(field)
	var text []byte
	switch {
	case f == nil:
		return 0, fmt.Errorf("field %q missing", field)
	case f.Type() == fastjson.TypeNumber:
		text = f.MarshalTo(nil)
	case f.Type() == fastjson.TypeString:
		text = f.GetStringBytes()
	default:
		return 0, fmt.Errorf("field %q is %s, want a number", field, f.Type())
	}
	n, err := parseDecimal(text, scale)
	if err != nil {
		return 0, fmt.Errorf("field %q: %w", field, err)
	}
	return n, nil
}

// ParseCents parses the decimal text b (JSON number syntax, e.g. "12.3", "1.5e3") exactly into
// cents, as ReadTotals reads amounts; it fails with ErrDecimal if b is not a whole number of
// cents or does not fit in an int64.
func ParseCents(b []byte) (int64, error) {
	return parseDecimal(b, 2)
}

// parseDecimal parses the decimal text b (JSON number syntax, e.g. "-12.340", "1.5e2") exactly
// and returns it multiplied by 10^scale. It fails with ErrDecimal if the result is not an
// integer or does not fit in an int64.
func parseDecimal(b []byte, scale int) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("%w with %d decimals: %q (%s)", ErrDecimal, scale, b, why)
	}
	s := b
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	intEnd := digitsEnd(s, 0)
	intPart := s[:intEnd]
	var frac []byte
	i := intEnd
	if i < len(s) && s[i] == '.' {
		fracEnd := digitsEnd(s, i+1)
		frac = s[i+1 : fracEnd]
		if len(frac) == 0 {
			return bad("no digits after the point")
		}
		i = fracEnd
	}
	if len(intPart) == 0 {
		return bad("no digits before the point")
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		e := s[i+1:]
		if len(e) > 0 && (e[0] == '+' || e[0] == '-') {
			e = e[1:]
		}
		if len(e) == 0 || digitsEnd(e, 0) != len(e) || len(e) > 4 {
			return bad("bad exponent")
		}
		x, _ := strconv.Atoi(string(s[i+1:]))
		exp = x
		i = len(s)
	}
	if i != len(s) {
		return bad("unexpected character")
	}

	// The value is digits(intPart ++ frac) × 10^shift.
	shift := exp - len(frac) + scale
	// Drop trailing zeros into the shift, then leading zeros.
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
		shift++
	}
	if len(frac) == 0 {
		for len(intPart) > 0 && intPart[len(intPart)-1] == '0' {
			intPart = intPart[:len(intPart)-1]
			shift++
		}
	}
	for len(intPart) > 0 && intPart[0] == '0' {
		intPart = intPart[1:]
	}
	if len(intPart) == 0 && len(frac) > 0 {
		for len(frac) > 0 && frac[0] == '0' {
			frac = frac[1:]
		}
	}
	if len(intPart)+len(frac) == 0 {
		return 0, nil
	}
	if shift < 0 {
		return bad("too many decimals")
	}
	var n uint64
	const limit = 1 << 63 // |int64 min|
	for _, part := range [][]byte{intPart, frac} {
		for _, c := range part {
			if n > (limit-uint64(c-'0'))/10 {
				return bad("out of range")
			}
			n = n*10 + uint64(c-'0')
		}
	}
	for ; shift > 0; shift-- {
		if n > limit/10 {
			return bad("out of range")
		}
		n *= 10
	}
	if neg {
		return -int64(n-1) - 1, nil
	}
	if n == limit {
		return bad("out of range")
	}
	return int64(n), nil
}

// digitsEnd returns the index of the first non-digit in s at or after i.
func digitsEnd(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// Diff returns human-readable differences between want and got, one per key in key order: at
// most max lines, the last of which counts the rest when there are more.
func Diff(want, got map[string]Total, max int) []string {
	if max <= 0 {
		return nil
	}
	keys := make([]string, 0, len(want)+len(got))
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			keys = append(keys, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for i, k := range keys {
		if len(out) == max-1 && len(keys) > max {
			out = append(out, fmt.Sprintf("... and %d more differences (%d in all)", len(keys)-i, len(keys)))
			break
		}
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !gok:
			out = append(out, fmt.Sprintf("%s: missing, want %s", k, w))
		case !wok:
			out = append(out, fmt.Sprintf("%s: unexpected %s", k, g))
		default:
			out = append(out, fmt.Sprintf("%s: got %s, want %s", k, g, w))
		}
	}
	return out
}

// String formats t as "sum=123.45 count=3".
func (t Total) String() string {
	return "sum=" + string(appendCents(nil, t.SumCents)) + " count=" + strconv.FormatInt(t.Count, 10)
}

// ReadEach reads topic with read_committed from its start to its end (as ReadTotals does) and
// calls fn with each data record, in offset order per partition; fn's error stops it.
func ReadEach(ctx context.Context, brokers []string, topic string, fn func(r *kgo.Record) error) error {
	return readCommitted(ctx, brokers, topic, fn)
}
