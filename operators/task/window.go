package task

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/state"
)

// Event time, windows and timers of a windowed aggregate.
//
// Watermark. A chain's watermark is the largest event time of the records decoded from its
// input partition, minus the source's watermark.max_delay. It moves with the offsets processed,
// in offset order, in both modes; so does every decision taken from it: a record is late for a
// window when the watermark, including the record itself, has reached the window's end + grace.
// Lateness is decided when a record is processed (real-time) or taken into the backlog (before
// it is sorted), so both modes drop the same records, and a (key, window) receives the same
// records in both. The watermark is committed with the input offsets: in the store
// (codec.WatermarkNamespace) and as a changelog record, so a restore anywhere resumes it.
//
// Windows. A record's windows are folded as composite keys, the group key followed by the
// window start (codec.AppendWindowKey): the cache, pre-aggregation, the sorter, the store
// and the changelog handle them like plain keys.
//
// Timers. A window's timer is its close time, end + grace. Timers of committed windows live in
// the store (codec.TimerNamespace, key = close time then window key: codec.AppendTimerKey, so a
// scan visits them in time order), written and deleted in the checkpoint batch that writes and deletes the
// window's state; timers of windows created since the last commit wait in a heap. In real-time
// mode, the timers up to the watermark fire after each record: the window is marked closing,
// and the next checkpoint emits its final result (emit: final), tombstones its changelog
// record and deletes its state and timer. In backlog mode the fold closes each window whose
// close time the backlog's final watermark has reached as it passes the window's key, then
// fires the stored timers up to that watermark of windows the backlog did not touch (sweep).
// The store's timers are rebuilt from the state when a task starts (Restored), so a restore
// from the changelog (which carries states, not timers) has them too.

// splitTimerKey is codec.SplitTimerKey for a key read from a timer namespace: one too short to
// be a timer key is a corrupt store.
func splitTimerKey(tk []byte) (at int64, wk []byte, err error) {
	at, wk, ok := codec.SplitTimerKey(tk)
	if !ok {
		return 0, nil, fmt.Errorf("%w: timer key %x of %d bytes", state.ErrCorrupt, tk, len(tk))
	}
	return at, wk, nil
}

// timer is a window's close time and key.
type timer struct {
	at  int64
	key string
}

// timerHeap orders timers by close time, then key.
type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].key < h[j].key
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// timers is a real-time windowed chain's timer service: the heap of windows created since the
// last commit, and the earliest time a stored timer may fire.
type timers struct {
	added  timerHeap
	stored int64 // no stored timer is due before this; math.MinInt64: scan to find out
}

// reset forgets the heap (after a commit its windows' timers are stored; after an abort the
// windows are gone) and makes the next advance scan the store.
func (tm *timers) reset() {
	tm.added = tm.added[:0]
	tm.stored = math.MinInt64
}

var errStopScan = errors.New("task: stop scan")

// timed reports whether a chain runs on event time (windows, or a Keyed operator).
func (c *chain) timed() bool { return c.kop != nil || c.ops.Agg != nil && c.ops.Agg.Closes() }

// tracksTime reports whether a chain keeps a watermark of its input: it runs on event time, or
// it re-keys into a repartition topic and announces its input's watermark there.
func (c *chain) tracksTime() bool { return c.timed() || c.plan.Rekey != "" }

// pushTimer registers the timer of a key (or window key) set since the last commit.
func pushTimer(c *chain, at int64, key []byte) {
	heap.Push(&c.tm.added, timer{at: at, key: string(key)})
}

// lateRecord sends a record whose windows are all closed to the dead-letter topic, with the
// watermark it was judged late by (its input's: ownWatermark), which depends only on its input.
func (t *Task) lateRecord(c *chain, kr *kgo.Record) {
	c.late++
	t.d.Metrics.lateRecord(c.plan.Keyed.Name)
	t.deadLetterReason(c, kr, c.plan.Keyed.Name, "late", []kgo.RecordHeader{codec.LateHeader(c.ownWatermark())})
}

// observeTime advances the watermark of a windowed chain, or of a re-keying one (which
// announces it to its readers), with the event time of a decoded record.
func (c *chain) observeTime(ts int64, now time.Time) {
	if !c.tracksTime() || c.ended || c.writers != nil {
		return // a reader of a timed topic takes its writers' watermarks (attributes.go)
	}
	w := ts - c.maxDelay
	if w > ts { // underflow
		w = math.MinInt64
	}
	if w > c.iwm {
		c.iwm = w
	}
	c.syncWatermark(now)
}

// syncWatermark sets the operator's watermark from its inputs': the smallest of them, leaving
// out idle inputs (caught up and without a record for watermark.idle_after; if every input is
// idle, the largest). It never goes back.
func (c *chain) syncWatermark(now time.Time) {
	m, hi, active := int64(math.MaxInt64), int64(math.MinInt64), 0
	for _, o := range c.chains {
		hi = max(hi, o.iwm)
		if len(c.chains) > 1 && o.idle(now) {
			continue
		}
		active++
		m = min(m, o.iwm)
	}
	if active == 0 {
		m = hi
	}
	if m > c.wm {
		c.wm = m
	}
}

// idle reports whether the chain's input has caught up and seen no record for idle_after.
func (c *chain) idle(now time.Time) bool {
	return c.idleAfter > 0 && c.lag == 0 && now.Sub(c.lastSeen) >= c.idleAfter
}

// ownWatermark is the watermark a record of c's input is judged late by: its input's, or the
// operator's if that is ahead (an idle input let it pass, and the windows it closed stay
// closed). For an operator of one input it is the operator's.
func (c *chain) ownWatermark() int64 {
	if len(c.chains) > 1 {
		return max(c.iwm, c.wm)
	}
	return c.wm
}

// applyMergeable folds the current record's projected input (c.scratch) into each state key
// the operator assigns it (the key; a window key per window still open at the watermark, or
// for the finals of windows, plan.ChainPlan.WindowFinals, their own window); a record whose
// windows are all closed is late and becomes a dead letter. A slicing operator's backlog takes
// it under its slice's key where it can (slice.go).
func (t *Task) applyMergeable(c *chain, kr *kgo.Record) error {
	var late bool
	var err error
	assign := c.assign
	if c.inBack && c.slices.w != nil {
		if sliced, err := t.applySlice(c); sliced || err != nil {
			return err
		}
		assign = c.sortAssign
	}
	if c.plan.WindowFinals {
		c.wk, late, err = c.ops.Agg.AssignFinal(c.wk, c.rec.Key, c.rec.Time, c.ownWatermark(), assign)
	} else {
		c.wk, late, err = c.ops.Agg.Assign(c.wk, c.rec.Key, c.rec.Time, c.ownWatermark(), assign)
	}
	if late {
		t.lateRecord(c, kr)
	}
	return err
}

// fireTimers closes, in real-time mode, every window whose close time the watermark has
// reached: the windows created since the last commit (heap), then the stored ones (a scan of
// the timer namespace in time order, only when the earliest stored timer may be due).
func (t *Task) fireTimers(c *chain) error {
	fire := func(key []byte, at int64) error { return t.closeWindow(c, key) }
	if c.kop != nil {
		fire = func(key []byte, at int64) error { return t.fireKeyed(c, key, at) }
	}
	for len(c.tm.added) > 0 && c.tm.added[0].at <= c.wm {
		tm := heap.Pop(&c.tm.added).(timer)
		if err := fire([]byte(tm.key), tm.at); err != nil {
			return err
		}
	}
	if c.tm.stored > c.wm {
		return nil
	}
	next := int64(math.MaxInt64)
	err := t.d.Store.Scan(c.timerNS, func(k, _ []byte) error {
		at, wk, err := splitTimerKey(k)
		if err != nil {
			return err
		}
		if at > c.wm {
			next = at
			return errStopScan
		}
		return fire(wk, at)
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return fmt.Errorf("task %d: timers: %w", t.partition, err)
	}
	c.tm.stored = next
	return nil
}

// timedResult gives r the event time ts (MinInt64: none) when later operators read the
// chain's results by event time.
func (c *chain) timedResult(r *kgo.Record, ts int64) *kgo.Record {
	if c.plan.TimedOutput && ts != math.MinInt64 {
		r.Timestamp = time.UnixMilli(ts)
	}
	return r
}

// produceResult renders the result of the mergeable operator's state key k (state st) and
// produces it unless the chain's filter drops it (keepsResult, asked of a view of the rendered
// result before anything is copied: a filter drops most of what it examines, Nexmark q5's
// window finals); the record produced owns copies of its key and value. It reports whether it
// produced.
func (c *chain) produceResult(k, st []byte, p Producer, pd *Pending) bool {
	var kl int
	var ts int64
	c.rendered, kl, ts = c.ops.Agg.Result(k, st, c.rendered[:0])
	var v []byte // nil: a row that left (Result wrote nothing), a tombstone
	if len(c.rendered) > 0 {
		v = c.rendered
	}
	r := c.timedResult(&kgo.Record{Topic: c.plan.SinkTopic, Key: k[:kl:kl], Value: v, Partition: -1}, ts)
	if !keepsResult(c, r) {
		return false
	}
	r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(v)
	p.Produce(r, pd.promise)
	c.recordsOut++
	pd.records++
	return true
}

// outputLag is how far behind its operator's watermark the event time of a result the chain
// emits later can lie: a window's grace, or a Keyed operator's OutputLag.
func (c *chain) outputLag() int64 {
	if tr, ok := c.kop.(operators.TimedResults); ok {
		return tr.OutputLag()
	}
	if c.kop == nil && c.ops.Agg != nil {
		return c.ops.Agg.OutputLag()
	}
	return 0
}

// closedAt records that a window closing at at closed; after the end of input, the latest such
// close is the watermark committed (see checkpointWatermark).
func (c *chain) closedAt(at int64) {
	if c.ended && at > c.endWM {
		c.endWM = at
	}
}

// closeWindow marks window key wk closing: the next checkpoint emits its final result and
// deletes it. A window already closing, or gone (closed and committed), is left alone.
func (t *Task) closeWindow(c *chain, wk []byte) error {
	e, err := t.load(c, wk, false)
	if err != nil {
		return fmt.Errorf("task %d: state: %w", t.partition, err)
	}
	if e == nil || e.closing {
		return nil
	}
	e.closing = true
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
	return nil
}

// flushMergeable writes a real-time mergeable chain's dirty states: an open state's state,
// changelog record and (new) timer, and its current result (emit: updates); a closing
// window's final result (emit: final, or emit: updates when it changed since the last
// checkpoint), its changelog tombstone and the deletion of its state and timer. The states are
// not touched again before the transaction ends (the task waits for the outcome), so the
// records may alias them.
func (t *Task) flushMergeable(c *chain, p Producer, pd *Pending) error {
	if pd.batch == nil {
		pd.batch = t.d.Store.NewBatch()
	}
	agg := c.ops.Agg
	final := agg.Emit() == "final"
	cl := pd.changelogPromise(c.ns)
	var tk []byte
	out := 0
	for _, e := range c.dirty {
		if c.plan.OutputChangelog {
			// The result is the changelog record (unwindowed: nothing closes).
			v, _, _ := agg.Result(e.key, e.state, nil)
			p.Produce(&kgo.Record{Topic: c.plan.SinkTopic, Partition: t.partition, Key: e.key, Value: v, Headers: c.changelogHeaders(false)}, cl)
			c.recordsOut++
			pd.records++
			out++
			if err := pd.batch.Set(c.ns, e.key, e.state); err != nil {
				return err
			}
			continue
		}
		at, closes := agg.CloseAt(e.key)
		if c.plan.SinkTopic != "" && (e.closing && final || !final && e.updated) {
			if c.produceResult(e.key, e.state, p, pd) {
				out++
			}
		}
		tk = codec.AppendTimerKey(tk[:0], at, e.key)
		if e.closing {
			c.closedAt(at)
			if !e.stored {
				continue // never written: nothing to delete
			}
			p.Produce(&kgo.Record{Topic: c.plan.Changelog, Partition: t.partition, Key: e.key}, cl)
			pd.records++
			if err := pd.batch.Delete(c.ns, e.key); err != nil {
				return err
			}
			if err := pd.batch.Delete(c.timerNS, tk); err != nil {
				return err
			}
			continue
		}
		p.Produce(&kgo.Record{Topic: c.plan.Changelog, Partition: t.partition, Key: e.key, Value: e.state, Headers: c.changelogHeaders(false)}, cl)
		pd.records++
		if err := pd.batch.Set(c.ns, e.key, e.state); err != nil {
			return err
		}
		if !e.stored && closes {
			if err := pd.batch.Set(c.timerNS, tk, nil); err != nil {
				return err
			}
		}
	}
	t.d.Metrics.recordsOut(c.outTopic(), out)
	pd.flushed = append(pd.flushed, c)
	return nil
}

// committedMergeable applies a committed flush to the cache: closed windows leave it, the
// others are stored and clean.
func (c *chain) committedMergeable() {
	for _, e := range c.dirty {
		if e.closing {
			delete(c.cache, string(e.key))
			continue
		}
		e.stored = true
		e.updated = false
	}
}

// checkpointWatermark writes a windowed chain's watermark when its offset moves in this
// checkpoint: a changelog record and the store, so both match the offset committed with them.
// A chain whose output topic is its changelog writes none there: its operator (a top without
// window, an aggregate without window) decides nothing by event time.
func (t *Task) checkpointWatermark(c *chain, p Producer, pd *Pending) error {
	if !c.timed() || c.plan.OutputChangelog {
		return nil
	}
	n := pd.next[c]
	if n.off <= c.done.off && !(c.ended && c.buffered() == 0) {
		// The watermark moves with the chain's own progress (not its topic's offset, which
		// another chain reading the topic may move while this one holds a backlog); an ended
		// input has no progress to make.
		return nil
	}
	for i, m := range c.writers {
		// A reader of timed results commits what it knows of each writer with its offset.
		if m != c.done.writers[i] {
			v := codec.AppendWriterMark(nil, m.wm, m.idle)
			if err := t.writeWatermarkValue(c, codec.WriterWatermarkKey(c.input, i), v, p, pd); err != nil {
				return err
			}
			n.writers[i] = m
		}
	}
	if len(c.chains) > 1 && c.iwm != c.done.iwm {
		// An operator of several inputs commits each input's watermark with its offset.
		if err := t.writeWatermark(c, codec.InputWatermarkKey(c.input), c.iwm, p, pd); err != nil {
			return err
		}
		n.iwm = c.iwm
	}
	op := pd.next[c.chains[0]]
	if op.wm != c.committedWM() || c.wm == c.committedWM() {
		return nil // written by another input's chain of the operator, or unmoved
	}
	wm := c.wm
	if c.ended {
		// The end of input closed windows that the data's watermark had not: commit the latest
		// of their close times, not +infinity, so that a later run treats records of those
		// windows as late (each window has one final) and later windows as open.
		wm = c.endWM
		if wm == c.committedWM() {
			return nil
		}
	}
	if err := t.writeWatermark(c, codec.WatermarkKey, wm, p, pd); err != nil {
		return err
	}
	op.wm = wm
	return nil
}

// writeWatermark writes a watermark under key into the changelog and the checkpoint's batch.
func (t *Task) writeWatermark(c *chain, key []byte, wm int64, p Producer, pd *Pending) error {
	return t.writeWatermarkValue(c, key, codec.AppendWatermark(nil, wm), p, pd)
}

// writeWatermarkValue is writeWatermark with the value encoded: codec.AppendWatermark, or for
// a writer's mark codec.AppendWriterMark.
func (t *Task) writeWatermarkValue(c *chain, key, v []byte, p Producer, pd *Pending) error {
	p.Produce(&kgo.Record{
		Topic: c.plan.Changelog, Partition: t.partition, Key: key, Value: v,
		Headers: codec.WatermarkRecordHeaders(),
	}, pd.changelogPromise(c.ns))
	pd.records++
	if pd.batch == nil {
		pd.batch = t.d.Store.NewBatch()
	}
	return pd.batch.Set(codec.WatermarkNamespace(c.ns), key, v)
}

// restoreWindows loads a windowed chain's committed watermark and rebuilds its timers from its
// stored windows (a changelog restore brings states, not timers).
func (t *Task) restoreWindows(c *chain) error {
	op := &c.chains[0].done
	c.wm, op.wm = math.MinInt64, math.MinInt64
	wm, err := t.storedWatermark(c, codec.WatermarkKey)
	if err != nil {
		return err
	}
	c.wm, op.wm = wm, wm
	c.iwm, c.done.iwm = wm, wm
	if len(c.chains) > 1 {
		// Each input's own watermark (an operator of several inputs commits them too).
		if c.iwm, err = t.storedWatermark(c, codec.InputWatermarkKey(c.input)); err != nil {
			return err
		}
		c.done.iwm = c.iwm
	}
	for i := range c.writers {
		v, ok, err := t.d.Store.Get(codec.WatermarkNamespace(c.ns), codec.WriterWatermarkKey(c.input, i), nil)
		if err != nil {
			return err
		}
		if !ok {
			c.writers[i] = writerMark{wm: math.MinInt64}
			continue
		}
		wm, idle, ok := codec.ParseWriterMark(v)
		if !ok {
			return fmt.Errorf("task %d: %s: stored mark of writer %d is %d bytes, want 8 or 9", t.partition, c.plan.Keyed.Name, i, len(v))
		}
		c.writers[i] = writerMark{wm: wm, idle: idle}
	}
	if c.writers != nil {
		copy(c.done.writers, c.writers)
		c.iwm = minWriter(c.writers)
		c.done.iwm = c.iwm
	}
	if !c.primary {
		return nil // the operator's timers are the primary chain's to rebuild
	}
	if c.kop != nil {
		return t.restoreKeyedTimers(c)
	}
	return t.rebuildTimers(c, func(k, _ []byte) (int64, bool, error) {
		at, ok := c.ops.Agg.CloseAt(k)
		if !ok {
			return 0, false, fmt.Errorf("%s: stored key %q is not a window key", c.plan.Keyed.Name, k)
		}
		return at, true, nil
	})
}

// storedWatermark returns the watermark stored under key for c's operator, or MinInt64.
func (t *Task) storedWatermark(c *chain, key []byte) (int64, error) {
	v, ok, err := t.d.Store.Get(codec.WatermarkNamespace(c.ns), key, nil)
	if err != nil || !ok {
		return math.MinInt64, err
	}
	wm, ok := codec.ParseWatermark(v)
	if !ok {
		return 0, fmt.Errorf("task %d: %s: stored watermark %q is %d bytes, want 8", t.partition, c.plan.Keyed.Name, key, len(v))
	}
	return wm, nil
}

// rebuildTimers replaces a chain's timer namespace with the timers of its stored states (timerOf
// returns a state's timer, if it has one).
func (t *Task) rebuildTimers(c *chain, timerOf func(k, v []byte) (int64, bool, error)) error {
	if err := t.d.Store.Drop(c.timerNS); err != nil {
		return err
	}
	b := t.d.Store.NewBatch()
	defer func() { b.Close() }()
	var tk []byte
	err := t.d.Store.Scan(c.ns, func(k, v []byte) error {
		at, ok, err := timerOf(k, v)
		if err != nil || !ok {
			return err
		}
		tk = codec.AppendTimerKey(tk[:0], at, k)
		if err := b.Set(c.timerNS, tk, nil); err != nil {
			return err
		}
		if b.Len() >= 10000 {
			if err := b.Commit(); err != nil {
				return err
			}
			b.Close()
			b = t.d.Store.NewBatch()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("task %d: %w", t.partition, err)
	}
	c.tm.reset()
	return b.Commit()
}

// sweepTimers fires, at the end of a backlog fold, the stored timers up to the backlog's final
// watermark wm of windows the fold did not close (closed: the windows it closed that were stored).
// Their final values go out (emit: final), their changelog records are tombstoned and their
// state deleted; every swept timer is deleted.
func (t *Task) sweepTimers(c *chain, wm int64, closed map[string]struct{}, p Producer, pd *Pending) error {
	if pd.batch == nil {
		pd.batch = t.d.Store.NewBatch()
	}
	agg := c.ops.Agg
	final := agg.Emit() == "final"
	cl := pd.changelogPromise(c.ns)
	out := 0
	var st []byte
	err := t.d.Store.Scan(c.timerNS, func(k, _ []byte) error {
		at, wk, err := splitTimerKey(k)
		if err != nil {
			return err
		}
		if at > wm {
			return errStopScan
		}
		if err := pd.batch.Delete(c.timerNS, k); err != nil {
			return err
		}
		c.closedAt(at)
		if _, done := closed[string(wk)]; done {
			return nil
		}
		v, ok, err := t.d.Store.Get(c.ns, wk, st[:0])
		if err != nil || !ok {
			return err
		}
		st = v
		if final && c.plan.SinkTopic != "" {
			if c.produceResult(wk, v, p, pd) {
				out++
			}
		}
		k2 := append([]byte(nil), wk...)
		p.Produce(&kgo.Record{Topic: c.plan.Changelog, Partition: t.partition, Key: k2}, cl)
		pd.records++
		return pd.batch.Delete(c.ns, wk)
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return fmt.Errorf("task %d: timers: %w", t.partition, err)
	}
	t.d.Metrics.recordsOut(c.outTopic(), out)
	return nil
}

// EndInput tells the task that topic's input has ended (a bounded run reached the end offsets
// it had at start): the watermark of its windowed chains becomes +infinity, so every window
// closes, and chains in backlog fold and stream. The caller then checkpoints; Finished reports
// when that checkpoint has committed everything.
func (t *Task) EndInput(topic string) error {
	t.must("EndInput", phaseIdle)
	for _, c := range t.byTopic[topic] {
		c.inputEnded = true
		if !c.ops.Keyed() {
			c.ended = true
			continue
		}
		t.needCkpt = true
		if slices.ContainsFunc(c.chains, func(o *chain) bool { return !o.inputEnded }) {
			continue // an operator of several inputs ends with the last of them
		}
		c.ended = true
		if !c.timed() {
			continue
		}
		if c.wm != math.MaxInt64 {
			c.endWM = c.wm
		}
		c.wm = math.MaxInt64
		if !c.inBack {
			if err := t.fireTimers(c); err != nil {
				return err
			}
		}
	}
	t.publish()
	return nil
}

// Finished reports whether every chain's input has ended (EndInput) and everything it
// processed is committed: no backlog, no dirty state, no offset left to commit. An abort
// after EndInput makes it false until the input is processed and ended again.
func (t *Task) Finished() bool {
	for _, c := range t.chains {
		if !c.inputEnded || !c.ended || c.inBack || len(c.dirty) > 0 || c.next > c.done.off {
			return false
		}
	}
	return true
}
