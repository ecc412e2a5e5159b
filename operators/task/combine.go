package task

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/producer"
)

// A re-keying writer whose records one operator alone reads (plan.ChainPlan.Combine, on by
// processing.combine_before_rekey) combines them before the repartition topic, as Flink's
// local-global aggregation does:
//
//   - For an aggregate or a cogroup without windows or retractions, it folds each record into a
//     partial state of its group key (for an aggregate over tumbling windows, of its window's
//     key; the partial crosses under the group key, the window's start before the state), with
//     the reader's own operator, projected as the reader would project it (the record as the
//     reader decodes it: the group key, the value, the event time), in a table of at most cache_keys keys (partials, as the backlog's). A checkpoint
//     writes every key's partial state once, with codec.HeaderPartial, into its transaction
//     (flushCombined), and the reader merges it (Mergeable.Merge) where it would have folded
//     the records one by one (applyPartial): a state depends only on the multiset of its
//     inputs, so the results are the same bytes. In real time every checkpoint flushes; records
//     of keys beyond the table, and records the projection refuses (the reader dead-letters
//     them), go as they are.
//   - While the writer reads a backlog it holds its table across checkpoints, as a keyed
//     operator holds its sorted backlog: the chain's progress stays at the offset of the
//     table's first record (from), and with it its dead letters and the watermark it announces
//     and commits (fromWM), so that a rewind reads again exactly what the table holds. A full
//     table, or a record that must go as it is, first releases the table into the open
//     transaction (with the dead letters before it), and the table starts again from that
//     record. Leaving backlog, or the end of a bounded input, flushes it at the next checkpoint.
//     One partial state per key per backlog, then, not per checkpoint.
//   - For an aggregate of one input over sessions (operators.PartialMerger), the partial state of
//     a key is its sessions so far, folded as the reader would (FoldPartial), and the reader
//     merges each partial session into the key's sessions (applyKeyedPartial): runs of records
//     less than the gap apart belong to one session exactly when they come within the gap of
//     each other, so the sessions are the same. A partial reaches the reader later than its
//     records would have, so the writer folds only records the reader cannot take as late
//     (combiner.project); the others go as they are.
//   - For a distinct, it remembers per key the flags it has passed on (at most cache_keys keys;
//     then it forgets them all and starts again) and drops a record that sets none besides: the
//     record that set them is before it in the same partition of the repartition topic,
//     committed or in the same transaction, so the distinct has those flags for the key and
//     would drop it too.
//   - For a top of n at most operators.TopBoundMaxN, it keeps per key (and window) the n best
//     values it has passed on and drops a record they leave no rank (operators.TopBound): the
//     top reads them before it and would drop it too. Over windows only in windows the writer's
//     watermark leaves open, which bounds the reader's (dropsBeaten); the writer commits what it
//     announced with its offsets for the partition's next owner (topicOffsets, SetProgress).
//
// A keyed operator's results that one such writer re-keys for a top over windows pass a filter
// of the same kind as they are written (plan.filtersOutput, dropsResult): an aggregate's
// window finals (Nexmark q5: the counts per auction and hopping window, 3M at 10M events, of
// which the top ranks the highest per window). The filter applies the writer's stages and its
// re-key, and drops a final that the finals it passed on before for the same re-keyed key and
// the same partition of its output topic leave no rank in its window, every window counting as
// open: they reach the top before it through the same partition and re-keying task, in order,
// so either the top ranks them, and then not the final, or the top's watermark had closed the
// window, and then the final is late there too (it is dropped rather than a dead letter; no
// result changes). Its slots are per partition (paths) because a partition of the output is
// one path: finals of other partitions may reach the top after this one, or late while it is
// not (a re-keying task the top leaves out of its watermark while it says its input is idle).
//
// The same in both modes: in real time a partial covers one checkpoint's records, which the
// reader sees no earlier than the commit of that checkpoint anyway (read_committed). An abort
// forgets the table and the flags with the records they came from (chain.rewind).
type combiner struct {
	agg     operators.Mergeable     // the reader's aggregate or cogroup; nil for a distinct
	sess    operators.PartialMerger // or the reader's keyed operator that merges partials (sessions)
	input   int                     // the writer's input of a cogroup
	part    *partials
	ts      int64 // the latest event time folded into part: the partials' record timestamp
	headers []kgo.RecordHeader
	in      []byte // scratch: a projected input
	sk, wk  []byte // scratch: Assign's, and a record's window key
	// from is the offset of the first record in the table and fromWM the writer's input
	// watermark before it; mixed: a record went as it is after it (the table cannot be held).
	from, fromWM int64
	mixed        bool

	dist  *operators.Distinct
	seen  *flagSet // a distinct's flags passed on, by key
	limit int

	bound       *operators.TopBound // a top's: the best values passed on, per key and window
	best        *slotSet            // bound's slots (operators.TopBound.SlotSize each)
	slot, slotN func([]byte) []byte // best.slot and best.add
	// A keyed operator's results for a top or an aggregate of each key's best value
	// (plan.filtersOutput): the stages its results pass first, the record they see, and the key
	// the operator reads them under (nil: the results' own key); early: the bound may judge a
	// result before the stages (they are filters, and the key is the results').
	stages []operators.Stage
	rec    operators.Record
	rekey  *operators.Rekey
	early  bool
	rows   rowIndexer // the operator whose results they are, when it can index its last one
	// underKey: every result the operator emits under one key re-keys to the same key
	// (operators.RegularJoin.SameUnderKey), so the first question may be asked of a result not
	// written yet, with the re-keyed key of the last one judged (memoKey, of the results' key
	// memoOf; memo: they are set).
	underKey        bool
	memo            bool
	memoOf, memoKey []byte
	sole            soleResult // dropsResult's scratch
	// paths: for an aggregate's window finals (a top over windows reads them through a re-key),
	// the partitions of its output topic; a slot is per re-keyed key and partition, pk its key.
	paths int32
	pk    []byte
	// The distinct's filter pays its way only when it drops many records (Nexmark q15: over
	// 80%, and the run takes 0.6 of the CPU; q16: about 30%, where examining every record cost
	// more than it saved):
	// it counts the records of a window (filterWindow) and those it dropped, and below half
	// it lets records through unexamined for skipWindows windows, then looks again.
	looked, dropped int64
	skip            int64 // records still to let through unexamined
}

// filterWindow is a distinct filter's window in records (a variable for the tests).
var filterWindow int64 = 1 << 13

const skipWindows = 4

// filtering reports whether the distinct's filter examines the next record, counting it.
func (cb *combiner) filtering() bool {
	if cb.skip > 0 {
		cb.skip--
		return false
	}
	cb.looked++
	if cb.looked == filterWindow {
		if cb.dropped*2 < cb.looked {
			cb.skip = skipWindows * filterWindow // what it knows stays true meanwhile
		}
		cb.looked, cb.dropped = 0, 0
	}
	return true
}

// newCombiner returns the combiner of the writer w for the chain that reads its records
// (w.Combine), whose operators are ops (plan.Ops.Combine), or nil when it does not combine: a
// re-keying writer combines or filters its records for the reader's operator, a keyed
// operator's chain filters its results (plan.filtersOutput) for the reader's top or for the
// aggregate of each key's best value that the reader is or re-keys for.
func newCombiner(w *plan.ChainPlan, ops *plan.Ops, limit int) (*combiner, error) {
	cp := w.Combine
	if cp == nil || ops == nil {
		return nil, nil
	}
	results := w.Rekey == ""
	if ops.Agg != nil && !results {
		return &combiner{agg: ops.Agg, input: cp.Input, part: newPartials(ops.Agg.StateSize(), limit), ts: math.MinInt64,
			headers: codec.PartialHeaders(ops.Agg.Layout().Fingerprint())}, nil
	}
	if pm, ok := ops.Kop.(operators.PartialMerger); ok && !results {
		return &combiner{sess: pm, part: newPartials(pm.PartialSize(), limit), ts: math.MinInt64,
			headers: codec.PartialHeaders(pm.Layout().Fingerprint())}, nil
	}
	var b *operators.TopBound
	var key *operators.Rekey
	early := false
	switch op := ops.Kop.(type) {
	case *operators.Distinct:
		if !results {
			return &combiner{dist: op, seen: newFlagSet(), limit: limit}, nil
		}
	case *operators.Top:
		b, early = op.Bound(), results
	case *operators.WindowTop:
		b = op.Bound()
	}
	if results && b == nil && ops.Rekey != nil && ops.Combine != nil {
		if wt, ok := ops.Combine.Kop.(*operators.WindowTop); ok {
			b, key = wt.Bound(), ops.Rekey // an aggregate's window finals, for a top over windows
		}
	}
	if results && b == nil {
		agg, k := ops.Agg, ops.LocalKey
		if ops.Rekey != nil && ops.Combine != nil {
			agg, k = ops.Combine.Agg, ops.Rekey
		}
		if a, ok := agg.(*operators.Aggregate); ok {
			b, key = a.Bound(), k
		}
	}
	if b == nil {
		return nil, fmt.Errorf("task: %s combines its records for %s, which is neither a mergeable operator, a distinct, a top of n at most %d nor an aggregate of each key's best value", cp.SourceName, cp.ID(), operators.TopBoundMaxN)
	}
	cb := &combiner{bound: b, best: newSlotSet(b.SlotSize()), limit: limit, stages: ops.Stages, rekey: key, early: early}
	cb.slot, cb.slotN = cb.best.slot, cb.best.add
	return cb, nil
}

// boundedRecord is the size (key and value) up to which a filter (a distinct's or a top's)
// counts a record it passes on: one that might be too large for the repartition topic
// (sizelimit.go) becomes a dead letter instead of reaching the reader, so what the filter
// knows of the reader must not rest on it. A topic accepts 8 KiB unless it is set below any
// broker's default by far.
const boundedRecord = 8 << 10

// combine combines the chain's current record (kr, re-keyed to key; wmPrev the input watermark
// before it) and reports whether it is done with it; false: the record goes to the repartition
// topic as it is.
func (t *Task) combine(c *chain, kr *kgo.Record, key []byte, wmPrev int64) bool {
	cb, r := c.comb, &c.rec
	orig := r.Key
	r.Key = key // as the reader decodes it
	defer func() { r.Key = orig }()
	switch {
	case cb.agg != nil || cb.sess != nil:
	case len(key)+len(r.Value) > boundedRecord:
		return false
	case cb.bound != nil:
		return cb.dropsBeaten(c, key, r, wmPrev)
	default:
		return cb.dropsFlagless(key, r)
	}
	hold := c.holding()
	in, tk, err := cb.project(c, r, key, wmPrev)
	if err != nil {
		t.passOn(c, kr.Offset, hold)
		return false // the reader dead-letters it, or may
	}
	cb.in = in
	if cb.part.len() == 0 && len(c.dlq) > 0 {
		t.release(c, kr.Offset) // the dead letters before the table's first record go now
	}
	i, st, ok := cb.part.slot(tk, cb.init)
	if ok && cb.sess != nil && len(cb.sess.PartialBytes(st))+cb.sess.PartialSize()-4 > boundedRecord {
		ok = false // a partial of this many sessions could reach no reader (sizelimit.go): as full
	}
	if !ok && !hold {
		t.passOn(c, kr.Offset, hold)
		return false // beyond the table's keys
	}
	if !ok {
		t.release(c, kr.Offset) // full: the table starts again from this record
		i, st, _ = cb.part.slot(tk, cb.init)
	}
	if cb.part.len() == 1 && cb.ts == math.MinInt64 { // the table's first record
		cb.from, cb.fromWM, cb.mixed = kr.Offset, wmPrev, false
	}
	if cb.sess != nil {
		cb.part.set(i, st, cb.sess.FoldPartial(st, r.Time, in))
	} else {
		cb.part.set(i, st, cb.agg.Fold(st, in))
	}
	cb.ts = max(cb.ts, r.Time)
	return true
}

// errMaybeLate is combiner.project's refusal of a record the reader might judge late.
var errMaybeLate = errors.New("maybe late for the reader")

// project returns what the writer c's current record r (re-keyed to key; wmPrev the input
// watermark before it) contributes to a partial state, and the key of that state in the table
// (key; for a windowed aggregate, its window's key, codec.AppendWindowKey), or an error when
// it must go as it is: the reader's projection refuses it (the reader dead-letters it), or, for
// partial sessions or windows, the reader might judge it late. A partial goes to the reader
// later than its records would have, but before anything more the writer announces of its
// watermark: it is written at a checkpoint before its announcement, or while the writer holds
// its table, whose announcements stay at the watermark before the table's first record
// (announceInputWatermark). So the reader's watermark when it merges a partial is at most the
// largest the writer had announced or would announce when it folded the record (as
// combiner.dropsBeaten and project.go reason), and a record on time by that is on time for the
// reader, which judges a partial session by its earliest record and a partial window by the
// window. While the writer has announced that it is idle, or has no committed announcement of
// a watermark, records go as they are.
func (cb *combiner) project(c *chain, r *operators.Record, key []byte, wmPrev int64) (in, tk []byte, err error) {
	if !cb.timed() {
		in, err = cb.agg.ProjectInput(cb.input, r, cb.in[:0])
		return in, key, err
	}
	if c.idleSaid || c.done.wmSaid == math.MinInt64 {
		return nil, nil, errMaybeLate
	}
	wm := max(wmPrev, c.iwm, c.wmSaid) // at least the reader's when it merges the partial
	if cb.sess != nil {
		if cb.sess.IsLate(0, r.Time, wm) {
			return nil, nil, errMaybeLate
		}
		in, err = cb.sess.Project(0, r, cb.in[:0])
		return in, key, err
	}
	// A tumbling window (plan: combines): exactly one.
	cb.sk, _, err = cb.agg.Assign(cb.sk, key, r.Time, math.MinInt64, func(sk []byte) error {
		cb.wk = append(cb.wk[:0], sk...)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if at, ok := cb.agg.CloseAt(cb.wk); !ok || at <= wm {
		return nil, nil, errMaybeLate
	}
	in, err = cb.agg.ProjectInput(cb.input, r, cb.in[:0])
	return in, cb.wk, err
}

// timed reports whether the combiner's partials are of windows or sessions, which the reader
// may judge late (project).
func (cb *combiner) timed() bool {
	return cb.sess != nil || cb.agg != nil && cb.agg.Closes()
}

// init writes an empty partial state into dst.
func (cb *combiner) init(dst []byte) {
	if cb.sess != nil {
		cb.sess.InitPartial(dst)
	} else {
		cb.agg.InitState(dst)
	}
}

// dropsFlagless reports whether the distinct's filter cb drops r, under key: it sets no flag
// cb has not passed on for key yet (the record that set them comes before it to the distinct,
// which would drop r too).
func (cb *combiner) dropsFlagless(key []byte, r *operators.Record) bool {
	if !cb.filtering() {
		return false
	}
	mask, err := cb.dist.Mask(r)
	if err != nil {
		return false // the distinct dead-letters it
	}
	if mask&^cb.seen.mask(key) == 0 {
		cb.dropped++
		return true // no new flag: the distinct drops it
	}
	if cb.seen.full(cb.limit) {
		cb.seen.reset()
	}
	cb.seen.add(key, mask)
	return false
}

// dropsBeaten reports whether the top's bound cb drops r, under key, in the writer c (wmPrev
// its watermark before r): the records c passed on before it, which its reader reads before it
// in the same partition, leave it no rank in any of its windows (operators.TopBound). The
// reader's watermark when it reads r (over windows) is the smallest of its writers' latest
// announcements, c's among them: so the largest watermark c announced (chain.wmSaid) or will
// announce (its input's) bounds it, unless c announced that it is idle and has not announced a
// watermark since (the reader then leaves c out of the smallest). c commits what it announced
// with its offsets, and its next owner takes it up (SetProgress). While it is idle, and for a
// writer that may announce idleness (watermark.idle_after > 0) until it has a committed
// announcement of a watermark (the reader may have heard only "idle", which is not committed
// without one), the filter lets records go unexamined. A writer that never announces idleness
// and has no committed announcement is taken as not heard from: its reader's watermark
// MinInt64, nothing late there yet (a writer reading windows' finals in a backlog announces
// nothing until they have all come: Nexmark q5's 3M counts went unexamined here, until its
// aggregate filtered them as it wrote them). A reader may be further on (it heard "idle" under
// an earlier idle_after, or this writer's marks while combine_before_rekey was off and no said:
// was committed, or it ended a bounded run at its last window's close): a record the filter
// drops there that the reader would take as late is dropped rather than a dead letter, and no
// result changes (the records that beat it went before it, in its windows). Partial states and
// projections, whose records the reader must not take as late, wait for a committed
// announcement (combiner.project, project.go).
func (cb *combiner) dropsBeaten(c *chain, key []byte, r *operators.Record, wmPrev int64) bool {
	bounded := !c.idleSaid && (c.done.wmSaid != math.MinInt64 || c.idleAfter == 0)
	if cb.bound.Windowed() && !bounded || !cb.filtering() {
		return false
	}
	if cb.best.full(cb.limit) {
		cb.best.reset()
	}
	if cb.bound.Admit(key, r, max(wmPrev, c.iwm, c.wmSaid), cb.slot, cb.slotN) {
		cb.dropped++
		return true
	}
	return false
}

// keepsResult reports whether the result r of c's keyed operator goes to its output topic: its
// one reader's top may want it (dropsResult). The task asks as it produces r, in the order of
// the topic.
func keepsResult(c *chain, r *kgo.Record) bool {
	keep, _ := judgeResult(c, r)
	return keep
}

// judgeResult is keepsResult that also returns, of a result kept whose value is now the one
// value the filter holds for its reader's key (operators.TopBound.AdmitReplacing), that key
// and whether the value replaced one (in cb's scratch, until the next call; nil: any other
// result).
func judgeResult(c *chain, r *kgo.Record) (keep bool, sole *soleResult) {
	if c.comb == nil || c.plan.Rekey != "" {
		return true, nil
	}
	drop, sole := c.comb.dropsResult(r)
	return !drop, sole
}

// kafkaPartition is the partition of n that the producer gives a record with this key
// (producer.Partitioner).
var kafkaPartition = kgo.KafkaHasher(producer.Murmur2)

// soleResult is what dropsResult says of a result whose value is now the one value its filter
// holds for the reader's key: the key, and whether the value replaced one (the result that
// brought it, before this one, then has no rank at the reader).
type soleResult struct {
	key      []byte
	replaced bool
}

// beatenMember is the member of a result that dropsResult's first question reads (the top's
// field), "" when it asks none.
func (cb *combiner) beatenMember() string {
	if !cb.early && !cb.underKey {
		return ""
	}
	return cb.bound.Member()
}

// dropsBeatenMember is dropsResult's first question, asked of a result (key, a value of at most
// size bytes whose beatenMember is raw) before its operator writes it: it drops what
// dropsResult would drop there, and counts it as dropsResult would. A result it keeps is asked
// again as it is produced.
func (cb *combiner) dropsBeatenMember(key, raw []byte, size int) bool {
	if !cb.early && !cb.underKey || key == nil || len(key)+size > boundedRecord || cb.skip > 0 {
		return false
	}
	if cb.underKey {
		// The key the result re-keys to: that of the last result of its key judged (and not
		// when dropsResult would reset the slots first).
		if !cb.memo || !bytes.Equal(key, cb.memoOf) || len(cb.memoKey)+size > boundedRecord || cb.best.full(cb.limit) {
			return false
		}
		key = cb.memoKey
	}
	if !cb.bound.BeatenMember(key, raw, cb.slot) {
		return false
	}
	cb.filtering() // true: skip is 0
	cb.dropped++
	return true
}

// sameUnderKey is a keyed operator that can tell whether the results it emits under one key
// all have the same values of some members (operators.RegularJoin.SameUnderKey).
type sameUnderKey interface {
	SameUnderKey(members []string) bool
}

// rowIndexer is a keyed operator that can give a record the index of the result it emitted
// last (operators.RegularJoin.IndexRow).
type rowIndexer interface {
	IndexRow(r *operators.Record) bool
}

// dropsResult reports whether the writer's filter for its reader cb (a keyed operator's
// results: plan.filtersOutput) drops r: the stages before the top or the aggregate drop it, or
// the results it passed on before r for the same key leave r no rank (operators.TopBound). A
// result the stages or the operator refuse goes on: the reader dead-letters it. sole is what
// it says of a result kept whose value is now the one value it holds for the reader's key
// (operators.TopBound.AdmitReplacing), in cb's scratch; nil for any other.
func (cb *combiner) dropsResult(r *kgo.Record) (drop bool, sole *soleResult) {
	if r.Key == nil || r.Value == nil || len(r.Key)+len(r.Value) > boundedRecord || !cb.filtering() {
		return false, nil
	}
	rec := &cb.rec
	rec.Set(r.Key, r.Timestamp.UnixMilli(), r.Value) // as the reader decodes it
	defer rec.Release()
	if cb.rows != nil {
		cb.rows.IndexRow(rec) // a fold's result, just written: not scanned again
	}
	if cb.early && cb.bound.Beaten(r.Key, rec, cb.slot) { // first: cheaper than the filters
		cb.dropped++
		return true, nil
	}
	for _, s := range cb.stages {
		keep, err := s.Apply(rec)
		if err != nil {
			return false, nil
		}
		if !keep {
			cb.dropped++
			return true, nil
		}
	}
	key := rec.Key
	if cb.rekey != nil {
		k, err := cb.rekey.Key(rec)
		if err != nil {
			return false, nil
		}
		key = k
		if cb.underKey {
			cb.memoOf, cb.memoKey, cb.memo = append(cb.memoOf[:0], r.Key...), append(cb.memoKey[:0], key...), true
		}
	}
	if len(key)+len(rec.Value) > boundedRecord {
		return false, nil // what the stages made of it might not reach the operator (sizelimit.go)
	}
	if cb.paths > 0 {
		// The finals that reach the top before r through the same partition of the output
		// topic, and so the same re-keying task, in order.
		cb.pk = binary.BigEndian.AppendUint32(append(cb.pk[:0], key...), uint32(kafkaPartition(r.Key, int(cb.paths))))
		key = cb.pk
	}
	if cb.best.full(cb.limit) {
		cb.best.reset()
	}
	drop, one, replaced := cb.bound.AdmitReplacing(key, rec, cb.slot, cb.slotN)
	if drop {
		cb.dropped++
		return true, nil
	}
	if !one {
		return false, nil
	}
	cb.sole = soleResult{key: append(cb.sole.key[:0], key...), replaced: replaced}
	return false, &cb.sole
}

// newOwnFilter returns the filter before the keyed operator of the chain cp itself, rather
// than before a repartition topic (nil: none): the combiner's for a distinct keyed in its
// input's partition (plan.Ops.LocalKey), and for a top without windows whose input only grows
// (no tombstones): its own chain's records reach it in the order the filter sees them (in
// backlog, each key's sorted records are replayed in arrival order), so a record that the n
// best of those before it leave no rank would change nothing there, and is neither sorted nor
// replayed (dropsOwn).
func newOwnFilter(cp *plan.ChainPlan, ops *plan.Ops, limit int) *combiner {
	switch op := ops.Kop.(type) {
	case *operators.Distinct:
		if ops.LocalKey != nil {
			return &combiner{dist: op, seen: newFlagSet(), limit: limit}
		}
	case *operators.Top:
		if b := op.Bound(); b != nil && !cp.Tombstones {
			cb := &combiner{bound: b, best: newSlotSet(b.SlotSize()), limit: limit}
			cb.slot, cb.slotN = cb.best.slot, cb.best.add
			return cb
		}
	}
	return nil
}

// dropsOwn reports whether the top's filter of its own chain cb drops r, under key: r's value
// was readable (the top projected it), and the n best values of the records it passed on
// before r for key leave r no rank (operators.TopBound). It examines every record: a record
// dropped is one the sorter neither holds nor spills.
func (cb *combiner) dropsOwn(key []byte, r *operators.Record) bool {
	if cb.best.full(cb.limit) {
		cb.best.reset()
	}
	return cb.bound.Admit(key, r, math.MinInt64, cb.slot, cb.slotN)
}

// passOn prepares the table for a record at offset off that goes as it is: while holding, the
// table is released first (the record must not reach the topic before what the table holds of
// the records before it commits with it); otherwise the table can no longer be held.
func (t *Task) passOn(c *chain, off int64, hold bool) {
	cb := c.comb
	if cb.part.len() == 0 {
		return
	}
	if hold {
		t.release(c, off)
	} else {
		cb.mixed = true
	}
}

// holding reports whether the writer c holds its table across checkpoints: it reads a backlog
// whose input has not ended.
func (c *chain) holding() bool { return c.writerBacklog() && !c.ended }

// held reports whether the combiner holds records at a checkpoint: its table is not empty and
// may stay so (holding, and no record went as it is after its first).
func (c *chain) held() bool {
	cb := c.comb
	return cb != nil && cb.part != nil && cb.part.len() > 0 && !cb.mixed && c.holding()
}

// release writes the table's partial states and the chain's dead letters into the open
// transaction, before the record at offset off, from which the table starts again.
func (t *Task) release(c *chain, off int64) {
	t.writePartials(c, t.d.Producer, t.out.promise)
	for _, r := range c.dlq {
		t.d.Producer.Produce(r, t.out.promise)
	}
	c.dlq = nil
	c.comb.from = off
}

// reset forgets what the combiner holds (an abort: the records it came from are read again).
func (cb *combiner) reset() {
	if cb.part != nil {
		cb.part.reset()
		cb.ts, cb.mixed = math.MinInt64, false
	}
	if cb.seen != nil {
		cb.seen.reset()
	}
	if cb.best != nil {
		cb.best.reset()
	}
}

// flushCombined writes, at a checkpoint, the partial state of each key the writer c holds to
// its repartition topic through p and empties the table, unless it is held (held); it returns
// the number of records written.
func (t *Task) flushCombined(c *chain, p Producer, promise func(*kgo.Record, error)) int {
	if c.held() {
		return 0
	}
	return t.writePartials(c, p, promise)
}

// writePartials writes the partial state of each key of c's table through p, in key order, and
// empties the table; it returns the number of records written.
func (t *Task) writePartials(c *chain, p Producer, promise func(*kgo.Record, error)) int {
	cb := c.comb
	if cb == nil || cb.part == nil || cb.part.len() == 0 {
		return 0
	}
	ts := time.UnixMilli(cb.ts)
	keys := cb.part.sortedKeys() // in key order, the same on every run
	for _, k := range keys {
		st, _ := cb.part.get([]byte(k))
		key, value := []byte(k), []byte(nil)
		switch {
		case cb.sess != nil:
			value = t.arena.clone(cb.sess.PartialBytes(st))
		case cb.agg.Closes():
			// A window's partial: under its group key (the partition of the group's records),
			// the window's start before the state.
			gk, start, _ := codec.SplitWindowKey(key)
			key = gk
			value = append(binary.BigEndian.AppendUint64(t.arena.alloc(8+len(st)), uint64(start)), st...)
		default:
			value = t.arena.clone(st)
		}
		r := t.arena.record()
		r.Topic, r.Partition, r.Key, r.Value, r.Headers, r.Timestamp = c.plan.SinkTopic, -1, key, value, cb.headers, ts
		p.Produce(r, promise)
	}
	cb.reset()
	c.recordsOut += int64(len(keys))
	return len(keys)
}

// applyPartial merges a partial state a combining writer wrote (kr, under layout fingerprint
// fp) into its key's state, as apply folds a record: in backlog into the key's partial (or
// the sorter, tagged), in real time into its cache entry.
func (t *Task) applyPartial(c *chain, kr *kgo.Record, fp string) error {
	if c.kop != nil {
		return t.applyKeyedPartial(c, kr, fp)
	}
	agg := c.ops.Agg
	if agg == nil || agg.Closes() && (c.slices.w != nil || c.plan.WindowFinals) {
		t.deadLetterReason(c, kr, c.plan.Keyed.Name, "a partial state (header "+codec.HeaderPartial+"), which only an aggregate or a cogroup without windows, or over tumbling windows, reads", nil)
		return nil
	}
	if fp != c.layout.fingerprint {
		return t.partialLayoutError(c, fp)
	}
	key, st, time := kr.Key, kr.Value, kr.Timestamp.UnixMilli()
	if agg.Closes() {
		// A window's partial: the window's start, then the state (writePartials), merged into
		// the window's state unless the watermark closed the window (it is late).
		if len(st) < 8 || !t.windowOf(c, kr.Key, int64(binary.BigEndian.Uint64(st))) || len(kr.Key) == 0 {
			t.deadLetterReason(c, kr, c.plan.Keyed.Name, fmt.Sprintf("a partial state of %d bytes that does not start with the start of one of %s's windows", len(st), c.plan.Keyed.Name), nil)
			return nil
		}
		key, st, time = c.wk, st[8:], int64(binary.BigEndian.Uint64(st))
		if at, _ := agg.CloseAt(key); at <= c.ownWatermark() {
			t.lateRecord(c, kr)
			return nil
		}
	}
	if len(kr.Key) == 0 || !agg.ValidState(st) {
		t.deadLetterReason(c, kr, c.plan.Keyed.Name, fmt.Sprintf("a partial state of %d bytes with a key of %d bytes, not one of this operator's: %s", len(st), len(kr.Key), stateSizes(c.ops)), nil)
		return nil
	}
	c.rec.Key, c.rec.Value, c.rec.Time = kr.Key, nil, time
	c.scratch = append(append(c.scratch[:0], tagPartial), st...)
	if err := t.apply(c, key, kr.Offset, c.scratch); err != nil {
		return err
	}
	t.countBacklog(c)
	return nil
}

// partialLayoutError is the error of a partial state written under layout fingerprint fp, not
// the reader c's.
func (t *Task) partialLayoutError(c *chain, fp string) error {
	e := t.layoutError(c)
	e.Detail = fmt.Sprintf("a writer of %s combined records under another layout (fingerprint %q, this config's %q): run one config in the whole group", c.plan.Source.Topic, fp, c.layout.fingerprint)
	return e
}

// windowOf reports whether start is the start of the window of c's aggregate (tumbling) that
// holds it, leaving that window's key for group key key in c.wk.
func (t *Task) windowOf(c *chain, key []byte, start int64) bool {
	if start < operators.MinTime || start > operators.MaxTime {
		return false // no record's window: its arithmetic stays far from int64's ends
	}
	n := 0
	var err error
	c.wk, _, err = c.ops.Agg.Assign(c.wk[:0], key, start, math.MinInt64, func([]byte) error {
		n++
		return nil
	})
	if err != nil || n != 1 {
		return false
	}
	_, s, ok := codec.SplitWindowKey(c.wk)
	return ok && s == start
}
