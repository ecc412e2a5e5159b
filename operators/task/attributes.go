package task

import (
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
)

// In-band RecordAttributes (FLIP-309/327): the backlog mode travels with the records through the
// internal topics of a pipeline of several stages, so an operator downstream of an internal topic
// (an aggregate after a group_by, an operator reading an aggregate's results) is in backlog while
// the stage writing its input is, whatever its own lag says. The detector of each chain still
// judges its own input; the attribute is one more input of the combiner rule.
//
// A writer is a chain whose records go to an internal topic (Plan.Repartitions): a re-keying
// chain (its mode is its own detector's verdict on its input, and its own upstream's), or a
// keyed operator whose results later operators read (its mode). When a writer's mode changes,
// and at its first observation, it writes an attribute record to every partition of the topic:
// no key, no value, the headers sluice.backlog ("true" or "false") and sluice.writer (the
// writer's partition number): codec.ModeHeaders. The record goes into the open transaction, in order with the
// writer's records: those written after "true" and before "false" are the backlog's. A keyed
// operator leaving backlog writes "false" in the transaction of its switch, after the switch's
// outputs. An abort forgets what the writer announced since the last commit, so it announces again.
//
// A reader is a chain whose input is an internal topic. It takes attribute records out of the
// stream (they are not data: no tap, sink or dead letter sees them) and keeps the set of writers
// that said backlog; while the set is not empty, the reader's operator is in backlog (the combiner
// rule, backlog.State.Upstream).
// A reader that restarts knows no writer's mode until the writer announces one again: the first
// observation of every writer after its start, and every change after, does.
//
// Event time crosses the topic the same way (plan.ChainPlan.TimedOutput, TimedInput). A keyed
// operator whose results are the finals of windows (tumbling, hopping, session) writes each at
// its window's end - 1, and after a checkpoint's outputs, once every window its watermark
// closed is out (in real time, or at the switch that ends a backlog; never during one),
// announces its output watermark: the operator's watermark minus grace (chain.outputLag), the
// header sluice.watermark. A window
// still open then ends after it, so no later final of the writer lies before it. A reader's
// watermark is the smallest of its writers' latest announcements (MinInt64 until each has
// spoken), so no writer's final is late there, whatever the order in which the writers' records
// interleave; the reader commits each writer's watermark with its offset (window.go). A writer
// whose inputs are idle (watermark.idle_after) announces "idle" instead, once; the reader leaves
// it out of the smallest until it announces a watermark again.
//
// A repartition topic carries event time the same way: a re-keying writer writes each record
// at its event time as it processes it, and at each checkpoint, after them, announces its
// input's watermark (announceInputWatermark), in backlog and real time alike. Its reader (the
// aggregate after group_by) takes the smallest of its writers' announcements as its watermark,
// so upstream tasks that run at different speeds cannot make a record late that was on time at
// its source: the answer is the one a reader of a topic already keyed right would give.

// Announcements of a writer (chain.said; at the last commit, chain.done.said).
const (
	saidNothing int8 = iota // since the writer started, or rewound past its first announcement
	saidRealTime
	saidBacklog
)

// writerBacklog is the mode a writer announces: a keyed operator's, or for a chain without one
// (a re-keying chain) its own detector's verdict and its upstream's.
func (c *chain) writerBacklog() bool {
	if c.ops.Keyed() {
		return c.inBack
	}
	return c.wdet != nil && c.wdet.Backlog() || c.upstreamSays()
}

// announce writes the mode of the writer among c's operator's chains to every partition of its
// internal topic if it differs from what it announced last (or it has announced nothing yet),
// through promise: in the idle phase the open transaction's (t.out), inside Checkpoint the
// checkpoint's. It reports how many records it produced.
func (t *Task) announce(c *chain, promise func(*kgo.Record, error)) int {
	if c.opState != nil && c.ops.Keyed() {
		c = c.chains[0] // the operator's primary chain writes its results
	}
	return t.announceMode(c, c.writerBacklog(), promise)
}

// announceMode is announce with the mode to announce.
func (t *Task) announceMode(c *chain, backlog bool, promise func(*kgo.Record, error)) int {
	if c.internalParts <= 0 {
		return 0 // not a writer
	}
	want := saidRealTime
	if backlog {
		want = saidBacklog
	}
	if c.said == want {
		return 0
	}
	c.said = want
	for p := range c.internalParts {
		t.d.Producer.Produce(&kgo.Record{Topic: c.plan.SinkTopic, Partition: p, Headers: codec.ModeHeaders(backlog, t.partition)}, promise)
	}
	t.d.Metrics.attributes(c.plan.SinkTopic, int(c.internalParts))
	return int(c.internalParts)
}

// announceWatermark writes, after the outputs of checkpoint pd, the output watermark of the
// writer c (the primary chain of a keyed operator with TimedOutput) to every partition of its
// output topic if it moved: when every window the operator's watermark closed is out, that is
// in real time, or in the checkpoint of the switch that ends a backlog. It reports how many
// records it produced.
func (t *Task) announceWatermark(c *chain, pd *Pending) int {
	if !c.plan.TimedOutput || c.internalParts <= 0 || !c.primary {
		return 0
	}
	if c.plan.Rekey != "" {
		return t.announceInputWatermark(c, pd)
	}
	if (!foldedIn(pd, c) || pd.silent[c]) && !c.streaming() {
		return 0 // not the switch: a backlog's windows are out only then
	}
	if c.idleAfter > 0 && !c.ended {
		now := t.d.Clock()
		idle := true
		for _, o := range c.chains {
			idle = idle && o.idle(now)
		}
		if idle {
			if c.idleSaid {
				return 0
			}
			c.idleSaid = true
			return t.announceMark(c, []byte(codec.IdleMark), pd)
		}
	}
	wm := c.wm
	if c.ended {
		// The end of input closed every window: announce the watermark it commits (the latest
		// close of a window it closed), which a later run goes on from, not +infinity.
		wm = c.endWM
	}
	out := wm - c.outputLag()
	if out > wm { // underflow
		out = math.MinInt64
	}
	if out <= c.wmSaid && !c.idleSaid {
		return 0
	}
	c.wmSaid, c.idleSaid = max(c.wmSaid, out), false
	return t.announceMark(c, codec.AppendMark(nil, out), pd)
}

// announceInputWatermark is announceWatermark for a re-keying writer c: its records go to the
// repartition topic as they are processed, each at its event time, so once they are in the
// transaction (they are, by the time of a checkpoint), the chain's input watermark is a bound
// for every later record that is on time at the source, in real time and in backlog alike. A
// record of the source late by it may be late at the reader too: never one on time there.
// After a restart the chain's watermark starts over from its records; the reader keeps the
// largest each writer announced (a function of the offsets processed, like the source's).
func (t *Task) announceInputWatermark(c *chain, pd *Pending) int {
	// A writer holding its combined table says nothing of idleness: its partial sessions rest on
	// its reader counting it (combiner.project).
	if c.idleAfter > 0 && !c.ended && c.idle(t.d.Clock()) && !c.held() {
		if c.idleSaid {
			return 0
		}
		c.idleSaid = true
		return t.announceMark(c, []byte(codec.IdleMark), pd)
	}
	wm := c.iwm
	if c.held() {
		wm = c.comb.fromWM // a combining writer holding records: the watermark before them
	}
	if wm == math.MinInt64 || wm <= c.wmSaid && !c.idleSaid {
		return 0
	}
	c.wmSaid, c.idleSaid = max(c.wmSaid, wm), false
	return t.announceMark(c, codec.AppendMark(nil, c.wmSaid), pd)
}

// announceMark writes the codec.HeaderWatermark value v (codec.AppendMark, or codec.IdleMark)
// of the writer c to every partition of its output topic, in pd's transaction.
func (t *Task) announceMark(c *chain, v []byte, pd *Pending) int {
	for p := range c.internalParts {
		t.d.Producer.Produce(&kgo.Record{Topic: c.plan.SinkTopic, Partition: p, Headers: codec.MarkHeaders(v, t.partition)}, pd.promise)
	}
	t.d.Metrics.attributes(c.plan.SinkTopic, int(c.internalParts))
	return int(c.internalParts)
}

// ReadAttributes looks at the attribute records of a batch of topic before the batch's mode is
// decided (BeforeBatch): a batch runs in backlog if a writer was in backlog at any point of it
// (at its start, or from an attribute record in it), even if the writer says real-time later in
// the same batch (a keyed operator's switch writes its outputs, then "false": the burst is the
// backlog's). Process applies the attribute records in order, and AfterBatch judges by what the
// writers said last. The engine calls it before
// BeforeBatch; it may be called in the idle phase only.
func (t *Task) ReadAttributes(topic string, recs []*kgo.Record) {
	t.must("ReadAttributes", phaseIdle)
	for _, c := range t.byTopic[topic] {
		if c.upstream == nil {
			continue
		}
		c.batchUp = false
		for _, kr := range recs {
			if kr.Offset < c.next {
				continue
			}
			if a, ok := codec.ParseAttribute(kr); ok && a.Backlog {
				c.batchUp = true
				break
			}
		}
	}
}

// attribute reports whether kr is an attribute record and, if it is, applies it to the reader
// c: its set of writers in backlog, or its writers' watermarks (at now: the operator's inputs'
// idleness).
func (c *chain) attribute(kr *kgo.Record, now time.Time) bool {
	if c.upstream == nil {
		return false
	}
	a, ok := codec.ParseAttribute(kr)
	if !ok {
		return false
	}
	if a.Backlog {
		c.upstream[a.Writer] = struct{}{}
	} else if a.HasMode {
		delete(c.upstream, a.Writer)
	}
	if !a.Idle && !a.HasWatermark || c.writers == nil {
		return true
	}
	i, ok := a.WriterIndex()
	if !ok || i < 0 || i >= len(c.writers) {
		return true
	}
	m := &c.writers[i]
	if a.Idle {
		if !m.idle {
			m.idle = true
			c.syncWriters(now)
		}
		return true
	}
	if m.idle || a.Watermark > m.wm {
		m.wm, m.idle = max(m.wm, a.Watermark), false
		c.syncWriters(now)
	}
	return true
}

// writerMark is what a reader of timed results knows of one writer: the output watermark it
// announced last, and whether it said its inputs are idle since.
type writerMark struct {
	wm   int64
	idle bool
}

// minWriter returns the smallest of the watermarks of the writers that are not idle; if every
// writer is idle, the largest (as syncWatermark does for the inputs of an operator).
func minWriter(ws []writerMark) int64 {
	m, hi, active := int64(math.MaxInt64), int64(math.MinInt64), 0
	for _, w := range ws {
		hi = max(hi, w.wm)
		if w.idle {
			continue
		}
		active++
		m = min(m, w.wm)
	}
	if active == 0 {
		return hi
	}
	return m
}

// syncWriters sets the reader c's input watermark to the smallest of its writers' and moves the
// operator's (never back).
func (c *chain) syncWriters(now time.Time) {
	if m := minWriter(c.writers); m > c.iwm {
		c.iwm = m
	}
	if c.timed() && !c.ended {
		c.syncWatermark(now)
	}
}

// upstreamSays reports whether a writer of the reader c's input said backlog: last, or in the
// batch about to run (ReadAttributes).
func (c *chain) upstreamSays() bool { return len(c.upstream) > 0 || c.batchUp }
