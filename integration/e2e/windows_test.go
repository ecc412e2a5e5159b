package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestWindowsExactlyOnceKill9 is the kill -9 scenario of a windowed aggregate (tumbling
// windows, emit: final, a watermark with max_delay) against the real broker: 300k timed orders
// over 5k keys, some of them late, one then three instances, SIGKILLs while tasks sort their
// backlog, right after a switch to real-time and at random moments while more orders arrive.
// Every (key, window) final must be read exactly once with the exact sum and count, and every
// late record must be in the dead-letter topic exactly once.
func TestWindowsExactlyOnceKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	windowsScenario(t, brokers, windowsSize{first: 200_000, second: 100_000, keys: 5_000, enterLag: 5000, exitLag: 500,
		windowMS: 5000})
}

// TestWindowsExactlyOnceKill9Fake is TestWindowsExactlyOnceKill9, smaller, against an
// in-process kfake cluster; it runs without the real broker.
func TestWindowsExactlyOnceKill9Fake(t *testing.T) {
	brokers := kafkatest.Fake(t, 8)
	windowsScenario(t, brokers, windowsSize{first: 40_000, second: 20_000, keys: 1_000, enterLag: 2000, exitLag: 200,
		windowMS: 1000})
}

// envWindowsSeed fixes the random seed of the windows and chaos scenarios (data and kill
// choices), to replay a failed run's data; the kill moments depend on timing all the same.
const envWindowsSeed = "SLUICE_E2E_SEED"

// windowsSize sizes one windows scenario. Event time advances by one millisecond per order of
// a partition, so a window of windowMS holds about windowMS orders per partition.
type windowsSize struct {
	first, second     int // orders before the first start, and while instances run
	keys              int
	enterLag, exitLag int64
	windowMS          int64 // tumbling window size
}

// Event time of the timed orders (see timedOrders), in ms.
const (
	winParts    = 8
	winGraceMS  = 50  // window grace
	winDelayMS  = 100 // the source's watermark max_delay
	winJitterMS = 200 // an order's ts is up to this much after its index: some fall behind the watermark
	// winStragglers is the fraction of orders whose ts is set far back (up to two windows plus
	// grace and delay): most of them are late, some are not.
	winStragglers = 0.005
	// winRushersPerWindow is how many orders per window of a partition have their ts set ahead,
	// by up to half a window: such an order holds the watermark up, and the orders after it are
	// late until event time catches up, so what a restarted task decides depends on the
	// watermark it restored with the offsets.
	winRushersPerWindow = 0.5
)

func windowsScenario(t *testing.T, brokers string, size windowsSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	began := time.Now()
	seed, rng := scenarioSeed(t)
	ev := eventTime{window: size.windowMS, grace: winGraceMS, maxDelay: winDelayMS}

	p := newPipeline(t, brokers, pipelineOpts{partitions: winParts, keys: size.keys, enterLag: size.enterLag, exitLag: size.exitLag,
		window:    fmt.Sprintf("{tumbling: %dms, grace: %dms}", ev.window, ev.grace),
		watermark: fmt.Sprintf("{max_delay: %dms}", ev.maxDelay),
		emit:      "final",
	})
	gen := newTimedOrders(uint64(seed), size.keys, winParts, ev)
	ins := runKills(ctx, t, p, rng, gen, size.first, size.second, gen.closing)

	// The oracle reads the input back: the offsets of its records are what the watermark and
	// lateness follow.
	input, err := readCommitted(ctx, p.brokers, p.topic)
	if err != nil {
		t.Fatal(err)
	}
	want, err := windowOracle(input, ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(input) != gen.produced {
		t.Fatalf("input holds %d records, want the %d produced", len(input), gen.produced)
	}
	t.Logf("oracle: %d orders, %d (key, window) finals, %d late (%d stragglers and %d rushers produced), %d windows left open",
		len(input), len(want.finals), len(want.late), gen.stragglers, gen.rushers, want.open)
	if len(want.late) == 0 || want.open != winParts {
		t.Fatalf("the workload must have late records and exactly one open window per partition (the last order's): %d late, %d open", len(want.late), want.open)
	}
	// Every final is in a committed transaction once the group committed every input offset;
	// wait until a read_committed reader sees them all (or more: verify reports duplicates).
	var finals []*kgo.Record
	pollf(ctx, t, func() string {
		return fmt.Sprintf("%d finals in %s (read_committed), have %d", len(want.finals), p.sink, len(finals))
	}, 200*time.Millisecond, func() (bool, error) {
		finals, err = readCommitted(ctx, p.brokers, p.sink)
		return len(finals) >= len(want.finals), err
	})

	ids := termAll(ins)
	p.checkTransactions(ctx, ids...)
	if finals, err = readCommitted(ctx, p.brokers, p.sink); err != nil {
		t.Fatal(err)
	}
	if d := diffFinals(want, finals, ev, 20); d != nil {
		t.Errorf("windowed finals in %s differ from the oracle (%d expected, %d read):\n%s", p.sink, len(want.finals), len(finals), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d finals exactly once", len(finals))
	}
	dlq, err := readCommitted(ctx, p.brokers, p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffLate(want, dlq, p.topic, 20); d != nil {
		t.Errorf("dead letters in %s-dlq differ from the oracle's late records (%d expected, %d read):\n%s", p.group, len(want.late), len(dlq), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d late records in the dead-letter topic exactly once", len(dlq))
	}
	t.Logf("scenario took %v", time.Since(began).Round(time.Millisecond))
}

// windowedPipeline is workload.Pipeline with event time: the source's watermark and a
// windowed aggregate with o's window and emit mode. Its finals hold key, window_start,
// window_end, amount and orders.
func windowedPipeline(topic, sink string, o pipelineOpts) string {
	wm := o.watermark
	if wm == "" {
		wm = "{}"
	}
	emit := o.emit
	if emit == "" {
		emit = "updates"
	}
	return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: %s}
operators:
  - name: %s
    aggregate:
      input: orders
      window: %s
      emit: %s
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: totals_out
sinks:
  totals_out: {topic: %s, format: json}
`, topic, wm, workload.PipelineOperator, o.window, emit, sink)
}

// eventTime is the windowing of the scenario, in ms: tumbling windows of window, aligned to
// the epoch, closing when the watermark reaches end + grace; watermark = largest ts - maxDelay.
type eventTime struct {
	window, grace, maxDelay int64
}

// windowStart returns the start of the tumbling window holding ts.
func (e eventTime) windowStart(ts int64) int64 {
	s := ts / e.window * e.window
	if ts%e.window != 0 && ts < 0 {
		s -= e.window
	}
	return s
}

// timedOrders generates orders whose event time follows their index in their partition: the
// i-th order of a partition has ts = start + i*step + jitter (jitter < winJitterMS; step 1ms
// unless set), except stragglers, set back by up to two windows plus grace and delay, and
// rushers, set ahead by up to half a window. Keys are workload keys
// ("c-0000042"), spread uniformly; the partition is the key's (workload.Partition). Not safe
// for concurrent use.
type timedOrders struct {
	rng   *rand.Rand
	ev    eventTime
	parts int32
	keys  [][][]byte // per partition, the keys that land on it
	all   [][]byte   // every key, by customer number
	next  []int64    // per partition, the index of its next order
	maxTS []int64    // per partition, the largest ts generated
	id    int64
	// step is how far event time advances per order of a partition, in ms (newTimedOrders: 1);
	// set it before the first order to spread the orders over more windows.
	step int64

	produced, stragglers, rushers int
}

func newTimedOrders(seed uint64, keys int, parts int32, ev eventTime) *timedOrders {
	g := &timedOrders{
		rng:   rand.New(rand.NewPCG(seed, 0x71_3ed)),
		ev:    ev,
		parts: parts,
		keys:  make([][][]byte, parts),
		next:  make([]int64, parts),
		maxTS: make([]int64, parts),
		step:  1,
	}
	spec := workload.Spec{Keys: keys, Partitions: parts}
	for n := range keys {
		k := spec.Key(n)
		part := workload.Partition(k, parts)
		g.keys[part] = append(g.keys[part], k)
		g.all = append(g.all, k)
	}
	for i := range g.maxTS {
		g.maxTS[i] = math.MinInt64
	}
	return g
}

// orders returns the next n orders, each with its partition set.
func (g *timedOrders) orders(n int) []*kgo.Record {
	out := make([]*kgo.Record, 0, n)
	for range n {
		key := g.all[g.rng.IntN(len(g.all))]
		part := workload.Partition(key, g.parts)
		ts := workload.DefaultStartTS + g.next[part]*g.step + g.rng.Int64N(winJitterMS)
		g.next[part]++
		switch r := g.rng.Float64(); {
		case r < winStragglers:
			ts -= g.rng.Int64N(2*g.ev.window + g.ev.grace + g.ev.maxDelay)
			g.stragglers++
		case r < winStragglers+winRushersPerWindow*float64(g.step)/float64(g.ev.window):
			ts += g.rng.Int64N(g.ev.window / 2)
			g.rushers++
		}
		out = append(out, g.order(part, key, ts))
	}
	return out
}

// rushing returns one rusher per partition, a quarter to three quarters of a window ahead of
// the partition's next order.
func (g *timedOrders) rushing() []*kgo.Record {
	out := make([]*kgo.Record, 0, g.parts)
	for part := range g.parts {
		ts := workload.DefaultStartTS + g.next[part]*g.step + g.ev.window/4 + g.rng.Int64N(g.ev.window/2)
		g.next[part]++
		g.rushers++
		out = append(out, g.order(part, g.keys[part][g.rng.IntN(len(g.keys[part]))], ts))
	}
	return out
}

// closing returns one order per partition whose watermark closes every window before it: ts
// = the end of the partition's last window + grace + max_delay.
func (g *timedOrders) closing() []*kgo.Record {
	out := make([]*kgo.Record, 0, g.parts)
	for part := range g.parts {
		end := g.ev.windowStart(g.maxTS[part]) + g.ev.window
		out = append(out, g.order(part, g.keys[part][0], end+g.ev.grace+g.ev.maxDelay))
	}
	return out
}

func (g *timedOrders) order(part int32, key []byte, ts int64) *kgo.Record {
	g.id++
	g.produced++
	g.maxTS[part] = max(g.maxTS[part], ts)
	cents := workload.MinCents + g.rng.Int64N(workload.MaxCents-workload.MinCents+1)
	v := fmt.Appendf(nil, `{"order_id":"w-%012d","customer_id":%q,"amount":%d.%02d,"ts":%d}`, g.id, key, cents/100, cents%100, ts)
	return &kgo.Record{Key: key, Value: v, Partition: part, Timestamp: time.UnixMilli(ts)}
}

// produceRecords writes recs to topic through cl (which must keep each record's partition, as
// kgo.ManualPartitioner does) and returns once all are acknowledged, or with the first error.
func produceRecords(ctx context.Context, cl *kgo.Client, topic string, recs []*kgo.Record) error {
	errc := make(chan error, 1)
	for _, r := range recs {
		r.Topic = topic
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- fmt.Errorf("producing to %s[%d]: %w", topic, r.Partition, err):
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flushing %s: %w", topic, err)
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// producePaced produces recs in slices, pausing between them: live traffic, spread over
// (n-1) pauses. A partition's records keep their order.
func producePaced(ctx context.Context, cl *kgo.Client, topic string, recs []*kgo.Record, n int, pause time.Duration) error {
	per := (len(recs) + n - 1) / n
	for i := 0; i < len(recs); i += per {
		if i > 0 {
			select {
			case <-time.After(pause): // the traffic's pace, not a wait for a condition
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := produceRecords(ctx, cl, topic, recs[i:min(i+per, len(recs))]); err != nil {
			return err
		}
	}
	return nil
}

// readCommitted returns every record of topic, read_committed, from the start of each partition
// to its end, taken once no transaction is open on it (last stable offset = high watermark):
// in offset order per partition, control records left out. A topic that does not exist reads
// as empty.
func readCommitted(ctx context.Context, brokers, topic string) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(kafkatest.SplitBrokers(brokers)...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the offset of a trailing commit marker ends a partition
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(16<<20),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var ends map[int32]int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ends == nil {
		hwm, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwm.Error()
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
		}
		if _, ok := hwm[topic]; !ok {
			return nil, nil
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
		}
		settled := map[int32]int64{}
		for part, h := range hwm[topic] {
			if l, ok := lso.Lookup(topic, part); ok && l.Offset == h.Offset {
				settled[part] = h.Offset
			}
		}
		if len(settled) == len(hwm[topic]) {
			ends = settled
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s keeps a transaction open: %w", topic, ctx.Err())
		case <-tick.C:
		}
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	assign := map[int32]kgo.Offset{}
	for part, end := range ends {
		if s, ok := starts.Lookup(topic, part); !ok || end > s.Offset {
			assign[part] = kgo.NewOffset().AtStart()
		} else {
			delete(ends, part)
		}
	}
	if len(ends) == 0 {
		return nil, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign})
	var out []*kgo.Record
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w (%d partitions not at their end)", topic, err, len(ends))
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	slices.SortStableFunc(out, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out, nil
}

// winKey is a (key, window) of the windowed aggregate.
type winKey struct {
	key   string
	start int64
}

// srcPos is an input record's partition and offset.
type srcPos struct {
	part   int32
	offset int64
}

// windowed is what the windowed aggregate must produce from an input.
type windowed struct {
	finals map[winKey]workload.Total // closed windows: exactly one final each
	late   map[srcPos]bool           // late records: exactly one dead letter each
	open   int                       // (key, window)s with records but not closed by the end
	wms    map[int32]int64           // each partition's watermark after its last record
	// members are the input records each (key, window) folds, in offset order: they name the
	// records a wrong final leaves out (unaccounted).
	members map[winKey][]member
}

// member is an input record the oracle folds into a (key, window), and its amount.
type member struct {
	at    srcPos
	cents int64
}

// windowOracle computes the finals and late records of input (every record of the input topic,
// in offset order per partition) by sluice's rule: per partition, in offset order, the
// watermark is the largest ts seen so far, the record's own included, minus max_delay; a record
// is late when the watermark has reached its window's end + grace; a window is final when the
// partition's last watermark has reached its end + grace.
func windowOracle(input []*kgo.Record, ev eventTime) (windowed, error) {
	out := windowed{finals: map[winKey]workload.Total{}, late: map[srcPos]bool{}, wms: map[int32]int64{}, members: map[winKey][]member{}}
	sums := map[int32]map[winKey]workload.Total{}
	wms := out.wms
	var parser fastjson.Parser
	for _, r := range input {
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			return out, fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		key := string(v.GetStringBytes("customer_id"))
		amount := v.Get("amount")
		if key == "" || amount == nil || v.Get("ts") == nil {
			return out, fmt.Errorf("input %d@%d: not an order: %s", r.Partition, r.Offset, r.Value)
		}
		cents, err := workload.ParseCents(amount.MarshalTo(nil))
		if err != nil {
			return out, fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		ts := v.GetInt64("ts")
		wm, seen := wms[r.Partition]
		if !seen || ts-ev.maxDelay > wm {
			wm = ts - ev.maxDelay
			wms[r.Partition] = wm
		}
		start := ev.windowStart(ts)
		if wm >= start+ev.window+ev.grace {
			out.late[srcPos{r.Partition, r.Offset}] = true
			continue
		}
		if sums[r.Partition] == nil {
			sums[r.Partition] = map[winKey]workload.Total{}
		}
		k := winKey{key, start}
		tot := sums[r.Partition][k]
		tot.SumCents += cents
		tot.Count++
		sums[r.Partition][k] = tot
		out.members[k] = append(out.members[k], member{srcPos{r.Partition, r.Offset}, cents})
	}
	for part, ws := range sums {
		for k, tot := range ws {
			if wms[part] >= k.start+ev.window+ev.grace {
				out.finals[k] = tot
			} else {
				out.open++
			}
		}
	}
	return out, nil
}

// diffFinals compares the finals read from the sink with the oracle: every (key, window) once,
// with the exact sum and count, Kafka key = the value's key, and window bounds of the window
// size. It returns at most limit differences (nil when there are none).
func diffFinals(want windowed, finals []*kgo.Record, ev eventTime, limit int) []string {
	var (
		out    []string
		more   int
		parser fastjson.Parser
	)
	add := func(format string, args ...any) {
		if len(out) < limit {
			out = append(out, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	seen := map[winKey]srcPos{}
	for _, r := range finals {
		at := srcPos{r.Partition, r.Offset}
		k, got, _, bad, ok := decodeFinal(&parser, r, ev)
		if bad != "" {
			add("%s", bad)
		}
		if !ok {
			continue
		}
		key, start := k.key, k.start
		if first, dup := seen[k]; dup {
			add("%s window %d: duplicate final at %d@%d (first at %d@%d): %s", key, start, at.part, at.offset, first.part, first.offset, got)
			continue
		}
		seen[k] = at
		w, ok := want.finals[k]
		switch {
		case !ok:
			add("%s window %d: unexpected final %s at %d@%d", key, start, got, at.part, at.offset)
		case got != w:
			add("%s window %d: final %s at %d@%d, want %s", key, start, got, at.part, at.offset, w)
		}
	}
	missing := make([]winKey, 0)
	for k := range want.finals {
		if _, ok := seen[k]; !ok {
			missing = append(missing, k)
		}
	}
	slices.SortFunc(missing, func(a, b winKey) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return int(a.start - b.start)
	})
	for _, k := range missing {
		add("%s window %d: missing final, want %s", k.key, k.start, want.finals[k])
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more differences", more))
	}
	return out
}

// decodeFinal reads the final r of a window of ev: its (key, window start), its total and its
// window's end. bad says what is wrong with it: a value that does not parse or lacks a field
// (then ok is false), or a key or bounds that do not match the record's key and ev's window.
func decodeFinal(parser *fastjson.Parser, r *kgo.Record, ev eventTime) (k winKey, got workload.Total, end int64, bad string, ok bool) {
	v, err := parser.ParseBytes(r.Value)
	if err != nil {
		return k, got, 0, fmt.Sprintf("final at %d@%d: %v: %q", r.Partition, r.Offset, err, r.Value), false
	}
	amount, orders := v.Get("amount"), v.Get("orders")
	if amount == nil || orders == nil || v.Get("window_start") == nil || v.Get("window_end") == nil {
		return k, got, 0, fmt.Sprintf("final at %d@%d lacks a field: %s", r.Partition, r.Offset, r.Value), false
	}
	cents, err := workload.ParseCents(amount.MarshalTo(nil))
	if err != nil {
		return k, got, 0, fmt.Sprintf("final at %d@%d: %v", r.Partition, r.Offset, err), false
	}
	k = winKey{string(v.GetStringBytes("key")), v.GetInt64("window_start")}
	end = v.GetInt64("window_end")
	if k.key != string(r.Key) || end-k.start != ev.window || ev.windowStart(k.start) != k.start {
		bad = fmt.Sprintf("final at %d@%d: Kafka key %q, value %s", r.Partition, r.Offset, r.Key, r.Value)
	}
	return k, workload.Total{SumCents: cents, Count: orders.GetInt64()}, end, bad, true
}

// deadLetterSource returns a dead letter's headers by key and the input record its source
// headers name (ok is false when they do not parse).
func deadLetterSource(r *kgo.Record) (h map[string]string, at srcPos, ok bool) {
	h = make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	part, err1 := strconv.ParseInt(h["sluice.source.partition"], 10, 32)
	off, err2 := strconv.ParseInt(h["sluice.source.offset"], 10, 64)
	return h, srcPos{int32(part), off}, err1 == nil && err2 == nil
}

// diffLate compares the dead letters with the oracle's late records: each once, with
// sluice.error "late" and source headers naming an input record the oracle found late. It
// returns at most limit differences (nil when there are none).
func diffLate(want windowed, dlq []*kgo.Record, input string, limit int) []string {
	var (
		out  []string
		more int
	)
	add := func(format string, args ...any) {
		if len(out) < limit {
			out = append(out, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	seen := map[srcPos]bool{}
	for _, r := range dlq {
		h, at, ok := deadLetterSource(r)
		if h["sluice.error"] != "late" || h["sluice.source.topic"] != input || !ok {
			add("dead letter at %d@%d is not a late record of %s: headers %v, value %s", r.Partition, r.Offset, input, h, r.Value)
			continue
		}
		switch {
		case seen[at]:
			add("input %d@%d: dead letter again at %d@%d", at.part, at.offset, r.Partition, r.Offset)
		case !want.late[at]:
			add("input %d@%d: dead letter (watermark %s) for a record that is not late: %s", at.part, at.offset, h["sluice.watermark"], r.Value)
		}
		seen[at] = true
	}
	var missing []srcPos
	for at := range want.late {
		if !seen[at] {
			missing = append(missing, at)
		}
	}
	slices.SortFunc(missing, func(a, b srcPos) int {
		if a.part != b.part {
			return int(a.part - b.part)
		}
		return int(a.offset - b.offset)
	})
	for _, at := range missing {
		add("input %d@%d: late, but no dead letter", at.part, at.offset)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more differences", more))
	}
	return out
}

// scenarioSeed is the random seed of an event-time scenario (SLUICE_E2E_SEED replays its data;
// the kill moments depend on timing all the same) and its generator.
func scenarioSeed(t *testing.T) (int64, *rand.Rand) {
	seed := testSeed(t)
	return seed, rand.New(rand.NewPCG(uint64(seed), 7))
}

// seeds holds each test's random seed (by test name): every random choice of a test derives
// from one seed, which its log names.
var seeds sync.Map

// testSeed returns t's random seed: SLUICE_E2E_SEED if set, else the clock's, chosen once per
// test and logged.
func testSeed(t *testing.T) int64 {
	if v, ok := seeds.Load(t.Name()); ok {
		return v.(int64)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv(envWindowsSeed); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s: %v", envWindowsSeed, err)
		}
	}
	seeds.Store(t.Name(), seed)
	t.Logf("random seed %d (set %s=%d to replay its data and choices)", seed, envWindowsSeed, seed)
	return seed
}

// runKills is the kill -9 choreography of the event-time scenarios (windows, sessions) over p:
// it produces first orders of gen and a rusher per partition, runs one instance and kills it
// while it sorts the backlog, right after a switch to real-time and at a random moment, then runs
// three with the second orders produced in slices and kills one at random moments while they
// arrive and after, produces closing(), and waits until every input offset is committed. It
// returns the three instances, still running.
func runKills(ctx context.Context, t *testing.T, p *pipeline, rng *rand.Rand, gen *timedOrders, first, second int, closing func() []*kgo.Record) []*instance {
	t.Helper()
	prod := kafkatest.Client(t, p.brokers, append(workload.ProducerOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	// The backlog ends with a rusher per partition: the watermark the instances of phase 1
	// commit and restore is ahead of the first orders of phase 2.
	if err := produceRecords(ctx, prod, p.topic, append(gen.orders(first), gen.rushing()...)); err != nil {
		t.Fatal(err)
	}
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true), p.newInstance("i2", true)}
	k := &killer{ctx: ctx, t: t, rng: rng}
	killRestart, randomMoment := k.killRestart, k.randomMoment

	// Phase 1: one instance, a backlog per partition above enter_lag: tasks start in backlog.
	i0 := ins[0]
	i0.start()
	killRestart(i0, k.inBacklog(i0))
	// The restarted i0 sorts the backlog again (nothing was committed, unless a task had
	// switched): kill it as soon as a task of this run leaves backlog mode, which is right
	// after its switch's transaction (the finals of every window the backlog closed)
	// committed. If no backlog is left (every task had switched and committed before), kill it
	// in real-time mode. (A task that has not seen its first batch shows as real-time too.)
	run := i0.runs
	sorted := map[int32]bool{} // partitions /status showed in backlog mode during this run
	adm := p.admin()
	progress := map[int32]*partProgress{}
	how := ""
	poll(ctx, t, "the restarted i0 to switch a task to real-time mode", 10*time.Millisecond, func() (bool, error) {
		i0.checkAlive()
		if n := len(i0.logLines(run, "switch to real-time mode")); n > 0 {
			how = fmt.Sprintf("right after a switch to real-time (%d logged)", n)
			return true, nil
		}
		st, ok := i0.status(ctx)
		if !ok {
			return false, nil
		}
		streaming := 0
		for _, tk := range st.Tasks {
			for _, c := range tk.Chains {
				if c.Topic != p.topic {
					// A chain reading an internal topic (an operator over a keyed operator's
					// results) has modes of its own: the switch is the input's.
					continue
				}
				switch c.Mode {
				case "backlog":
					sorted[tk.Partition] = true
				case "real-time":
					if sorted[tk.Partition] {
						how = fmt.Sprintf("right at the switch of partition %d to real-time", tk.Partition)
						return true, nil
					}
					streaming++
				}
			}
		}
		if streaming == winParts {
			// Errors are transient here (the group may be rebalancing): poll on.
			if done, _, _, err := p.caughtUp(ctx, adm, progress); err == nil && done {
				how = "in real-time mode: no backlog was left to switch"
				return true, nil
			}
		}
		return false, nil
	})
	killRestart(i0, how)
	randomMoment()
	killRestart(i0, "random moment, phase 1")

	// Phase 2: three instances and live traffic, produced in slices over a few seconds so that
	// the kills land in real-time mode while orders arrive.
	ins[1].start()
	ins[2].start()
	more := gen.orders(second)
	produced := make(chan error, 1)
	var producing atomic.Bool
	producing.Store(true)
	go func() {
		err := producePaced(ctx, prod, p.topic, more, 20, 250*time.Millisecond)
		producing.Store(false)
		produced <- err
	}()
	for range 3 {
		randomMoment()
		why := "random moment, phase 2, while producing"
		if !producing.Load() {
			why = "random moment, phase 2, production done"
		}
		killRestart(ins[rng.IntN(len(ins))], why)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	randomMoment()
	killRestart(ins[rng.IntN(len(ins))], "random moment, after producing")
	// One last order per partition past the end of its last window (plus grace and delay): its
	// watermark closes every window but the last order's own.
	if err := produceRecords(ctx, prod, p.topic, closing()); err != nil {
		t.Fatal(err)
	}

	// No nudge records: every partition's last order must be committed by itself.
	start := time.Now()
	p.waitCommitted(ctx, 120*time.Second, false, ins...)
	t.Logf("caught up %v after the last kill; %d kills in total", time.Since(start).Round(time.Millisecond), k.kills)
	var toBacklog, startBacklog, toRealTime int
	for _, in := range ins {
		toBacklog += len(in.logLines(0, "switch to backlog mode"))
		startBacklog += len(in.logLines(0, "task starts in backlog mode"))
		toRealTime += len(in.logLines(0, "switch to real-time mode"))
	}
	t.Logf("mode switches logged: %d tasks started in backlog, %d switches to backlog, %d to real-time", startBacklog, toBacklog, toRealTime)
	if toRealTime == 0 {
		t.Errorf("no instance logged \"switch to real-time mode\": the backlog path was not exercised")
	}
	return ins
}

// killer kills instances with SIGKILL and restarts them, counting, at the moments a kill -9
// scenario chooses.
type killer struct {
	ctx   context.Context
	t     *testing.T
	rng   *rand.Rand
	kills int
}

// killRestart kills in with SIGKILL, logs why, and starts it again.
func (k *killer) killRestart(in *instance, why string) {
	k.t.Helper()
	in.kill()
	k.kills++
	k.t.Logf("kill -9 #%d: %s (%s)", k.kills, in.id, why)
	in.start()
}

// randomMoment waits a random 300ms–2.3s: the kill lands wherever the instances are by then.
// It is the scenario's randomness, not a wait for a condition.
func (k *killer) randomMoment() {
	select {
	case <-time.After(300*time.Millisecond + time.Duration(k.rng.Int64N(int64(2*time.Second)))):
	case <-k.ctx.Done():
		k.t.Fatal(k.ctx.Err())
	}
}

// inBacklog waits until in, just started over a backlog per partition above enter_lag, shows a
// task sorting in backlog mode on /status, so that a kill now loses that backlog; a small backlog
// can be sorted and switched between two polls, and then the kill lands just after the switch.
// It returns which of the two happened.
func (k *killer) inBacklog(in *instance) string {
	k.t.Helper()
	how := "while in backlog"
	poll(k.ctx, k.t, in.id+" to report a task in backlog mode on /status (or to have switched already)", 20*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		if st, ok := in.status(k.ctx); ok && st.backlogTasks() > 0 {
			return true, nil
		}
		if len(in.logLines(0, "switch to real-time mode")) > 0 {
			how = "just after a switch from backlog"
			return true, nil
		}
		return false, nil
	})
	return how
}
