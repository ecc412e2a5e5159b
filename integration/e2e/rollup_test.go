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
	rollupScenario(t, kafkatest.Fake(t, 8), perSecondFirst, rollupSize{first: 40_000, second: 20_000, keys: 1_000, enterLag: 2000, exitLag: 200,
		stepMS: 10})
}

// TestRollupKill9 is TestRollupFake against the real broker, larger: 300k orders over 5k keys,
// about 150 seconds of event time per partition.
func TestRollupKill9(t *testing.T) {
	rollupScenario(t, kafkatest.Brokers(t), perSecondFirst, rollupSize{first: 200_000, second: 100_000, keys: 5_000, enterLag: 5000, exitLag: 500,
		stepMS: 4})
}

// TestSessionRollupFake is TestRollupFake with session windows at the first stage (windows
// over session finals): sessions sums the timed orders per customer and session (gap 1s, grace
// 50ms, emit: final) and writes each session's final at its end - 1 (the last order's ts +
// gap - 1), announcing its watermark - grace; rollup sums those per customer and 10 seconds of
// that event time, orders being the sum of the sessions' counts. 60k orders over 400 keys, 50
// per partition and event time 10ms per order of a partition: a key's orders are about 500ms
// apart, half the gap, as in TestSessionUpdatesKill9, so that most orders join their key's
// session, some start one, and many sessions start in one rollup window and end in the next.
// Every rollup window the horizon closed must be read exactly once with the exact sum and
// count of the oracle's closed sessions ending in it (by end - 1), no other; every record late
// at sessions (its own session [ts, ts+gap) already closed) must be in the dead-letter topic
// exactly once, and rollup must have none.
func TestSessionRollupFake(t *testing.T) {
	rollupScenario(t, kafkatest.Fake(t, 8), sessionsFirst(1000), rollupSize{first: 40_000, second: 20_000, keys: 400, enterLag: 2000, exitLag: 200,
		stepMS: 10})
}

// TestSessionRollupKill9 is TestSessionRollupFake against the real broker, larger: 300k orders
// over 1k keys, 125 per partition and 4ms per order of a partition (a key's orders again about
// 500ms apart), about 150 seconds of event time per partition.
func TestSessionRollupKill9(t *testing.T) {
	rollupScenario(t, kafkatest.Brokers(t), sessionsFirst(1000), rollupSize{first: 200_000, second: 100_000, keys: 1_000, enterLag: 5000, exitLag: 500,
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
// the windows scenario's (winGraceMS, winDelayMS), sessions' the sessions scenario's
// (sessGraceMS, sessDelayMS); rollup has no grace.
const (
	rollupFirstMS  = 1000   // per_second's tumbling window
	rollupWindowMS = 10_000 // rollup's tumbling window, a multiple of per_second's
)

// rollupFirst is the first stage of the rollup scenario, whose finals rollup rolls up:
// per_second's tumbling windows of rollupFirstMS (gap 0), or the session windows of gap of
// sessions. Either writes each final at its window's end - 1 and announces its watermark
// minus grace.
type rollupFirst struct {
	gap int64 // the session gap, in ms; 0: tumbling windows
}

// perSecondFirst is the first stage of per_second's tumbling windows.
var perSecondFirst = rollupFirst{}

// sessionsFirst is the first stage of session windows of gap (ms).
func sessionsFirst(gap int64) rollupFirst { return rollupFirst{gap: gap} }

func (f rollupFirst) sessions() bool { return f.gap > 0 }

// name is the first stage's operator name.
func (f rollupFirst) name() string {
	if f.sessions() {
		return "sessions"
	}
	return "per_second"
}

// ev is the first stage's windowing for the generator (timedOrders) and per_second's oracle:
// per_second's window, grace and max_delay; for sessions, as in the sessions scenario, a
// "window" of two gaps, which scales the stragglers (set back by up to 4 gaps plus grace and
// delay: most are late, some extend a session backwards or bridge two) and the rushers (ahead
// by up to a gap).
func (f rollupFirst) ev() eventTime {
	if f.sessions() {
		return eventTime{window: 2 * f.gap, grace: sessGraceMS, maxDelay: sessDelayMS}
	}
	return eventTime{window: rollupFirstMS, grace: winGraceMS, maxDelay: winDelayMS}
}

// sw is the session windowing of sessions.
func (f rollupFirst) sw() sessionWindow {
	return sessionWindow{gap: f.gap, grace: sessGraceMS, maxDelay: sessDelayMS}
}

// what names the first stage's windows in messages.
func (f rollupFirst) what() string {
	if f.sessions() {
		return "sessions"
	}
	return "windows"
}

// window is the first stage's window in the pipeline's YAML.
func (f rollupFirst) window() string {
	ev := f.ev()
	if f.sessions() {
		return fmt.Sprintf("{session: %dms, grace: %dms}", f.gap, ev.grace)
	}
	return fmt.Sprintf("{tumbling: %dms, grace: %dms}", ev.window, ev.grace)
}

// end is the end of the window, or the session, that an order at ts opens alone: a window's
// end, or ts + gap. Every window or session of a partition ends at or before end(its largest
// event time).
func (f rollupFirst) end(ts int64) int64 {
	if f.sessions() {
		return ts + f.gap
	}
	ev := f.ev()
	return ev.windowStart(ts) + ev.window
}

// apart is how far after the end of every window or session of a partition an order opens one
// of its own, which no earlier one holds or merges with: half a window or half a gap.
func (f rollupFirst) apart() int64 {
	if f.sessions() {
		return f.gap / 2
	}
	return f.ev().window / 2
}

func rollupScenario(t *testing.T, brokers string, f rollupFirst, size rollupSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	began := time.Now()
	seed, rng := scenarioSeed(t)
	ev := f.ev()
	// The rollup's windowing: its watermark is not max_delay behind an event time but the
	// smallest of its writers' announcements, so maxDelay does not apply.
	up := eventTime{window: rollupWindowMS}

	p := configuredPipeline(t, brokers, winParts, "rollup", "commit_interval: 100ms",
		fmt.Sprintf("enter_lag: %d, exit_lag: %d, checkpoint_interval: 0s", size.enterLag, size.exitLag),
		func(p *pipeline) string { return rollupPipeline(p.topic, p.sink, f, up) })
	p.keys = workload.Spec{Keys: size.keys, Partitions: winParts}
	name := f.name()
	internal := p.group + "-" + name + "-output"
	gen := newTimedOrders(uint64(seed), size.keys, winParts, ev)
	gen.step = size.stepMS
	// The last orders (rollupClosing) close every window or session of the first stage but one
	// per partition and put rollup's last watermark exactly on the end of a rollup window.
	ins := runKills(ctx, t, p, rng, gen, size.first, size.second, func() []*kgo.Record { return rollupClosing(gen, f, up) })

	input, err := readCommitted(ctx, p.brokers, p.topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(input) != gen.produced {
		t.Fatalf("input holds %d records, want the %d produced", len(input), gen.produced)
	}
	first, err := f.oracle(input, up)
	if err != nil {
		t.Fatal(err)
	}
	want, err := rollupOracle(first, f, up)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRollupOracle(input, first, want, f, up); err != nil {
		t.Fatalf("the oracle contradicts itself: %v", err)
	}
	t.Logf("oracle: %d orders, %d %s finals%s, %d late (%d stragglers and %d rushers produced), %d %s left open; "+
		"rollup horizon %s: %d rollup finals over %d windows, rolled up from %d %s finals, %d %s finals held in open rollup windows",
		len(input), len(first.finals), name, first.figures, len(first.late), gen.stragglers, gen.rushers, first.open, f.what(),
		time.UnixMilli(want.horizon).UTC().Format(time.StampMilli), len(want.finals), want.windows, want.rolled, name, want.held, name)
	if len(first.late) == 0 || first.open != winParts || want.windows < 3 || want.held < winParts-1 || want.horizon%up.window != 0 || !want.lastClosed {
		t.Fatalf("the workload must have late records, exactly one open %s window or session per partition (the last order's), "+
			"at least 3 closed rollup windows, the one ending at the horizon among them, %s finals in rollup windows past the horizon (one per partition but one at least), "+
			"and the horizon on a rollup window's end: %d late, %d open, %d rollup windows (the last closed: %v), %d held, horizon %d",
			name, name, len(first.late), first.open, want.windows, want.lastClosed, want.held, want.horizon)
	}
	if first.lacks != "" {
		t.Fatalf("the workload lacks %s", first.lacks)
	}

	// The input is committed, and with it the first stage's finals and announcements; rollup
	// reads them and commits its finals after. Wait until a read_committed reader sees as many
	// as expected (or more: the diff reports duplicates and strays), but no longer than a
	// minute: then the diff says which are missing.
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

	ids := termAll(ins)
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

	// What the purge left of the internal topic: the first stage's finals and announcements.
	recs, err := readCommitted(ctx, p.brokers, internal)
	if err != nil {
		t.Fatal(err)
	}
	fig, d := diffInternal(first, recs, f, 20)
	t.Logf("%s holds %d records (read_committed; the rest purged): %d %s finals, %d watermark announcements (the highest per writer %v), %d other attribute records",
		internal, len(recs), fig.finals, name, fig.watermarks, fig.highest, fig.modes)
	if d != nil {
		t.Errorf("records in %s break %s's output contract:\n%s", internal, name, strings.Join(d, "\n"))
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
		t.Errorf("rollup wrote %d dead letters (a %s final late at rollup): there must be none", fromRollup, name)
	}
	if d := diffLate(windowed{late: first.late}, dlq, p.topic, 20); d != nil {
		t.Errorf("dead letters in %s-dlq differ from the oracle's late records (%d expected, %d read):\n%s", p.group, len(first.late), len(dlq), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d late records in the dead-letter topic exactly once, none from rollup", len(dlq))
	}
	t.Logf("scenario took %v", time.Since(began).Round(time.Millisecond))
}

// rollupClosing returns the last orders of the rollup scenario, which close every window or
// session of the first stage f over g's orders so far but one per partition, and make rollup's
// last watermark (the horizon, see rolledUp) the end of a rollup window (windowing up), so that
// the window ending exactly there must close, and the one after it stay open with finals of
// the first stage in it. Let end(p) be f.end of partition p's largest event time (every window
// or session of p ends at or before it, the one holding that largest event time at it), m the
// partition of the smallest end, and H end(m) rounded up to a rollup window's end. Partition m
// gets one closing order at H + grace + max_delay: its watermark reaches H + grace, so the
// first stage closes every window or session of m ending at or before H (all but the closing
// order's own, which is more than a gap after the others: it merges with none), the one ending
// at end(m) inside the rollup window ending at H, and m announces H. Every other partition p
// gets an order f.apart() after max(end(p), H), which opens a window or session of its own,
// then a closing order at its end + grace + max_delay: it announces that end, past H, and the
// order's final lies in a rollup window past the horizon. The horizon is H, the smallest
// announcement.
func rollupClosing(g *timedOrders, f rollupFirst, up eventTime) []*kgo.Record {
	ev := g.ev
	ends := make([]int64, g.parts)
	m := int32(0)
	for part := range g.parts {
		ends[part] = f.end(g.maxTS[part])
		if ends[part] < ends[m] {
			m = part
		}
	}
	horizon := up.windowStart(ends[m]-1) + up.window
	out := make([]*kgo.Record, 0, 2*g.parts)
	for part := range g.parts {
		end := horizon
		if part != m {
			ts := max(ends[part], horizon) + f.apart()
			out = append(out, g.order(part, g.keys[part][len(g.keys[part])-1], ts))
			end = f.end(ts)
		}
		out = append(out, g.order(part, g.keys[part][0], end+ev.grace+ev.maxDelay))
	}
	return out
}

// rollupPipeline is the two windowed aggregates of the rollup scenario: the first stage f over
// the orders, whose results rollup reads by name through its internal output topic (windowing
// up, no grace), rollup's finals going to sink.
func rollupPipeline(topic, sink string, f rollupFirst, up eventTime) string {
	return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
operators:
  - name: %s
    aggregate:
      input: orders
      window: %s
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
  - name: rollup
    aggregate:
      input: %s
      window: {tumbling: %dms}
      emit: final
      fields: {amount: {sum: amount}, orders: {sum: orders}}
    output: out
sinks:
  out: {topic: %s, format: json}
`, topic, f.ev().maxDelay, f.name(), f.window(), f.name(), up.window, sink)
}

// firstFinals is what the first stage must produce from an input.
type firstFinals struct {
	// finals are the closed windows or sessions, by key and window_start: exactly one final
	// each, with its window_end and exact totals, at event time window_end - 1.
	finals map[winKey]sessionValue
	late   map[srcPos]bool // late records: exactly one dead letter each
	open   int             // windows or sessions with records but not closed by the end
	wms    map[int32]int64 // each partition's watermark after its last record
	// pending are the sessions left open (sessions only; nil for per_second).
	pending map[winKey]sessionValue
	figures string // what else the workload made of the first stage, for the log
	lacks   string // what the workload should have made of the first stage but did not ("": nothing)
}

// oracle computes what the first stage must produce from input (every record of the input
// topic, in offset order per partition): per_second's windowOracle, or the sessions scenario's
// oracle (sessionWindow.oracle), with the figures of the session mix: single-order and longer
// sessions, sessions that start in one rollup window (windowing up) and end (end - 1) in a
// later one, records that extended a session backwards or bridged two; the workload must have
// each.
func (f rollupFirst) oracle(input []*kgo.Record, up eventTime) (firstFinals, error) {
	if !f.sessions() {
		ev := f.ev()
		w, err := windowOracle(input, ev)
		if err != nil {
			return firstFinals{}, err
		}
		out := firstFinals{finals: make(map[winKey]sessionValue, len(w.finals)), late: w.late, open: w.open, wms: w.wms}
		for k, tot := range w.finals {
			out.finals[k] = sessionValue{end: k.start + ev.window, tot: tot}
		}
		return out, nil
	}
	sw := f.sw()
	s, err := sw.oracle(input)
	if err != nil {
		return firstFinals{}, err
	}
	wms, err := lastWatermarks(input, sw.maxDelay)
	if err != nil {
		return firstFinals{}, err
	}
	out := firstFinals{finals: s.closed, late: s.late, open: len(s.open), wms: wms, pending: s.open}
	single, spanning := 0, 0
	for id, v := range s.closed {
		if v.tot.Count == 1 {
			single++
		}
		if up.windowStart(id.start) != up.windowStart(v.end-1) {
			spanning++
		}
	}
	out.figures = fmt.Sprintf(" (closed sessions: %d of one order, %d longer, %d spanning rollup windows; %d records extended a session backwards, %d bridged sessions)",
		single, len(s.closed)-single, spanning, s.backwards, s.bridges)
	if single == 0 || single == len(s.closed) || spanning == 0 || s.backwards == 0 || s.bridges == 0 {
		out.lacks = "a mix of sessions (of one order and longer, spanning rollup windows, extended backwards and bridged)" + out.figures
	}
	return out, nil
}

// lastWatermarks returns each partition's watermark after its last record of input: its
// largest ts minus maxDelay.
func lastWatermarks(input []*kgo.Record, maxDelay int64) (map[int32]int64, error) {
	out := map[int32]int64{}
	var parser fastjson.Parser
	for _, r := range input {
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			return nil, fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		if v.Get("ts") == nil {
			return nil, fmt.Errorf("input %d@%d: no ts: %s", r.Partition, r.Offset, r.Value)
		}
		wm := v.GetInt64("ts") - maxDelay
		if prev, ok := out[r.Partition]; !ok || wm > prev {
			out[r.Partition] = wm
		}
	}
	return out, nil
}

// rolledUp is what rollup must produce.
//
// Its watermark is the smallest of its writers' latest announcements, a writer being a task of
// the first stage (an input partition) and its announcement its watermark minus grace, made
// once every window or session that watermark closed is out. At the end each partition's
// watermark is its last (the oracle's wms, the closing order's), so rollup's last watermark,
// the horizon, is the smallest over the partitions of that watermark minus the first stage's
// grace; a rollup window closes, and its final is emitted, once the horizon reaches its end
// (plus rollup's grace, 0). A final of the first stage belongs to the rollup window of its
// event time, its window's end - 1. Every window or session whose end - 1 lies in such a rollup
// window ends at or before the horizon, hence at or before its own partition's watermark minus
// grace: it is closed, its final among the oracle's. So the final of each (key, closed rollup
// window) is exactly the sum of the oracle's first-stage finals of that key in it (for
// per_second also the sum of the orders of that key and window that were not late,
// checkRollupOracle). A rollup window ending after the horizon is still open: the first
// stage's finals in it that are out (from partitions whose watermark is further) are held, and
// it must have no final. A window or session still open at the end ends after its partition's
// watermark minus grace, so after the horizon: its final would not be in a closed rollup
// window either.
type rolledUp struct {
	horizon    int64                     // rollup's last watermark
	finals     map[winKey]workload.Total // (key, rollup window)s ending at or before the horizon: one final each
	windows    int                       // distinct rollup windows among finals
	lastClosed bool                      // the rollup window ending at the horizon is among them
	rolled     int                       // first-stage finals summed into finals
	held       int                       // first-stage finals in rollup windows past the horizon
}

// rollupOracle computes what rollup (windowing up) must produce from the oracle first of the
// first stage f: see rolledUp.
func rollupOracle(first firstFinals, f rollupFirst, up eventTime) (rolledUp, error) {
	out := rolledUp{horizon: math.MaxInt64, finals: map[winKey]workload.Total{}}
	if ev := f.ev(); !f.sessions() && up.window%ev.window != 0 {
		return out, fmt.Errorf("the rollup window %dms is not a multiple of the first stage's %dms", up.window, ev.window)
	}
	if len(first.wms) != winParts {
		return out, fmt.Errorf("the input has records in %d partitions, want %d: every writer must announce", len(first.wms), winParts)
	}
	grace := f.ev().grace
	for _, wm := range first.wms {
		out.horizon = min(out.horizon, wm-grace)
	}
	starts := map[int64]bool{}
	for k, v := range first.finals {
		start := up.windowStart(v.end - 1)
		if start+up.window+up.grace > out.horizon {
			out.held++
			continue
		}
		rk := winKey{k.key, start}
		sum := out.finals[rk]
		sum.SumCents += v.tot.SumCents
		sum.Count += v.tot.Count
		out.finals[rk] = sum
		out.rolled++
		starts[start] = true
	}
	out.windows = len(starts)
	out.lastClosed = starts[out.horizon-up.window-up.grace]
	return out, nil
}

// checkRollupOracle computes the rollup finals, or for sessions what they follow from, a second
// way, and reports where it differs from want. For per_second: the direct aggregation per (key,
// rollup window) of the orders of input that per_second did not find late, in rollup windows
// ending at or before the horizon. For sessions, whose bounds only the session oracle knows:
// every order of input that sessions did not find late is in exactly one session, closed or
// open, so per key the sum and count of its sessions are those of its orders that were not late.
func checkRollupOracle(input []*kgo.Record, first firstFinals, want rolledUp, f rollupFirst, up eventTime) error {
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
		k := winKey{key: string(v.GetStringBytes("customer_id"))}
		if !f.sessions() {
			k.start = up.windowStart(v.GetInt64("ts"))
			if k.start+up.window+up.grace > want.horizon {
				continue
			}
		}
		cents, err := workload.ParseCents(v.Get("amount").MarshalTo(nil))
		if err != nil {
			return fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		tot := direct[k]
		tot.SumCents += cents
		tot.Count++
		direct[k] = tot
	}
	if !f.sessions() {
		if d := workload.Diff(totalsByName(want.finals), totalsByName(direct), 5); d != nil {
			return fmt.Errorf("the rollup of per_second's finals (want) and the direct aggregation (got) differ:\n%s", strings.Join(d, "\n"))
		}
		return nil
	}
	byKey := map[winKey]workload.Total{}
	for _, m := range []map[winKey]sessionValue{first.finals, first.pending} {
		for id, v := range m {
			k := winKey{key: id.key}
			tot := byKey[k]
			tot.SumCents += v.tot.SumCents
			tot.Count += v.tot.Count
			byKey[k] = tot
		}
	}
	if d := workload.Diff(totalsByName(byKey), totalsByName(direct), 5); d != nil {
		return fmt.Errorf("per key, the sessions, closed and open (want), and the orders that were not late (got) differ:\n%s", strings.Join(d, "\n"))
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

// internalFigures counts the records of the first stage's output topic.
type internalFigures struct {
	finals, watermarks, modes int
	highest                   map[int]int64 // per writer, its highest watermark announced
}

// decode reads the final r of a window or session of the first stage: its (key,
// window_start), its total and its window_end, as decodeFinal does. For sessions, bad says
// also when the Kafka key is not the value's or the session is shorter than the gap.
func (f rollupFirst) decode(parser *fastjson.Parser, r *kgo.Record) (k winKey, got workload.Total, end int64, bad string, ok bool) {
	if !f.sessions() {
		return decodeFinal(parser, r, f.ev())
	}
	// decodeFinal with windows of one millisecond parses as for any window, and its bad for a
	// final that parses is about the bounds, which are a session's here: check them here.
	if k, got, end, bad, ok = decodeFinal(parser, r, eventTime{window: 1}); !ok {
		return k, got, end, bad, false
	}
	bad = ""
	if k.key != string(r.Key) || end-k.start < f.gap {
		bad = fmt.Sprintf("session final at %d@%d: Kafka key %q, a session shorter than the gap %d: %s", r.Partition, r.Offset, r.Key, f.gap, r.Value)
	}
	return k, got, end, bad, true
}

// diffInternal checks the records of the first stage f's output topic still there after the
// purge (read_committed, in offset order per partition) against its oracle first and its
// output contract: a final (key, window or session) at most once, exact (window_end and
// totals), written at its window's end - 1 with the Kafka key = the value's key; an
// announcement an attribute record (no key, no value) with headers sluice.watermark (epoch ms)
// and sluice.writer (the writer's input partition), never above that partition's last
// watermark minus grace; and, per partition of the topic, no final of a writer after that
// writer's announcement at or beyond the final's window end (the announcement says no final
// after it lies before it: every window or session ending there is out). Purged records are
// not checked. It returns the figures and at most limit problems (nil when there are none).
func diffInternal(first firstFinals, recs []*kgo.Record, f rollupFirst, limit int) (internalFigures, []string) {
	var (
		out    []string
		more   int
		parser fastjson.Parser
	)
	fig := internalFigures{highest: map[int]int64{}}
	grace := f.ev().grace
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
			if wm > last-grace {
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
		k, tot, end, bad, ok := f.decode(&parser, r)
		if bad != "" {
			add("%s", bad)
		}
		if !ok {
			continue
		}
		key, start := k.key, k.start
		got := sessionValue{end: end, tot: tot}
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
