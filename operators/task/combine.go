package task

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
)

// A re-keying writer whose records one operator alone reads (plan.ChainPlan.Combine, on by
// processing.combine_before_rekey) combines them before the repartition topic, as Flink's
// local-global aggregation does:
//
//   - For an aggregate or a cogroup without windows or retractions, it folds each record into a
//     partial state of its group key, with the reader's own operator, projected as the reader
//     would project it (the record as the reader decodes it: the group key, the value, the event
//     time), in a table of at most cache_keys keys (partials, as the backlog's). Each checkpoint
//     writes every key's partial state once, with codec.HeaderPartial, into its transaction
//     (flushCombined), and the reader merges it (Mergeable.Merge) where it would have folded
//     the records one by one (applyPartial): a state depends only on the multiset of its
//     inputs, so the results are the same bytes. Records of keys beyond the table, and records
//     the projection refuses (the reader dead-letters them), go as they are.
//   - For a distinct, it remembers per key the flags it has passed on (at most cache_keys keys;
//     then it forgets them all and starts again) and drops a record that sets none besides: the
//     record that set them is before it in the same partition of the repartition topic,
//     committed or in the same transaction, so the distinct has those flags for the key and
//     would drop it too.
//
// The same in both modes: in real time a partial covers one checkpoint's records, which the
// reader sees no earlier than the commit of that checkpoint anyway (read_committed). An abort
// forgets the table and the flags with the records they came from (chain.rewind).
type combiner struct {
	agg     operators.Mergeable // the reader's aggregate or cogroup; nil for a distinct
	input   int                 // the writer's input of a cogroup
	part    *partials
	ts      int64 // the latest event time folded into part: the partials' record timestamp
	headers []kgo.RecordHeader
	in      []byte // scratch: a projected input

	dist  *operators.Distinct
	seen  map[string]uint64 // a distinct's flags passed on, by key
	limit int
}

// newCombiner returns the combiner of a writer whose records cp (plan.ChainPlan.Combine) reads
// with ops (plan.Ops.Combine), or nil when it does not combine.
func newCombiner(cp *plan.ChainPlan, ops *plan.Ops, limit int) (*combiner, error) {
	if cp == nil || ops == nil {
		return nil, nil
	}
	if ops.Agg != nil {
		return &combiner{agg: ops.Agg, input: cp.Input, part: newPartials(ops.Agg.StateSize(), limit), ts: math.MinInt64,
			headers: codec.PartialHeaders(ops.Agg.Layout().Fingerprint())}, nil
	}
	d, ok := ops.Kop.(*operators.Distinct)
	if !ok {
		return nil, fmt.Errorf("task: %s combines its records for %s, which is neither a mergeable operator nor a distinct", cp.SourceName, ops.Operator().Name())
	}
	return &combiner{dist: d, seen: map[string]uint64{}, limit: limit}, nil
}

// take combines the chain's current record, re-keyed to key, and reports whether it is done
// with it; false: the record goes to the repartition topic as it is.
func (cb *combiner) take(r *operators.Record, key []byte) bool {
	orig := r.Key
	r.Key = key // as the reader decodes it
	defer func() { r.Key = orig }()
	if cb.agg == nil {
		mask, err := cb.dist.Mask(r)
		if err != nil {
			return false // the distinct dead-letters it
		}
		seen := cb.seen[string(key)]
		if mask&^seen == 0 {
			return true // no new flag: the distinct drops it
		}
		if len(cb.seen) >= cb.limit {
			clear(cb.seen)
		}
		cb.seen[string(key)] = seen | mask
		return false
	}
	in, err := cb.agg.ProjectInput(cb.input, r, cb.in[:0])
	if err != nil {
		return false // the reader dead-letters it
	}
	cb.in = in
	i, st, ok := cb.part.slot(key, cb.agg.InitState)
	if !ok {
		return false // beyond the table's keys
	}
	cb.part.set(i, st, cb.agg.Fold(st, in))
	cb.ts = max(cb.ts, r.Time)
	return true
}

// reset forgets what the combiner holds (an abort: the records it came from are read again).
func (cb *combiner) reset() {
	if cb.part != nil {
		cb.part.reset()
		cb.ts = math.MinInt64
	}
	clear(cb.seen)
}

// flushCombined writes the partial state of each key the writer c combined since its last
// checkpoint to its repartition topic through p and empties the table; it returns the number
// of records written.
func (t *Task) flushCombined(c *chain, p Producer, promise func(*kgo.Record, error)) int {
	cb := c.comb
	if cb == nil || cb.part == nil || cb.part.len() == 0 {
		return 0
	}
	ts := time.UnixMilli(cb.ts)
	keys := cb.part.sortedKeys() // in key order, the same on every run
	for _, k := range keys {
		st, _ := cb.part.get([]byte(k))
		p.Produce(&kgo.Record{Topic: c.plan.SinkTopic, Key: []byte(k), Value: bytes.Clone(st), Headers: cb.headers, Partition: -1, Timestamp: ts}, promise)
	}
	cb.reset()
	c.recordsOut += int64(len(keys))
	return len(keys)
}

// applyPartial merges a partial state a combining writer wrote (kr, under layout fingerprint
// fp) into its key's state, as apply folds a record: in backlog into the key's partial (or
// the sorter, tagged), in real time into its cache entry.
func (t *Task) applyPartial(c *chain, kr *kgo.Record, fp string) error {
	agg := c.ops.Agg
	if agg == nil || agg.Closes() {
		t.deadLetterReason(c, kr, c.plan.Keyed.Name, "a partial state (header "+codec.HeaderPartial+"), which only an aggregate or a cogroup without windows reads", nil)
		return nil
	}
	if fp != c.layout.fingerprint {
		e := t.layoutError(c)
		e.Detail = fmt.Sprintf("a writer of %s combined records under another layout (fingerprint %q, this config's %q): run one config in the whole group", c.plan.Source.Topic, fp, c.layout.fingerprint)
		return e
	}
	if len(kr.Key) == 0 || !agg.ValidSize(len(kr.Value)) {
		t.deadLetterReason(c, kr, c.plan.Keyed.Name, fmt.Sprintf("a partial state of %d bytes with a key of %d bytes: %s", len(kr.Value), len(kr.Key), stateSizes(c.ops)), nil)
		return nil
	}
	c.rec.Key, c.rec.Value, c.rec.Time = kr.Key, nil, kr.Timestamp.UnixMilli()
	c.scratch = append(append(c.scratch[:0], tagPartial), kr.Value...)
	if err := t.apply(c, kr.Key, kr.Offset, c.scratch); err != nil {
		return err
	}
	t.countBacklog(c)
	return nil
}
