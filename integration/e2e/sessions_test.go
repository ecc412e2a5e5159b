package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestSessionUpdatesKill9 is the kill -9 scenario of a session-window aggregate with emit:
// updates (and so retractions) against the real broker: 300k timed orders over 4k keys, a key's
// orders about 500ms apart in event time and the gap 1s, so that most orders join their key's
// session, some start a new one, some extend a session backwards or bridge two, and some are
// late; one then three instances, SIGKILLs while tasks sort their backlog, right after a switch
// to real-time and at random moments while more orders arrive. The table a consumer builds from
// the committed updates (upsert by key and window_start, delete on a retraction, which must
// name a session published with that window_end) must hold exactly the oracle's closed and open
// sessions with the exact sum and count, at least one retraction must have been read, and every
// late record must be in the dead-letter topic exactly once.
func TestSessionUpdatesKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	sessionsScenario(t, brokers, sessionsSize{first: 200_000, second: 100_000, keys: 4_000, enterLag: 5000, exitLag: 500,
		gapMS: 1000})
}

// TestSessionUpdatesKill9Fake is TestSessionUpdatesKill9, smaller (60k orders over 1k keys, a
// key's orders about 125ms apart, the gap 300ms), against an in-process kfake cluster; it runs
// without the real broker.
func TestSessionUpdatesKill9Fake(t *testing.T) {
	brokers := kafkatest.Fake(t, 8)
	sessionsScenario(t, brokers, sessionsSize{first: 40_000, second: 20_000, keys: 1_000, enterLag: 2000, exitLag: 200,
		gapMS: 300})
}

// sessionsSize sizes one sessions scenario. Event time advances by about one millisecond per
// order of a partition (see timedOrders), so a key's consecutive orders are about
// keys/winParts ms apart, and gapMS a few times that makes most of them join the key's session.
type sessionsSize struct {
	first, second     int // orders before the first start, and while instances run
	keys              int
	enterLag, exitLag int64
	gapMS             int64 // session gap
}

// Event time of the sessions scenario, in ms; the orders' jitter, stragglers and rushers are
// timedOrders'.
const (
	sessGraceMS = 50  // session grace
	sessDelayMS = 100 // the source's watermark max_delay
)

func sessionsScenario(t *testing.T, brokers string, size sessionsSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	began := time.Now()
	seed, rng := scenarioSeed(t)
	sw := sessionWindow{gap: size.gapMS, grace: sessGraceMS, maxDelay: sessDelayMS}

	p := newPipeline(t, brokers, pipelineOpts{partitions: winParts, keys: size.keys, enterLag: size.enterLag, exitLag: size.exitLag,
		window:    fmt.Sprintf("{session: %dms, grace: %dms}", sw.gap, sw.grace),
		watermark: fmt.Sprintf("{max_delay: %dms}", sw.maxDelay),
		emit:      "updates",
	})
	// The generator's "window" scales its stragglers (set back by up to 4 gaps plus grace and
	// delay: most are late, some extend a session backwards or bridge two) and its rushers
	// (ahead by up to a gap: they merge nothing, and the one per partition that ends the
	// backlog, half a gap to 1.5 gaps ahead, can make the first orders of phase 2 late).
	gen := newTimedOrders(uint64(seed), size.keys, winParts, eventTime{window: 2 * sw.gap, grace: sw.grace, maxDelay: sw.maxDelay})
	// The phase-2 orders are produced in slices over a few seconds, so sessions published by one
	// commit are extended backwards or merged by orders of a later one (retractions). The last
	// order per partition, a gap plus grace plus delay after its largest event time, closes
	// every session but its own; the checkpoint that commits it carries their updates.
	ins := runKills(ctx, t, p, rng, gen, size.first, size.second, func() []*kgo.Record { return sw.closing(gen) })

	input, err := readCommitted(ctx, p.brokers, p.topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(input) != gen.produced {
		t.Fatalf("input holds %d records, want the %d produced", len(input), gen.produced)
	}
	want, err := sw.oracle(input)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("oracle: %d orders, %d sessions closed and %d open (%d records extended a session backwards, %d bridged sessions), %d late (%d stragglers and %d rushers produced)",
		len(input), len(want.closed), len(want.open), want.backwards, want.bridges, len(want.late), gen.stragglers, gen.rushers)
	if len(want.late) == 0 || len(want.closed) == 0 || len(want.open) != winParts || want.backwards == 0 || want.bridges == 0 {
		t.Fatalf("the workload must have late records, closed sessions, sessions extended backwards and bridged, and exactly one open session per partition (the last order's): %d late, %d closed, %d backwards, %d bridges, %d open",
			len(want.late), len(want.closed), want.backwards, want.bridges, len(want.open))
	}

	ids := termAll(ins)
	p.checkTransactions(ctx, ids...)
	updates, err := readCommitted(ctx, p.brokers, p.sink)
	if err != nil {
		t.Fatal(err)
	}
	table, st, errs := sessionTable(updates, sw, 20)
	t.Logf("read %d updates from %s: %d retractions, %d upserts, %d sessions in the table", len(updates), p.sink, st.retractions, st.upserts, len(table))
	if d := append(errs, diffSessions(want, table, 20-len(errs))...); len(d) > 0 {
		t.Errorf("the table of the updates in %s differs from the oracle's sessions (%d closed + %d open expected, %d in the table):\n%s",
			p.sink, len(want.closed), len(want.open), len(table), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d sessions exactly (%d closed, %d open)", len(table), len(want.closed), len(want.open))
	}
	if st.retractions == 0 {
		t.Errorf("no retraction read from %s: the scenario did not exercise them", p.sink)
	}
	dlq, err := readCommitted(ctx, p.brokers, p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffLate(windowed{late: want.late}, dlq, p.topic, 20); d != nil {
		t.Errorf("dead letters in %s-dlq differ from the oracle's late records (%d expected, %d read):\n%s", p.group, len(want.late), len(dlq), strings.Join(d, "\n"))
	} else {
		t.Logf("verified %d late records in the dead-letter topic exactly once", len(dlq))
	}
	t.Logf("scenario took %v", time.Since(began).Round(time.Millisecond))
}

// sessionWindow is the session windowing of the scenario, in ms: a key's records less than gap
// apart form a session [first, last + gap), which closes when the watermark reaches its end +
// grace; watermark = largest ts - maxDelay.
type sessionWindow struct {
	gap, grace, maxDelay int64
}

// closing returns one order per partition whose watermark closes every session of the
// partition's orders so far: ts = the partition's largest event time + gap + grace + max_delay.
// It is too far from every other order to join a session, so it stays open alone.
func (w sessionWindow) closing(g *timedOrders) []*kgo.Record {
	out := make([]*kgo.Record, 0, g.parts)
	for part := range g.parts {
		out = append(out, g.order(part, g.keys[part][0], g.maxTS[part]+w.gap+w.grace+w.maxDelay))
	}
	return out
}

// sessionID is a session as a consumer of the updates knows it: its key and window_start.
type sessionID = winKey

// sessionValue is a session's window_end and the exact totals of its records.
type sessionValue struct {
	end int64
	tot workload.Total
}

func (v sessionValue) String() string { return fmt.Sprintf("end %d %s", v.end, v.tot) }

// sessionsWant is what the session aggregate must produce from an input.
type sessionsWant struct {
	closed map[sessionID]sessionValue // sessions the watermark closed: their last update is their final
	open   map[sessionID]sessionValue // sessions still open after the last record
	late   map[srcPos]bool            // late records: exactly one dead letter each
	// Figures of the workload: records that extended their key's session backwards (an earlier
	// start) and records that bridged two or more sessions.
	backwards, bridges int
}

// oSession is an open session of the oracle.
type oSession struct {
	start, last int64
	tot         workload.Total
}

// oracle computes the sessions and late records of input (every record of the input topic, in
// offset order per partition) by the rules of operators.Sessions, independently of it: per
// partition, in offset order, the watermark is the largest ts seen so far, the record's own
// included, minus max_delay; a record is late when ts + gap + grace <= watermark; otherwise it
// merges with every session of its key it is within the gap of (ts - last < gap and start - ts
// < gap: at most one on each side) into one session [min start, max last + gap); after each
// record, every session with last + gap + grace <= watermark closes and a later record of its
// key starts a new one. A session is closed lazily, when its key's next record arrives (with
// the watermark before that record, which is the one after the record before it) or at the end:
// the same sessions close as closing them all after each record.
func (w sessionWindow) oracle(input []*kgo.Record) (sessionsWant, error) {
	out := sessionsWant{closed: map[sessionID]sessionValue{}, open: map[sessionID]sessionValue{}, late: map[srcPos]bool{}}
	type partState struct {
		wm   int64
		keys map[string][]oSession // each key's open sessions, in start order
	}
	parts := map[int32]*partState{}
	closeUpTo := func(key string, ss []oSession, wm int64) []oSession {
		keep := ss[:0]
		for _, s := range ss {
			if s.last+w.gap+w.grace <= wm {
				out.closed[sessionID{key, s.start}] = sessionValue{s.last + w.gap, s.tot}
			} else {
				keep = append(keep, s)
			}
		}
		return keep
	}
	var parser fastjson.Parser
	for _, r := range input {
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			return out, fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		key := string(v.GetStringBytes("customer_id"))
		amount := v.Get("amount")
		if key == "" || amount == nil || v.Get("ts") == nil || key != string(r.Key) {
			return out, fmt.Errorf("input %d@%d: not an order: key %q, value %s", r.Partition, r.Offset, r.Key, r.Value)
		}
		cents, err := workload.ParseCents(amount.MarshalTo(nil))
		if err != nil {
			return out, fmt.Errorf("input %d@%d: %w", r.Partition, r.Offset, err)
		}
		ts := v.GetInt64("ts")
		ps := parts[r.Partition]
		if ps == nil {
			ps = &partState{wm: math.MinInt64, keys: map[string][]oSession{}}
			parts[r.Partition] = ps
		}
		// The sessions that the records before this one closed.
		ss := closeUpTo(key, ps.keys[key], ps.wm)
		ps.wm = max(ps.wm, ts-w.maxDelay)
		if ts+w.gap+w.grace <= ps.wm {
			out.late[srcPos{r.Partition, r.Offset}] = true
			ps.keys[key] = ss
			continue
		}
		m := oSession{start: ts, last: ts, tot: workload.Total{SumCents: cents, Count: 1}}
		merged, firstStart := 0, int64(math.MaxInt64)
		keep := make([]oSession, 0, len(ss)+1)
		for _, s := range ss {
			if ts-s.last < w.gap && s.start-ts < w.gap {
				merged++
				firstStart = min(firstStart, s.start)
				m.start, m.last = min(m.start, s.start), max(m.last, s.last)
				m.tot.SumCents += s.tot.SumCents
				m.tot.Count += s.tot.Count
				continue
			}
			keep = append(keep, s)
		}
		if merged > 1 {
			out.bridges++
		}
		if merged > 0 && ts < firstStart {
			out.backwards++
		}
		i, _ := slices.BinarySearchFunc(keep, m.start, func(s oSession, start int64) int { return cmp.Compare(s.start, start) })
		ps.keys[key] = slices.Insert(keep, i, m)
	}
	for _, ps := range parts {
		for key, ss := range ps.keys {
			for _, s := range closeUpTo(key, ss, ps.wm) {
				out.open[sessionID{key, s.start}] = sessionValue{s.last + w.gap, s.tot}
			}
		}
	}
	return out, nil
}

// tableFigures counts the updates a consumer applied.
type tableFigures struct {
	retractions, upserts int
}

// sessionTable applies the updates read from the sink (read_committed, in offset order per
// partition) as a consumer would, per key in order: a retraction ({"retract":true}) deletes
// (key, window_start) and must name a session in the table with the same window_end; any
// other value upserts (key, window_start). It checks that a key's updates are all in one
// partition (else their order is not defined), that the Kafka key is the value's key and that
// a session is at least a gap long. It returns the table, the figures and at most limit
// problems.
func sessionTable(updates []*kgo.Record, w sessionWindow, limit int) (map[sessionID]sessionValue, tableFigures, []string) {
	var (
		out    []string
		more   int
		fig    tableFigures
		parser fastjson.Parser
	)
	add := func(format string, args ...any) {
		if len(out) < limit {
			out = append(out, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	table := map[sessionID]sessionValue{}
	partOf := map[string]int32{}
	for _, r := range updates {
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			add("update at %d@%d: %v: %q", r.Partition, r.Offset, err, r.Value)
			continue
		}
		key := string(v.GetStringBytes("key"))
		if v.Get("key") == nil || v.Get("window_start") == nil || v.Get("window_end") == nil {
			add("update at %d@%d lacks a field: %s", r.Partition, r.Offset, r.Value)
			continue
		}
		if key != string(r.Key) {
			add("update at %d@%d: Kafka key %q, value %s", r.Partition, r.Offset, r.Key, r.Value)
		}
		if part, ok := partOf[key]; ok && part != r.Partition {
			add("update at %d@%d: key %s was written to partition %d before: %s", r.Partition, r.Offset, key, part, r.Value)
		}
		partOf[key] = r.Partition
		id := sessionID{key, v.GetInt64("window_start")}
		end := v.GetInt64("window_end")
		if v.GetBool("retract") {
			fig.retractions++
			was, ok := table[id]
			switch {
			case !ok:
				add("retraction at %d@%d of a session not in the table: %s", r.Partition, r.Offset, r.Value)
			case was.end != end:
				add("retraction at %d@%d of a session published with window_end %d: %s", r.Partition, r.Offset, was.end, r.Value)
			}
			delete(table, id)
			continue
		}
		fig.upserts++
		amount, orders := v.Get("amount"), v.Get("orders")
		if amount == nil || orders == nil {
			add("update at %d@%d lacks a field: %s", r.Partition, r.Offset, r.Value)
			continue
		}
		cents, err := workload.ParseCents(amount.MarshalTo(nil))
		if err != nil {
			add("update at %d@%d: %v", r.Partition, r.Offset, err)
			continue
		}
		if end-id.start < w.gap {
			add("update at %d@%d: a session shorter than the gap %d: %s", r.Partition, r.Offset, w.gap, r.Value)
		}
		table[id] = sessionValue{end, workload.Total{SumCents: cents, Count: orders.GetInt64()}}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more problems", more))
	}
	return table, fig, out
}

// diffSessions compares the consumer's table with the oracle's closed and open sessions: the
// same sessions, each with the exact end, sum and count. It returns at most limit differences
// (nil when there are none).
func diffSessions(want sessionsWant, table map[sessionID]sessionValue, limit int) []string {
	var (
		out  []string
		more int
	)
	add := func(format string, args ...any) {
		if len(out) < max(limit, 1) {
			out = append(out, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	all := make(map[sessionID]sessionValue, len(want.closed)+len(want.open))
	for id, v := range want.closed {
		all[id] = v
	}
	for id, v := range want.open {
		all[id] = v
	}
	ids := make([]sessionID, 0, len(all)+len(table))
	for id := range all {
		ids = append(ids, id)
	}
	for id := range table {
		if _, ok := all[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b sessionID) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.start, b.start)
	})
	for _, id := range ids {
		w, inWant := all[id]
		g, inTable := table[id]
		what := "closed"
		if _, ok := want.open[id]; ok {
			what = "open"
		}
		switch {
		case !inTable:
			add("%s session %d: missing from the table, want %s (%s)", id.key, id.start, w, what)
		case !inWant:
			add("%s session %d: in the table as %s, not a session of the oracle", id.key, id.start, g)
		case g != w:
			add("%s session %d: %s in the table, want %s (%s)", id.key, id.start, g, w, what)
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more differences", more))
	}
	return out
}
