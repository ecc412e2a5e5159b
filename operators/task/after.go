package task

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
)

// The filters and maps that alone read a keyed operator's results run on each result as it is
// produced (plan.ChainPlan.After, processing.inline_stages), not through the output topic: the
// keyed chain still produces its results to the output topic's name, and the task's producer
// hands each of them to afterStages instead, which does what the reading chain did with it
// once read: decode it (its key, its value, and as time the timestamp the writer gave it, or
// the time of the produce when it gave none, as the broker's would be), run the stages, and
// produce what they keep to their sink, in the same transaction as the result. A stage's
// error, or a result that does not decode, is a dead letter in that transaction (its source
// topic: the output topic's name); a tombstone of an upsert stream goes on to the sink, as the
// reading chain passed it on. So every emission path of the keyed operators (folds, flushes,
// window finals, timers) is covered by the one place every result goes through.

// afterStages runs one ChainPlan.After in a task. Not safe for concurrent use: its task's.
type afterStages struct {
	t          *Task
	name       string // the source name of the stages' chain (dead letters of a result that does not decode)
	ops        *plan.Ops
	sinkTopic  string
	tombstones bool
	rec        operators.Record
}

// afterProducer sends the records for an inlined output topic through its stages, and the
// others on to p.
type afterProducer struct {
	p  Producer
	by map[string]*afterStages // by the output topic's name
}

// afterTap, when set (tests), sees each result before its stages, with the producer it goes on
// through.
var afterTap func(p Producer, r *kgo.Record, promise func(*kgo.Record, error))

func (a *afterProducer) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	if s := a.by[r.Topic]; s != nil {
		if afterTap != nil {
			afterTap(a.p, r, promise)
		}
		s.produce(a.p, r, promise)
		return
	}
	a.p.Produce(r, promise)
}

// addAfter registers the After stages of chain plan cp (built in ops) under its output topic,
// once per topic (the chains of a join or cogroup share it).
func (t *Task) addAfter(cp plan.ChainPlan, ops *plan.Ops) {
	if cp.After == nil || ops.After == nil {
		return
	}
	if t.after == nil {
		t.after = map[string]*afterStages{}
	}
	if t.after[cp.SinkTopic] != nil {
		return
	}
	t.after[cp.SinkTopic] = &afterStages{t: t, name: cp.After.SourceName, ops: ops.After, sinkTopic: cp.After.SinkTopic, tombstones: cp.After.Tombstones}
}

// producer returns p, or p behind the task's After stages when it has some.
func (t *Task) producer(p Producer) Producer {
	if len(t.after) == 0 {
		return p
	}
	if t.afterP != nil && t.afterP.p == p {
		return t.afterP
	}
	t.afterP = &afterProducer{p: p, by: t.after}
	return t.afterP
}

// produce does with the result r what the reading chain did with it: decode, stages, sink.
func (s *afterStages) produce(p Producer, r *kgo.Record, promise func(*kgo.Record, error)) {
	t := s.t
	defer s.rec.Release()
	if r.Value == nil && r.Key != nil && s.tombstones {
		// A deleted row of an upsert stream: the deletion goes on to the sink under its key.
		key, err := s.ops.Src.Key(r.Key, &s.rec)
		if err != nil {
			s.deadLetter(p, r, "source "+s.name, err, promise)
			return
		}
		p.Produce(t.arena.out(s.sinkTopic, -1, key, nil), promise)
		t.d.Metrics.recordsOut(s.sinkTopic, 1)
		return
	}
	ts := r.Timestamp
	if ts.IsZero() {
		ts = t.d.Clock() // what the broker's timestamp of the result would have been, near enough
	}
	if err := s.ops.Src.Decode(r.Key, r.Value, ts.UnixMilli(), &s.rec); err != nil {
		s.deadLetter(p, r, "source "+s.name, err, promise)
		return
	}
	for _, st := range s.ops.Stages {
		keep, err := st.Apply(&s.rec)
		if err != nil {
			s.deadLetter(p, r, st.Name(), err, promise)
			return
		}
		if !keep {
			return
		}
	}
	p.Produce(t.arena.out(s.sinkTopic, -1, s.rec.Key, s.rec.Value), promise)
	t.d.Metrics.recordsOut(s.sinkTopic, 1)
}

// outTopic is the topic c's results are counted under in sluice_records_out_total: its sink,
// repartition or output topic, or "" (not counted there) when stages run on them in the task,
// which count what they write to their sink.
func (c *chain) outTopic() string {
	if c.plan.After != nil {
		return ""
	}
	return c.plan.SinkTopic
}

// deadLetter produces the dead letter of result r into the same transaction.
func (s *afterStages) deadLetter(p Producer, r *kgo.Record, op string, err error, promise func(*kgo.Record, error)) {
	var rerr *operators.Error
	reason := err.Error()
	if !errors.As(err, &rerr) {
		reason = fmt.Sprintf("%s: %v", op, err)
	}
	s.t.d.Metrics.deadLetter(op)
	p.Produce(newDeadLetter(s.t.plan.Config.DLQTopic(), r, op, reason, nil), promise)
}
