// Package workload owns the "orders" workload of sluice's benchmarks and integration tests
// (DESIGN.md, "Benchmarks"): a deterministic generator of order records, the per-customer
// totals those records must add up to, a fast producer that prefills a topic with them, and a
// verifier that reads an aggregate output topic back and compares it exactly. It is product
// code: the binary's `sluice bench` and `sluice demo` use it, and so do the end-to-end tests
// (integration/e2e), the peer harness (integration/peers/harness) and operators/task's tests.
//
// An order is a JSON value of about 90 bytes,
//
//	{"order_id":"o-000000000001","customer_id":"c-0000042","amount":123.45,"ts":1767225600000}
//
// keyed by its customer_id and partitioned as Kafka's default partitioner does (murmur2 of the
// key), so every record's partition is known before it is produced. Amounts are whole cents
// from 0.01 to 999.99 and are totalled in integer cents, never in floating point.
//
// The windowed variant (windows.go) spreads the same orders' event times over Spec.Span and
// totals them per customer and tumbling window: WindowedPipeline computes it, ExpectedWindows
// says what it must produce, ProduceClosers closes the last windows, and ReadWindows reads the
// finals back, checking that each (customer, window) has exactly one.
package workload

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/producer"
)

// DefaultStartTS is the event time of the first order when Spec.StartTS is 0:
// 2026-01-01T00:00:00Z in epoch milliseconds.
const DefaultStartTS int64 = 1767225600000

// MaxJitterMS bounds the event-time jitter: without Spec.Span, order i has ts in
// [StartTS+i, StartTS+i+MaxJitterMS), so event time advances one millisecond per order and is
// out of order by less than MaxJitterMS.
const MaxJitterMS = 100

// Amount bounds in cents.
const (
	MinCents = 1
	MaxCents = 99999
)

// minKeyDigits is the zero-padded width of customer numbers ("c-0000042"); more keys widen it.
const minKeyDigits = 7

// ErrSpec is wrapped by every error about an invalid Spec.
var ErrSpec = errors.New("workload: invalid spec")

// Spec describes one orders workload. The same Spec always generates the same records in the
// same order. A Spec is a plain value, safe to copy and to use from several goroutines.
type Spec struct {
	// Records is the number of orders.
	Records int64
	// Keys is the number of distinct customers; each order picks one uniformly.
	Keys int
	// Partitions is the partition count of the input topic (used by Partition and Counts).
	Partitions int32
	// Seed selects the pseudo-random sequence.
	Seed int64
	// StartTS is the event time (epoch ms) of the first order; 0 means DefaultStartTS.
	StartTS int64
	// Span, when > 0, spreads the orders' event times evenly over [StartTS, StartTS+Span)
	// without jitter: order i has ts = StartTS + ⌊i·Span/Records⌋ (in ms), non-decreasing in i
	// and so in every partition, which a windowed pipeline with watermark max_delay 0 needs to
	// see no late record. The customers and amounts are those of the same Spec without Span.
	// 0 means one millisecond per order plus a jitter below MaxJitterMS.
	Span time.Duration
}

// Total is one customer's aggregate: the sum of its amounts in cents and its number of orders.
type Total struct {
	SumCents int64
	Count    int64
}

// Validate reports whether s can generate records.
func (s Spec) Validate() error {
	switch {
	case s.Records < 0:
		return fmt.Errorf("%w: Records is %d, want ≥ 0", ErrSpec, s.Records)
	case s.Keys < 1:
		return fmt.Errorf("%w: Keys is %d, want ≥ 1", ErrSpec, s.Keys)
	case s.Partitions < 1:
		return fmt.Errorf("%w: Partitions is %d, want ≥ 1", ErrSpec, s.Partitions)
	case s.StartTS < 0:
		return fmt.Errorf("%w: StartTS is %d, want ≥ 0", ErrSpec, s.StartTS)
	case s.Span < 0:
		return fmt.Errorf("%w: Span is %v, want ≥ 0", ErrSpec, s.Span)
	}
	return nil
}

// order is one generated record before formatting.
type order struct {
	id       int64 // 1-based
	customer int   // 0-based
	cents    int64
	ts       int64
}

// generator yields the orders of a Spec in sequence. Not safe for concurrent use.
type generator struct {
	rng     *rand.Rand
	keys    int
	startTS int64
	spanMS  uint64 // 0: one ms per order plus jitter
	records uint64 // the Spec's Records, when spanMS > 0
	next    int64
}

func (s Spec) generator() *generator {
	start := s.StartTS
	if start == 0 {
		start = DefaultStartTS
	}
	seed := uint64(s.Seed)
	return &generator{
		rng:     rand.New(rand.NewPCG(seed, seed^0x5eed_0f_0de75)),
		keys:    s.Keys,
		startTS: start,
		spanMS:  uint64(s.Span.Milliseconds()),
		records: uint64(s.Records),
	}
}

func (g *generator) order() order {
	i := g.next
	g.next++
	o := order{
		id:       i + 1,
		customer: g.rng.IntN(g.keys),
		cents:    MinCents + g.rng.Int64N(MaxCents-MinCents+1),
		ts:       g.startTS + i + g.rng.Int64N(MaxJitterMS), // the jitter is drawn either way
	}
	if g.spanMS > 0 {
		o.ts = g.startTS + spread(uint64(i), g.spanMS, g.records)
	}
	return o
}

// spread returns ⌊i·span/n⌋ for i < n without overflow.
func spread(i, span, n uint64) int64 {
	hi, lo := bits.Mul64(i, span)
	q, _ := bits.Div64(hi, lo, n) // hi < n since i < n
	return int64(q)
}

// keyDigits is the zero-padded width of customer numbers for s.
func (s Spec) keyDigits() int {
	return max(minKeyDigits, len(strconv.Itoa(s.Keys-1)))
}

// Key returns the key (customer_id) of customer n, 0 ≤ n < Keys. The caller owns the result.
func (s Spec) Key(n int) []byte {
	return appendKey(nil, n, s.keyDigits())
}

func appendKey(dst []byte, customer, digits int) []byte {
	dst = append(dst, 'c', '-')
	return appendPadded(dst, uint64(customer), digits)
}

// appendPadded appends n in decimal, zero-padded on the left to at least width digits.
func appendPadded(dst []byte, n uint64, width int) []byte {
	var buf [20]byte
	i := len(buf)
	for n >= 10 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	buf[i] = byte('0' + n)
	for pad := width - (len(buf) - i); pad > 0; pad-- {
		dst = append(dst, '0')
	}
	return append(dst, buf[i:]...)
}

// appendCents appends cents as a decimal with exactly two fraction digits ("123.45", "0.01").
func appendCents(dst []byte, cents int64) []byte {
	mag := uint64(cents)
	if cents < 0 {
		dst = append(dst, '-')
		mag = -mag
	}
	dst = strconv.AppendUint(dst, mag/100, 10)
	dst = append(dst, '.')
	return appendPadded(dst, mag%100, 2)
}

// Each calls fn for every order in sequence, stopping at the first error fn returns (which it
// returns unwrapped). key and value are reused between calls: fn must copy them to keep them.
// ts is the order's event time in epoch ms, also present in the value. Each allocates nothing
// per record.
func (s Spec) Each(fn func(key, value []byte, ts int64) error) error {
	if err := s.Validate(); err != nil {
		return err
	}
	g := s.generator()
	digits := s.keyDigits()
	key := make([]byte, 0, 2+digits)
	value := make([]byte, 0, 128)
	for range s.Records {
		o := g.order()
		key = appendKey(key[:0], o.customer, digits)
		value = append(value[:0], `{"order_id":"o-`...)
		value = appendPadded(value, uint64(o.id), 12)
		value = append(value, `","customer_id":"`...)
		value = append(value, key...)
		value = append(value, `","amount":`...)
		value = appendCents(value, o.cents)
		value = append(value, `,"ts":`...)
		value = strconv.AppendInt(value, o.ts, 10)
		value = append(value, '}')
		if err := fn(key, value, o.ts); err != nil {
			return err
		}
	}
	return nil
}

// Expected returns the totals the orders of s add up to, by customer_id. Customers that got no
// order are absent. The caller owns the map. It panics if s is invalid (see Validate).
func (s Spec) Expected() map[string]Total {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	sums := make([]Total, s.Keys)
	g := s.generator()
	for range s.Records {
		o := g.order()
		sums[o.customer].SumCents += o.cents
		sums[o.customer].Count++
	}
	out := make(map[string]Total, min(int64(s.Keys), s.Records))
	digits := s.keyDigits()
	var key []byte
	for c, t := range sums {
		if t.Count > 0 {
			key = appendKey(key[:0], c, digits)
			out[string(key)] = t
		}
	}
	return out
}

// Counts returns how many orders of s land in each of its Partitions partitions.
// It panics if s is invalid (see Validate).
func (s Spec) Counts() []int64 {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	parts := make([]int32, s.Keys)
	digits := s.keyDigits()
	var key []byte
	for c := range parts {
		key = appendKey(key[:0], c, digits)
		parts[c] = Partition(key, s.Partitions)
	}
	counts := make([]int64, s.Partitions)
	g := s.generator()
	for range s.Records {
		counts[parts[g.order().customer]]++
	}
	return counts
}

// Partition returns the partition Kafka's default partitioner (and franz-go's
// StickyKeyPartitioner(nil)) chooses for a non-empty key among n partitions:
// (murmur2(key) & 0x7fffffff) % n.
func Partition(key []byte, n int32) int32 {
	return int32(producer.Murmur2(key)&0x7fffffff) % n
}
