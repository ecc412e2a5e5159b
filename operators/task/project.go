package task

import (
	"math"

	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
)

// A re-keying writer whose records one aggregate alone reads, and which it does not combine
// (plan.ChainPlan.Project: an aggregate over hopping windows, or with retractions,
// processing.combine_before_rekey; over tumbling windows or sessions it combines them,
// combine.go),
// writes each record with only the members the aggregate reads (operators.MemberReader): the
// aggregate's results are made of those, the record's key and its event time, so it folds the
// projected record to the same bytes, and the repartition topic, the reader's fetch and its
// decoding carry a few bytes a record instead of the whole record (a count of bids per bidder
// over hopping windows: each record is then {}).
//
// A record the reader might dead-letter goes whole, so that its dead letter is the record as it
// was: one the reader's projection refuses (a field missing or not a number), and one that may
// be late for it. The reader's watermark when it reads the record is the smallest of its
// writers' latest announcements before it, this writer's among them: at most the largest
// watermark the writer announced or will announce (as combiner.dropsBeaten reasons), so a
// record on time by that is on time for the reader. A next owner of the writer's partition
// starts from the announcement its offsets were committed with (chain.keepsSaid, SetProgress),
// not from its own records: the reader keeps the largest. While the writer has announced that
// it is idle, or has no committed announcement of a watermark yet, every record goes whole.
type projector struct {
	names []string
	kop   operators.Keyed     // the reader's operator: one of these
	agg   operators.Mergeable //
	in    []byte              // scratch: the reader's projection
	sk    []byte              // scratch: a state key
	out   []byte              // the projected value, until the next call
}

// newProjector returns the projector of a writer for its reader's operators ops (plan.Ops.Project),
// or nil when there are none or they read any member.
func newProjector(ops *plan.Ops) *projector {
	if ops == nil {
		return nil
	}
	m, ok := ops.Operator().(operators.MemberReader)
	if !ok {
		return nil
	}
	names, ok := m.ReadsMembers()
	if !ok {
		return nil
	}
	return &projector{names: names, kop: ops.Kop, agg: ops.Agg}
}

// value returns the value the writer c writes for its current record, re-keyed to key (wmPrev
// the input watermark before it): the record with only the members the reader reads, or its
// whole value.
func (p *projector) value(c *chain, key []byte, wmPrev int64) []byte {
	r := &c.rec
	if c.idleSaid || c.done.wmSaid == math.MinInt64 || len(key)+len(r.Value) > boundedRecord {
		return r.Value
	}
	orig := r.Key
	r.Key = key // as the reader decodes it
	defer func() { r.Key = orig }()
	wm := max(wmPrev, c.iwm, c.wmSaid) // at least the reader's when it reads the record
	var err error
	late := false
	if p.kop != nil {
		p.in, err = p.kop.Project(0, r, p.in[:0])
		late = err == nil && p.kop.IsLate(0, r.Time, wm)
	} else {
		p.in, err = p.agg.ProjectInput(0, r, p.in[:0])
		if err == nil {
			p.sk, late, err = p.agg.Assign(p.sk[:0], key, r.Time, wm, func([]byte) error { return nil })
		}
	}
	if err != nil || late {
		return r.Value // the reader dead-letters it: whole
	}
	out, ok := r.AppendProjected(p.out[:0], p.names)
	if !ok {
		return r.Value
	}
	p.out = out
	return out
}
