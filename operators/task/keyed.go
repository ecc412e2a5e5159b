package task

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
)

// The runtime of operators.Keyed operators (session windows): the operators whose results depend
// on the order of their inputs and on time, which therefore cannot be pre-aggregated.
//
// Both modes make the same calls. In real-time mode each record is Processed as it arrives
// (Context.Watermark = the watermark including the record), and after it the due timers fire
// (heap and stored timers, as for windows: window.go). In backlog mode each record is sorted by
// (key, watermark before it, offset), carrying its event time and the watermark including it;
// the switch's fold replays each key's records in that order, firing the key's timer before the
// first record that arrived after the watermark reached it, Processing each record at its own
// watermark, and at the end of the key firing the timers up to the backlog's final watermark; a
// sweep then fires the stored timers up to that watermark of keys the backlog did not touch.
// For one key that is the order of the real-time run, so the state and every output are the same.
//
// A key has one state value and at most one timer. The stored value is the key's timer (a flag
// and the time) followed by the operator's state (codec.AppendKeyed), so a restore from the
// changelog rebuilds the timer namespace from the states (restoreTimers). Backlog checkpoints
// (backlog.checkpoint_interval) do not apply: such a chain folds at the switch only.

// parseKeyed loads a stored value (codec.AppendKeyed) into e (copying the state).
func parseKeyed(e *entry, v []byte) error {
	hasTimer, timer, st, err := codec.ParseKeyed(v)
	if err != nil {
		return err
	}
	e.hasTimer, e.timer = hasTimer, timer
	e.hasStoredTimer, e.storedTimer = e.hasTimer, e.timer
	e.state = append(e.state[:0], st...)
	e.stored = true
	return nil
}

// keyedCtx is the operators.Context of one key. In real-time mode it works on the key's cache
// entry (marked dirty on change); in a fold on the fold's entry of the key.
type keyedCtx struct {
	t    *Task
	c    *chain
	e    *entry
	wm   int64
	fold bool
	emit func(key, value []byte, ts int64)
	// row, for a chain whose rows are its changelog (plan.OutputChangelog), emits instead of
	// emit: each row with the key whose state it is part of (rowsTo).
	row func(stateKey, key, value []byte)
}

func (k *keyedCtx) Watermark() int64 { return k.wm }

func (k *keyedCtx) State() []byte {
	if k.e.deleted || len(k.e.state) == 0 {
		return nil
	}
	return k.e.state
}

func (k *keyedCtx) Put(st []byte) {
	k.e.state = append(k.e.state[:0], st...)
	k.e.deleted = false
	k.mark()
}

func (k *keyedCtx) Append(b []byte) {
	if k.e.deleted {
		k.e.state = k.e.state[:0]
	}
	// A slice State returned ends at the state's length, so appending in place leaves its
	// bytes as they were.
	k.e.state = append(k.e.state, b...)
	k.e.deleted = false
	k.mark()
}

func (k *keyedCtx) Delete() {
	k.e.state = k.e.state[:0]
	k.e.deleted = true
	k.e.hasTimer = false
	k.mark()
}

func (k *keyedCtx) SetTimer(at int64) {
	if k.e.hasTimer && k.e.timer == at {
		return
	}
	k.e.hasTimer, k.e.timer = true, at
	k.mark()
	if !k.fold {
		pushTimer(k.c, at, k.e.key)
	}
}

func (k *keyedCtx) ClearTimer() {
	k.e.hasTimer = false
	k.mark()
}

func (k *keyedCtx) Emit(value []byte) { k.EmitAt(value, math.MinInt64) }

func (k *keyedCtx) EmitAt(value []byte, ts int64) {
	if k.row != nil {
		k.row(k.e.key, k.e.key, value)
		return
	}
	k.emit(k.e.key, value, ts)
}

func (k *keyedCtx) EmitKey(key, value []byte) {
	if k.row != nil {
		k.row(k.e.key, key, value)
		return
	}
	k.emit(key, value, math.MinInt64)
}

// askBeforeWriting lets keyedCtx answer operators.ResultFilter (a variable for the tests, which
// compare the results with and without it).
var askBeforeWriting = true

// FilterMember is operators.ResultFilter's: the member the chain's filter for its reader's top
// ranks its results by (combine.go dropsResult, whose first question DropsBeaten asks early).
// Only where a result is produced as it is emitted (fold: a fold, or a checkpoint's flush,
// through emitTo, with this chain's filter): the question then meets the filter as
// dropsResult would, in the same state. In real time a result waits in the operator's outbox
// until the checkpoint, where the primary chain's filter judges it after those before it (its
// slots may be reset meanwhile, or its skip window open): "" there.
func (k *keyedCtx) FilterMember() string {
	c := k.c
	if !askBeforeWriting || !k.fold || c.comb == nil || c.plan.Rekey != "" || c.plan.SinkTopic == "" {
		return "" // keepsResult keeps every result, or asks later
	}
	return c.comb.beatenMember()
}

// DropsBeaten is operators.ResultFilter's: whether dropsResult would drop the key's result
// (emitted under the context's key) before anything else is asked of it (its FilterMember's
// value beaten), asked before the operator writes it; false when FilterMember is "".
func (k *keyedCtx) DropsBeaten(raw []byte, size int) bool {
	if k.FilterMember() == "" {
		return false
	}
	return k.c.comb.dropsBeatenMember(k.e.key, raw, size)
}

func (k *keyedCtx) mark() {
	if !k.fold && !k.e.dirty {
		k.e.dirty = true
		k.c.dirty = append(k.c.dirty, k.e)
	}
}

// emitNow holds a real-time output for the next checkpoint, whose transaction carries it with
// the offsets and state it follows from (an abort drops it with them).
func (t *Task) emitNow(c *chain) func(key, value []byte, ts int64) {
	return func(key, value []byte, ts int64) {
		if c.plan.SinkTopic == "" {
			return
		}
		c.outbox = append(c.outbox, c.timedResult(t.arena.out(c.plan.SinkTopic, -1, key, value), ts))
	}
}

// applyKeyed takes one decoded, projected record of a keyed chain (in, after its tag byte;
// tagPartial: a combining writer's partial state, merged, c.rec.Time its earliest event time):
// late records become dead letters; in backlog the record is sorted; in real time it is
// Processed. wmPrev is the watermark before the record, c.wm the one including it.
func (t *Task) applyKeyed(c *chain, kr *kgo.Record, in []byte, wmPrev int64) error {
	if c.kop.IsLate(c.input, c.rec.Time, c.ownWatermark()) {
		t.lateRecord(c, kr)
		return nil
	}
	if c.inBack {
		p := append(c.wk[:0], in[0])
		p = binary.BigEndian.AppendUint64(p, uint64(c.wm))
		p = binary.BigEndian.AppendUint64(p, uint64(c.rec.Time))
		c.wk = append(p, in[1:]...)
		// The arrival sequence, not the offset, breaks ties of the watermark: an operator of
		// several inputs replays a key's records in the order they arrived across its inputs
		// (offsets of different topics do not compare).
		c.arrivals++
		held := false
		var err error
		if c.last != nil {
			held, err = c.last.add(c.rec.Key, wmPrev, c.arrivals, c.wk, c.sorter.Add)
		}
		if err == nil && !held {
			err = c.sorter.Add(c.rec.Key, wmPrev, c.arrivals, c.wk)
		}
		if err != nil {
			return fmt.Errorf("task %d: sorter: %w", t.partition, err)
		}
		return nil
	}
	e, err := t.loadKeyed(c, c.rec.Key)
	if err != nil {
		return err
	}
	kc := keyedCtx{t: t, c: c, e: e, wm: c.wm, emit: t.emitNow(c)}
	return t.processKeyed(c, &kc, e.key, c.rec.Time, in[0], in[1:])
}

// processKeyed calls the operator of c with in, of key at ts: a projected record's input, or
// for tag tagPartial a partial state.
func (t *Task) processKeyed(c *chain, kc *keyedCtx, key []byte, ts int64, tag byte, in []byte) error {
	var err error
	if tag == tagPartial {
		err = c.kop.(operators.PartialMerger).MergePartial(kc, key, in)
	} else {
		err = c.kop.Process(kc, key, ts, in)
	}
	if err != nil {
		return fmt.Errorf("task %d: %s: %w", t.partition, c.kop.Name(), err)
	}
	return nil
}

// applyKeyedPartial takes a partial state a combining writer wrote (kr, under layout
// fingerprint fp) into c's keyed operator, as applyKeyed takes a record: judged late by its
// earliest event time, sorted in backlog, merged in real time.
func (t *Task) applyKeyedPartial(c *chain, kr *kgo.Record, fp string) error {
	pm, ok := c.kop.(operators.PartialMerger)
	if !ok || len(c.chains) > 1 { // a session cogroup's writers never combine
		t.deadLetterReason(c, kr, c.plan.Keyed.Name, "a partial state (header "+codec.HeaderPartial+"), which "+c.kop.Name()+" does not merge", nil)
		return nil
	}
	if fp != c.layout.fingerprint {
		return t.partialLayoutError(c, fp)
	}
	start, ok := pm.PartialStart(kr.Value)
	if len(kr.Key) == 0 || !ok {
		t.deadLetterReason(c, kr, c.plan.Keyed.Name, fmt.Sprintf("not a partial state of %s: %d bytes with a key of %d bytes", c.kop.Name(), len(kr.Value), len(kr.Key)), nil)
		return nil
	}
	c.rec.Key, c.rec.Value, c.rec.Time = kr.Key, nil, start
	c.scratch = append(append(c.scratch[:0], tagPartial), kr.Value...)
	if err := t.applyKeyed(c, kr, c.scratch, c.wm); err != nil {
		return err
	}
	t.countBacklog(c)
	return nil
}

// loadKeyed returns key's cache entry of a keyed chain, reading the store on a miss (an absent
// key gets an empty entry).
func (t *Task) loadKeyed(c *chain, key []byte) (*entry, error) {
	if e, ok := c.cache[string(key)]; ok {
		return e, nil
	}
	t.makeRoom(c)
	e := &entry{key: bytes.Clone(key)}
	v, ok, err := t.d.Store.Get(c.ns, key, nil)
	if err != nil {
		return nil, fmt.Errorf("task %d: state: %w", t.partition, err)
	}
	if ok {
		if err := parseKeyed(e, v); err != nil {
			return nil, fmt.Errorf("task %d: %s: key %q: %w", t.partition, c.kop.Name(), key, err)
		}
	}
	c.cache[string(e.key)] = e
	return e, nil
}

// fireKeyed fires key's timer at in real-time mode, unless it is stale (the key's timer moved).
func (t *Task) fireKeyed(c *chain, key []byte, at int64) error {
	e, err := t.loadKeyed(c, key)
	if err != nil {
		return err
	}
	if !e.hasTimer || e.timer != at || e.deleted {
		return nil
	}
	kc := keyedCtx{t: t, c: c, e: e, wm: c.wm, emit: t.emitNow(c)}
	if err := c.kop.OnTimer(&kc, e.key, at); err != nil {
		return fmt.Errorf("task %d: %s: %w", t.partition, c.kop.Name(), err)
	}
	return nil
}

// flushKeyed writes a real-time keyed chain's dirty keys: state (with its timer) and changelog
// record, or deletion and tombstone, and the timer's move.
func (t *Task) flushKeyed(c *chain, p Producer, pd *Pending) error {
	if pd.batch == nil {
		pd.batch = t.d.Store.NewBatch()
	}
	cl := pd.changelogPromise(c.ns)
	out := 0
	emit, release := t.emitTo(c, p, pd, &out)
	row := t.rowsTo(c, p, pd, &out)
	defer func() { t.d.Metrics.recordsOut(c.outTopic(), out) }()
	for _, e := range c.dirty {
		if err := t.flushUpdates(c, e, emit, row); err != nil {
			return err
		}
		if err := t.writeKeyed(c, e, p, pd, cl, func(k, v []byte) error { return pd.batch.Set(c.ns, k, v) }); err != nil {
			return err
		}
	}
	release()
	pd.flushed = append(pd.flushed, c)
	return nil
}

// holdBest lets emitTo hold each key's best output so far (a variable for the tests).
var holdBest = true

// emitTo returns the emission of a checkpoint's keyed calls: each output is produced in the
// checkpoint's transaction, and counted in out; release produces the one emit holds, if any,
// and must be called before the transaction ends.
//
// An output whose value is now the one value its reader's filter holds for the reader's key (for
// a top of one, a max or a min: operators.TopBound.AdmitReplacing) is held, not produced, while
// the outputs after it are of that key: one that replaces its value leaves it no rank at the
// reader, and it is never written. A fold emits a key's outputs one after the other (Nexmark
// q9: each auction's joined bids, of which about 1.3M passed the filter for 0.56M winners), so
// the reader gets about one per key. Any other output first releases the one held, so the
// outputs keep their order; the reader's answers are the same (TestCombineOneAnswer,
// TestEmitToHoldsEachKeysBest). A held output dropped counts as the filter's.
func (t *Task) emitTo(c *chain, p Producer, pd *Pending, out *int) (emit func(key, value []byte, ts int64), release func()) {
	var held *kgo.Record
	var heldKey []byte
	produce := func(r *kgo.Record) {
		p.Produce(r, pd.promise)
		pd.records++
		c.recordsOut++
		*out++
	}
	release = func() {
		if held != nil {
			produce(held)
			held = nil
		}
	}
	emit = func(key, value []byte, ts int64) {
		if c.plan.SinkTopic == "" {
			return
		}
		var sole *soleResult
		if c.comb != nil {
			// Asked first, of the result as it is: most results a filter examines it drops.
			c.resultView = kgo.Record{Topic: c.plan.SinkTopic, Key: key, Value: value, Partition: -1}
			keep, s := judgeResult(c, c.timedResult(&c.resultView, ts))
			c.resultView = kgo.Record{}
			if !keep {
				return
			}
			sole = s
		}
		r := c.timedResult(t.arena.out(c.plan.SinkTopic, -1, key, value), ts)
		if !holdBest || sole == nil {
			release()
			produce(r)
			return
		}
		if !sole.replaced || held == nil || !bytes.Equal(heldKey, sole.key) {
			release()
			heldKey = append(heldKey[:0], sole.key...)
		}
		if held != nil {
			c.comb.dropped++ // the one r replaces has no rank where r is: never written
		}
		held = r
	}
	return emit, release
}

// rowsTo returns, for a chain whose rows are its changelog (plan.OutputChangelog; else nil),
// the emission of a checkpoint's rows: each to the task's partition of the output topic with
// the layout header and the header of the key whose state it is part of (codec.HeaderKey), in
// the checkpoint's transaction, and counted in out; the changelog's offset is the last row's.
func (t *Task) rowsTo(c *chain, p Producer, pd *Pending, out *int) func(stateKey, key, value []byte) {
	if !c.plan.OutputChangelog {
		return nil
	}
	cl := pd.changelogPromise(c.ns)
	layout := c.changelogHeaders(false)
	return func(stateKey, key, value []byte) {
		r := t.arena.out(c.plan.SinkTopic, t.partition, key, value)
		r.Headers = t.arena.headers(layout, codec.HeaderKey, stateKey)
		p.Produce(r, cl)
		pd.records++
		c.recordsOut++
		*out++
	}
}

// flushUpdates calls an Updater's Flush on the key's entry before the checkpoint writes it (an
// operator writing updates writes what changed once per commit); row: rowsTo's, or nil.
func (t *Task) flushUpdates(c *chain, e *entry, emit func(key, value []byte, ts int64), row func(stateKey, key, value []byte)) error {
	u, ok := c.kop.(operators.Updater)
	if !ok || !u.Updates() || e.deleted || len(e.state) == 0 {
		return nil
	}
	kc := keyedCtx{t: t, c: c, e: e, fold: true, emit: emit, row: row} // the entry is written next: nothing to mark
	if err := u.Flush(&kc, e.key); err != nil {
		return fmt.Errorf("task %d: %s: %w", t.partition, c.kop.Name(), err)
	}
	return nil
}

// writeKeyed writes one key's entry into the checkpoint: its state through put (or its deletion),
// its changelog record (none when its rows are its changelog: flushUpdates wrote them), and its
// timer's move in the timer namespace.
func (t *Task) writeKeyed(c *chain, e *entry, p Producer, pd *Pending, cl func(*kgo.Record, error), put func(k, v []byte) error) error {
	if pd.batch == nil {
		pd.batch = t.d.Store.NewBatch()
	}
	var tk []byte
	if e.hasStoredTimer && (!e.hasTimer || e.deleted || e.storedTimer != e.timer) {
		if err := pd.batch.Delete(c.timerNS, codec.AppendTimerKey(tk[:0], e.storedTimer, e.key)); err != nil {
			return err
		}
	}
	rows := c.plan.OutputChangelog
	if e.deleted || len(e.state) == 0 {
		if e.stored {
			if !rows { // a top, whose rows are its changelog, never deletes a key
				p.Produce(t.arena.out(c.plan.Changelog, t.partition, e.key, nil), cl)
				pd.records++
			}
			return pd.batch.Delete(c.ns, e.key)
		}
		return nil
	}
	v := codec.AppendKeyed(t.arena.alloc(codec.KeyedPrefixSize+len(e.state)), e.hasTimer, e.timer, e.state)
	if rows {
		if err := put(e.key, v); err != nil {
			return err
		}
	} else if err := t.produceKeyed(c, e, v, p, pd, cl, put); err != nil {
		return err
	}
	if e.hasTimer && (!e.hasStoredTimer || e.storedTimer != e.timer) {
		return pd.batch.Set(c.timerNS, codec.AppendTimerKey(tk[:0], e.timer, e.key), nil)
	}
	return nil
}

// produceKeyed writes a key's stored value v through put and produces it as its changelog record.
func (t *Task) produceKeyed(c *chain, e *entry, v []byte, p Producer, pd *Pending, cl func(*kgo.Record, error), put func(k, v []byte) error) error {
	r := t.arena.out(c.plan.Changelog, t.partition, e.key, nil)
	r.Value, r.Headers = v, c.changelogHeaders(false)
	if err := put(r.Key, v); err != nil {
		return err
	}
	p.Produce(r, cl)
	pd.records++
	return nil
}

// committedKeyed applies a committed flush to the cache: deleted keys leave it, the others are
// stored with their timers.
func (c *chain) committedKeyed() {
	for _, e := range c.dirty {
		if e.deleted || len(e.state) == 0 {
			delete(c.cache, string(e.key))
			continue
		}
		e.stored = true
		e.hasStoredTimer, e.storedTimer = e.hasTimer, e.timer
	}
}

// foldKeyed replays a keyed chain's sorted backlog through the operator, key by key (see the
// comment at the top of this file), writes each key once, and sweeps the stored timers up to the
// backlog's final watermark. A backlog checkpoint (stay) does the same with the backlog so far,
// and the chain stays in backlog: replaying a key's records in two parts, in arrival order, with
// the timers up to the watermark so far fired in between, is what one replay does, so its
// outputs (finals of closed sessions, join pairs) are the same, emitted in that checkpoint.
func (t *Task) foldKeyed(ctx context.Context, c *chain, p Producer, pd *Pending, stay bool) error {
	if c.last != nil {
		if err := c.last.drain(c.sorter.Add); err != nil {
			return fmt.Errorf("task %d: sorter: %w", t.partition, err)
		}
	}
	it, err := c.sorter.Merge()
	if err != nil {
		return fmt.Errorf("task %d: merge: %w", t.partition, err)
	}
	defer it.Close()
	bulk := c.buffered() >= int64(t.d.LoaderThreshold)
	put, err := t.writer(c.ns, bulk, pd)
	if err != nil {
		return err
	}
	hasState, err := changelog.HasAny(t.d.Store, c.ns)
	if err != nil {
		return err
	}
	wm := c.wm
	cl := pd.changelogPromise(c.ns)
	out := 0
	emit, release := t.emitTo(c, p, pd, &out)
	row := t.rowsTo(c, p, pd, &out)
	touched := map[string]struct{}{} // keys whose stored timer (<= wm) the fold handled
	var e entry
	kc := keyedCtx{t: t, c: c, e: &e, fold: true, emit: emit, row: row}
	fire := func(upTo int64) error {
		for e.hasTimer && !e.deleted && e.timer <= upTo {
			kc.wm = upTo
			if err := c.kop.OnTimer(&kc, e.key, e.timer); err != nil {
				return fmt.Errorf("task %d: %s: %w", t.partition, c.kop.Name(), err)
			}
		}
		return nil
	}
	have := false
	finish := func() error {
		if !have {
			return nil
		}
		if err := fire(wm); err != nil {
			return err
		}
		if err := t.flushUpdates(c, &e, emit, row); err != nil {
			return err
		}
		return t.writeKeyed(c, &e, p, pd, cl, put)
	}
	keys := 0
	for it.Next() {
		if !have || !bytes.Equal(it.Key(), e.key) {
			if err := finish(); err != nil {
				return err
			}
			if keys++; keys%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			e = entry{key: append(e.key[:0], it.Key()...), state: e.state[:0]}
			if hasState {
				v, ok, err := t.d.Store.Get(c.ns, e.key, nil)
				if err != nil {
					return err
				}
				if ok {
					if err := parseKeyed(&e, v); err != nil {
						return fmt.Errorf("task %d: %s: key %q: %w", t.partition, c.kop.Name(), e.key, err)
					}
					if e.hasStoredTimer && e.storedTimer <= wm {
						touched[string(e.key)] = struct{}{}
					}
				}
			}
			have = true
		}
		pl := it.Payload()
		if err := fire(it.Time()); err != nil { // the timers that fired before the record arrived
			return err
		}
		kc.wm = int64(binary.BigEndian.Uint64(pl[1:]))
		ts := int64(binary.BigEndian.Uint64(pl[9:]))
		if err := t.processKeyed(c, &kc, e.key, ts, pl[0], pl[17:]); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("task %d: merge: %w", t.partition, err)
	}
	if err := finish(); err != nil {
		return err
	}
	if hasState {
		if err := t.sweepKeyed(c, wm, touched, p, pd, emit, row); err != nil {
			return err
		}
	}
	release()
	t.d.Metrics.recordsOut(c.outTopic(), out)
	pd.folded = append(pd.folded, c)
	pd.keys[c] = int64(keys)
	pd.silent[c] = stay
	return nil
}

// sweepKeyed fires, at the end of a keyed chain's fold, the stored timers up to wm of the keys
// the backlog did not touch, and writes those keys.
func (t *Task) sweepKeyed(c *chain, wm int64, touched map[string]struct{}, p Producer, pd *Pending, emit func(key, value []byte, ts int64), row func(stateKey, key, value []byte)) error {
	cl := pd.changelogPromise(c.ns)
	var e entry
	kc := keyedCtx{t: t, c: c, e: &e, fold: true, emit: emit, row: row, wm: wm}
	put := func(k, v []byte) error { return pd.batch.Set(c.ns, k, v) }
	err := t.d.Store.Scan(c.timerNS, func(k, _ []byte) error {
		at, key, err := splitTimerKey(k)
		if err != nil {
			return err
		}
		if at > wm {
			return errStopScan
		}
		if _, done := touched[string(key)]; done {
			return nil
		}
		e = entry{key: append(e.key[:0], key...), state: e.state[:0]}
		v, ok, err := t.d.Store.Get(c.ns, key, nil)
		if err != nil {
			return err
		}
		if !ok {
			if pd.batch == nil {
				pd.batch = t.d.Store.NewBatch()
			}
			return pd.batch.Delete(c.timerNS, k) // a stale timer
		}
		if err := parseKeyed(&e, v); err != nil {
			return fmt.Errorf("task %d: %s: key %q: %w", t.partition, c.kop.Name(), key, err)
		}
		for e.hasTimer && !e.deleted && e.timer <= wm {
			if err := c.kop.OnTimer(&kc, e.key, e.timer); err != nil {
				return fmt.Errorf("task %d: %s: %w", t.partition, c.kop.Name(), err)
			}
		}
		if err := t.flushUpdates(c, &e, emit, row); err != nil {
			return err
		}
		return t.writeKeyed(c, &e, p, pd, cl, put)
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return fmt.Errorf("task %d: timers: %w", t.partition, err)
	}
	return nil
}

// restoreKeyedTimers rebuilds a keyed chain's timer namespace from the timers stored with its
// states.
func (t *Task) restoreKeyedTimers(c *chain) error {
	return t.rebuildTimers(c, func(k, v []byte) (int64, bool, error) {
		var e entry
		if err := parseKeyed(&e, v); err != nil {
			return 0, false, fmt.Errorf("%s: key %q: %w", c.kop.Name(), k, err)
		}
		return e.timer, e.hasTimer, nil
	})
}

// keyedState is the state check of a keyed chain for restores: the timer prefix, then a state
// the operator accepts.
type keyedState struct {
	layout operators.Layout
	valid  func([]byte) bool
	gather func(key, rowKey, row, old, dst []byte) ([]byte, error) // rowsLog.GatherRow, or nil
}

func (k keyedState) Layout() operators.Layout { return k.layout }

func (k keyedState) ValidState(v []byte) bool {
	st, ok := codec.KeyedState(v)
	return ok && k.valid(st)
}
