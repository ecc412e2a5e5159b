package e2e

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestRollupFake is the kill -9 scenario of a rollup, event-time windows over the results of a
// windowed keyed operator, against an in-process kfake cluster: per_second sums the timed orders
// (some of them late) per customer and second (tumbling 1s, grace, emit: final) and writes its
// finals to its internal output topic; rollup sums those per customer and 10 seconds (tumbling
// 10s, emit: final) into the sink, its watermark the smallest of per_second's announced ones.
// One then three instances, SIGKILLs while tasks sort their backlog, right at a switch to
// real-time and at random moments while more orders arrive (runKills). Every rollup window the
// first stage's watermarks closed must be read exactly once with the exact sum and count (the
// sum of per_second's finals in it), no other, every record late at per_second must be in the
// dead-letter topic exactly once, and rollup must have none.
func TestRollupFake(t *testing.T) {
	rollupScenario(t, kafkatest.Fake(t, 8), rollupSize{first: 40_000, second: 20_000, keys: 1_000, enterLag: 2000, exitLag: 200,
		stepMS: 10})
}

// TestRollupKill9 is TestRollupFake against the real broker, larger: 300k orders over 5k keys,
// about 150 seconds of event time per partition.
func TestRollupKill9(t *testing.T) {
	rollupScenario(t, kafkatest.Brokers(t), rollupSize{first: 200_000, second: 100_000, keys: 5_000, enterLag: 5000, exitLag: 500,
		stepMS: 4})
}

// rollupSize sizes one rollup scenario.
type rollupSize struct {
	first, second     int // orders before the first start, and while instances run
	keys              int
	enterLag, exitLag int64
	// stepMS is how far event time advances per order of a partition (timedOrders.step): with
	// n orders, a partition spans n/winParts*stepMS ms, which must hold several rollup windows.
	stepMS int64
}

// The windows of the rollup scenario, in ms. per_second's grace and its source's max_delay are
// the windows scenario's (winGraceMS, winDelayMS); rollup has no grace.
const (
	rollupFirstMS  = 1000   // per_second's tumbling window
	rollupWindowMS = 10_000 // rollup's tumbling window, a multiple of per_second's
)

func rollupScenario(t *testing.T, brokers string, size rollupSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	began := time.Now()
	seed, rng := scenarioSeed(t)
	ev := eventTime{window: rollupFirstMS, grace: winGraceMS, maxDelay: winDelayMS}
	// The rollup's windowing: its watermark is not max_delay behind an event time but the
	// smallest of its writers' announcements, so maxDelay does not apply.
	up := eventTime{window: rollupWindowMS}

	p := configuredPipeline(t, brokers, winParts, "rollup", "commit_interval: 100ms",
		fmt.Sprintf("enter_lag: %d, exit_lag: %d, checkpoint_interval: 0s", size.enterLag, size.exitLag),
		func(p *pipeline) string { return rollupPipeline(p.topic, p.sink, ev, up) })
	p.keys = workload.Spec{Keys: size.keys, Partitions: winParts}
	internal := p.group + "-per_second-output"
	gen := newTimedOrders(uint64(seed), size.keys, winParts, ev)
	gen.step = size.stepMS
	// The last orders (rollupClosing) close every per_second window but one per partition and
	// put rollup's last watermark exactly on the end of a rollup window.
	ins := runKills(ctx, t, p, rng, gen, size.first, size.second, func() []*kgo.Record { return rollupClosing(gen, up) })

	input, err := readCommitted(ctx, p.brokers, p.topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(input) != gen.produced {
		t.Fatalf("input holds %d records, want the %d produced", len(input), gen.produced)
	}
	first, err := windowOracle(input, ev)
	if err != nil {
		t.Fatal(err)
	}
	want, err := rollupOracle(first, ev, up)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRollupOracle(input, first, want, up); err != nil {
		t.Fatalf("the oracle contradicts itself: %v", err)
	}
	t.Logf("oracle: %d orders, %d per_second finals, %d late (%d stragglers and %d rushers produced), %d windows left open; "+
		"rollup horizon %s: %d rollup finals over %d windows, rolled up from %d per_second finals, %d per_second finals held in open rollup windows",
		len(input), len(first.finals), len(first.late), gen.stragglers, gen.rushers, first.open,
		time.UnixMilli(want.horizon).UTC().Format(time.StampMilli), len(want.finals), want.windows, want.rolled, want.held)
	if len(first.late) == 0 || first.open != winParts || want.windows < 3 || want.held < winParts-1 || want.horizon%up.window != 0 {
		t.Fatalf("the workload must have late records, exactly one open per_second window per partition (the last order's), "+
			"at least 3 closed rollup windows, per_second finals in rollup windows past the horizon (one per partition but one at least), "+
			"and the horizon on a rollup window's end: %d late, %d open, %d rollup windows, %d held, horizon %d",
			len(first.late), first.open, want.windows, want.held, want.horizon)
	}

	// The input is committed, and with it per_second's finals and announcements; rollup reads
	// them and commits its finals after. Wait until a read_committed reader sees as many as
	// expected (or more: the diff reports duplicates and strays), but no longer than a minute:
	// then the diff says which are missing.
	var finals []*kgo.Record
	waitFrom := time.Now()
	deadline := waitFrom.Add(60 * time.Second)
	pollf(ctx, t, func() string {
		return fmt.Sprintf("%d rollup finals in %s (read_committed), have %d", len(want.finals), p.sink, len(finals))
	}, 200*time.Millisecond, func() (bool, error) {
		for _, in := range ins {
			in.checkAlive()
		}
		finals, err = readCommitted(ctx, p.brokers, p.sink)
		return len(finals) >= len(want.finals) || time.Now().After(deadline), err
	})
	if len(finals) < len(want.finals) {
		t.Errorf("only %d of %d rollup finals in %s after %v", len(finals), len(want.finals), p.sink, time.Since(waitFrom).Round(time.Millisecond))
	} else {
		t.Logf("rollup finals all read %v after the oracle was computed", time.Since(waitFrom).Round(time.Millisecond))
	}

	ids := make([]string, len(ins))
	for i, in := range ins {
		in.term()
		ids[i] = in.id
	}
	p.checkTransactions(ctx, ids...)
	if finals, err = readCommitted(ctx, p.brokers, p.sink); err != nil {
		t.Fatal(err)
	}
	if d := diffFinals(windowed{finals: want.finals}, finals, up, 20); d != nil {
		t.Errorf("rollup finals in %s differ from the oracle (%d expected, in windows ending at or before the horizon %d; %d read):\n%s",
			p.sink, len(want.finals), want.horizon, len(finals), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d rollup finals exactly once, none past the horizon", len(finals))
	}

	// What the purge left of the internal topic: per_second's finals and announcements.
	recs, err := readCommitted(ctx, p.brokers, internal)
	if err != nil {
		t.Fatal(err)
	}
	fig, d := diffInternal(first, recs, ev, 20)
	t.Logf("%s holds %d records (read_committed; the rest purged): %d per_second finals, %d watermark announcements (the highest per writer %v), %d other attribute records",
		internal, len(recs), fig.finals, fig.watermarks, fig.highest, fig.modes)
	if d != nil {
		t.Errorf("records in %s break per_second's output contract:\n%s", internal, strings.Join(d, "\n"))
	}

	dlq, err := readCommitted(ctx, p.brokers, p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	fromRollup := 0
	for _, r := range dlq {
		for _, h := range r.Headers {
			if h.Key == "sluice.source.topic" && string(h.Value) == internal {
				fromRollup++
			}
		}
	}
	if fromRollup > 0 {
		t.Errorf("rollup wrote %d dead letters (a per_second final late at rollup): there must be none", fromRollup)
	}
	if d := diffLate(first, dlq, p.topic, 20); d != nil {
		t.Errorf("dead letters in %s-dlq differ from the oracle's late records (%d expected, %d read):\n%s", p.group, len(first.late), len(dlq), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d late records in the dead-letter topic exactly once, none from rollup", len(dlq))
	}
	t.Logf("scenario took %v", time.Since(began).Round(time.Millisecond))
}

// rollupClosing returns the last orders of the rollup scenario, which close every per_second
// window of g's orders so far but one per partition, and make rollup's last watermark (the
// horizon, see rolledUp) the end of a rollup window (windowing up), so that the window ending
// exactly there must close, and the one after it stay open with per_second finals in it. Let
// end(p) be the end of the per_second window of partition p's largest event time, m the
// partition of the smallest end, and H end(m) rounded up to a rollup window's end. Partition m
// gets one closing order at H + grace + max_delay: its watermark reaches H + grace, so
// per_second closes every window of m ending at or before H, and m announces H. Every other
// partition p gets an order half a window after max(end(p), H), then a closing order at the end
// of that order's window + grace + max_delay: it announces that end, past H, and the order's
// final lies in a rollup window past the horizon. The horizon is H, the smallest announcement.
func rollupClosing(g *timedOrders, up eventTime) []*kgo.Record {
	ev := g.ev
	ends := make([]int64, g.parts)
	m := int32(0)
	for part := range g.parts {
		ends[part] = ev.windowStart(g.maxTS[part]) + ev.window
		if ends[part] < ends[m] {
			m = part
		}
	}
	horizon := up.windowStart(ends[m]-1) + up.window
	out := make([]*kgo.Record, 0, 2*g.parts)
	for part := range g.parts {
		end := horizon
		if part != m {
			ts := max(ends[part], horizon) + ev.window/2
			out = append(out, g.order(part, g.keys[part][len(g.keys[part])-1], ts))
			end = ev.windowStart(ts) + ev.window
		}
		out = append(out, g.order(part, g.keys[part][0], end+ev.grace+ev.maxDelay))
	}
	return out
}

// rollupPipeline is the two windowed aggregates of the rollup scenario: per_second over the
// orders (windowing ev), whose results rollup reads by name through its internal output topic
// (windowing up, no grace), rollup's finals going to sink.
func rollupPipeline(topic, sink string, ev, up eventTime) string {
	return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: per_second
    aggregate:
      input: orders
      window: {tumbling: %dms, grace: %dms}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
  - name: rollup
    aggregate:
      input: per_second
      window: {tumbling: %dms}
      emit: final
      fields: {amount: {sum: amount}, orders: {sum: orders}}
    output: out
sinks:
  out: {topic: %s, format: json}
`, topic, ev.maxDelay, ev.window, ev.grace, up.window, sink)
}

// rolledUp is what rollup must produce.
//
// Its watermark is the smallest of its writers' latest announcements, a writer being a task of
// per_second (an input partition) and its announcement its watermark minus grace, made once
// every window that watermark closed is out. At the end each partition's watermark is its last
// (the oracle's wms, the closing order's), so rollup's last watermark, the horizon, is the
// smallest over the partitions of that watermark minus per_second's grace; a rollup window
// closes, and its final is emitted, once the horizon reaches its end (plus rollup's grace, 0).
// Every per_second window inside such a rollup window ends at or before the horizon, hence at or
// before its own partition's watermark minus grace: it is closed, its final (if it had records
// that were not late) among the oracle's. So the final of each (key, closed rollup window) is
// exactly the sum of the oracle's per_second finals of that key inside it, which is also the
// sum of the orders of that key and window that were not late at per_second
// (checkRollupOracle). A rollup window ending after the horizon is still open: its per_second
// finals that are out (from partitions whose watermark is further) are held, and it must have
// no final.
type rolledUp struct {
	horizon int64                     // rollup's last watermark
	finals  map[winKey]workload.Total // (key, rollup window)s ending at or before the horizon: one final each
	windows int                       // distinct rollup windows among finals
	rolled  int                       // per_second finals summed into finals
	held    int                       // per_second finals in rollup windows past the horizon
}

// rollupOracle computes what rollup (windowing up) must produce from per_second's oracle first
// (windowing ev): see rolledUp.
func rollupOracle(first windowed, ev, up eventTime) (rolledUp, error) {
	out := rolledUp{horizon: math.MaxInt64, finals: map[winKey]workload.Total{}}
	if up.window%ev.window != 0 {
		return out, fmt.Errorf("the rollup window %dms is not a multiple of the first stage's %dms", up.window, ev.window)
	}
	if len(first.wms) != winParts {
		return out, fmt.Errorf("the input has records in %d partitions, want %d: every writer must announce", len(first.wms), winParts)
	}
	for _, wm := range first.wms {
		out.horizon = min(out.horizon, wm-ev.grace)
	}
	starts := map[int64]bool{}
	for k, tot := range first.finals {
		start := up.windowStart(k.start)
		if start+up.window+up.grace > out.horizon {
			out.held++
			continue
		}
		rk := winKey{k.key, start}
		sum := out.finals[rk]
		sum.SumCents += tot.SumCents
		sum.Count += tot.Count
		out.finals[rk] = sum
		out.rolled++
		starts[start] = true
	}
	out.windows = len(starts)
	return out, nil
}

// checkRollupOracle computes the rollup finals a second way, the direct aggregation per (key,
// rollup window) of the orders of input that per_second did not find late, in rollup windows
// ending at or before the horizon, and reports where it differs from want.
func checkRollupOracle(input []*kgo.Record, first windowed, want rolledUp, up eventTime) error {
	direct := map[winKey]workload.Total{}
	var parser fastjson.Parser
	for _, r := range input {
		if first.late[srcPos{r.Partition, r.Offset}] {
			continue
		}
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			return fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		start := up.windowStart(v.GetInt64("ts"))
		if start+up.window+up.grace > want.horizon {
			continue
		}
		cents, err := workload.ParseCents(v.Get("amount").MarshalTo(nil))
		if err != nil {
			return fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		k := winKey{string(v.GetStringBytes("customer_id")), start}
		tot := direct[k]
		tot.SumCents += cents
		tot.Count++
		direct[k] = tot
	}
	if d := workload.Diff(totalsByName(want.finals), totalsByName(direct), 5); d != nil {
		return fmt.Errorf("the rollup of per_second's finals (want) and the direct aggregation (got) differ:\n%s", strings.Join(d, "\n"))
	}
	return nil
}

// totalsByName keys totals by "key@window_start", for workload.Diff.
func totalsByName(m map[winKey]workload.Total) map[string]workload.Total {
	out := make(map[string]workload.Total, len(m))
	for k, tot := range m {
		out[k.key+"@"+strconv.FormatInt(k.start, 10)] = tot
	}
	return out
}

// internalFigures counts the records of per_second's output topic.
type internalFigures struct {
	finals, watermarks, modes int
	highest                   map[int]int64 // per writer, its highest watermark announced
}

// diffInternal checks the records of per_second's output topic still there after the purge
// (read_committed, in offset order per partition) against per_second's oracle first (windowing
// ev) and its output contract: a final (key, window) at most once, exact, written at its
// window's end - 1 with the Kafka key = the value's key; an announcement an attribute record (no
// key, no value) with headers sluice.watermark (epoch ms) and sluice.writer (the writer's input
// partition), never above that partition's last watermark minus grace; and, per partition of the
// topic, no final of a writer after that writer's announcement at or beyond the final's window
// end (the announcement says every window ending there is out). Purged records are not checked.
// It returns the figures and at most limit problems (nil when there are none).
func diffInternal(first windowed, recs []*kgo.Record, ev eventTime, limit int) (internalFigures, []string) {
	var (
		out    []string
		more   int
		parser fastjson.Parser
	)
	fig := internalFigures{highest: map[int]int64{}}
	add := func(format string, args ...any) {
		if len(out) < limit {
			out = append(out, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	type partWriter struct {
		part   int32
		writer int
	}
	said := map[partWriter]int64{} // the highest announcement of a writer so far in a partition
	seen := map[winKey]srcPos{}
	for _, r := range recs {
		at := srcPos{r.Partition, r.Offset}
		if r.Key == nil && r.Value == nil {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			wmText, isWM := h["sluice.watermark"]
			if !isWM {
				fig.modes++
				if _, ok := h["sluice.backlog"]; !ok {
					add("record at %d@%d without key and value is not an attribute record: headers %v", at.part, at.offset, h)
				}
				continue
			}
			fig.watermarks++
			wm, err1 := strconv.ParseInt(wmText, 10, 64)
			w, err2 := strconv.Atoi(h["sluice.writer"])
			last, ok := first.wms[int32(w)]
			if err1 != nil || err2 != nil || !ok {
				add("announcement at %d@%d: headers %v", at.part, at.offset, h)
				continue
			}
			if wm > last-ev.grace {
				add("announcement at %d@%d: writer %d says %d, above its last watermark %d minus grace", at.part, at.offset, w, wm, last)
			}
			if prev, ok := said[partWriter{r.Partition, w}]; !ok || wm > prev {
				said[partWriter{r.Partition, w}] = wm
			}
			if prev, ok := fig.highest[w]; !ok || wm > prev {
				fig.highest[w] = wm
			}
			continue
		}
		fig.finals++
		k, got, end, bad, ok := decodeFinal(&parser, r, ev)
		if bad != "" {
			add("%s", bad)
		}
		if !ok {
			continue
		}
		key, start := k.key, k.start
		if ts := r.Timestamp.UnixMilli(); ts != end-1 {
			add("final at %d@%d: timestamp %d, want its window's end - 1 = %d: %s", at.part, at.offset, ts, end-1, r.Value)
		}
		w := int(workload.Partition(r.Key, winParts))
		if wm, ok := said[partWriter{r.Partition, w}]; ok && end <= wm {
			add("final at %d@%d: window end %d, after writer %d announced watermark %d in this partition: %s", at.part, at.offset, end, w, wm, r.Value)
		}
		if prev, dup := seen[k]; dup {
			add("%s window %d: duplicate final at %d@%d (first at %d@%d): %s", key, start, at.part, at.offset, prev.part, prev.offset, got)
			continue
		}
		seen[k] = at
		switch want, ok := first.finals[k]; {
		case !ok:
			add("%s window %d: final %s at %d@%d of a window the oracle did not close", key, start, got, at.part, at.offset)
		case got != want:
			add("%s window %d: final %s at %d@%d, want %s", key, start, got, at.part, at.offset, want)
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more problems", more))
	}
	return fig, out
}
