package task

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// fold merges a chain's sorted backlog and folds it into state: per key, read the state once,
// fold the key's records in (event time, offset) order, write the state once, in key order, and
// emit one changelog record and one output. A silent fold (a backlog checkpoint) emits no output:
// its changelog records carry codec.HeaderPending and the keys are marked pending, so that
// the final fold at the switch emits their outputs too (merge-joined with the sorted backlog).
// The fold checks ctx every 1024 keys and returns ctx.Err() once it is cancelled. (Checkpoint
// passes context.Background(): the consumer checkpoints while franz-go holds rebalances back.)
func (t *Task) fold(ctx context.Context, c *chain, p Producer, pd *Pending, silent bool) error {
	if c.kop != nil {
		return t.foldKeyed(ctx, c, p, pd, silent)
	}
	src, sliced := c.sorter, c.slices.have
	if c.slices.unsafe {
		// A key or time a sliced fold cannot order: the slices become window entries first,
		// and the operator slices no more (its partials take window keys again).
		if sliced {
			exp, done, err := t.expandSlices(c)
			if err != nil {
				return err
			}
			defer done()
			src, sliced = exp, false
		}
		c.slices.w = nil
	}
	it, err := src.Merge()
	if err != nil {
		return fmt.Errorf("task %d: merge: %w", t.partition, err)
	}
	defer it.Close()
	f, err := t.newMergeFold(ctx, c, p, pd, silent)
	if err != nil {
		return err
	}
	defer f.close()
	if sliced {
		err = f.mergeSliced(it)
	} else {
		err = f.merge(it)
	}
	if err != nil {
		return err
	}
	hadPending := f.pend.scan != nil
	if err := f.flushPending(nil); err != nil {
		return err
	}
	if f.agg.Closes() && !silent && (f.hasState || hadPending) {
		if err := t.sweepTimers(c, f.wm, f.closed, p, pd); err != nil {
			return err
		}
	}
	if !silent || c.plan.OutputChangelog {
		t.d.Metrics.recordsOut(c.outTopic(), int(f.keys))
	}
	pd.folded = append(pd.folded, c)
	pd.keys[c] = f.keys
	pd.silent[c] = silent
	return nil
}

// mergeFold is one fold of a mergeable chain's backlog (Task.fold): the sorter's merge and the
// pre-aggregated partials, key by key, merged with the stored states and written once each.
type mergeFold struct {
	t      *Task
	c      *chain
	agg    operators.Mergeable
	p      Producer
	pd     *Pending
	ctx    context.Context
	silent bool

	put, mark func(k, v []byte) error // the states' writer; a silent fold's pending marks'
	hdr       []kgo.RecordHeader      // the changelog records' headers
	cl        func(*kgo.Record, error)
	hasState  bool // the store may hold states of the operator (else a bootstrap: no reads)

	// Windows: the backlog's final watermark closes windows; closed lists the stored windows the
	// fold closed, which the timer sweep after it must not emit again.
	wm     int64
	final  bool // emit: final
	closed map[string]struct{}

	cur  foldKey     // the key being folded
	sl   sliceFold   // a slicing operator's windows (slice.go)
	pend pendingKeys // keys of earlier silent folds, emitted in key order among the others
	out  foldOut
	keys int64 // state keys emitted
}

// foldKey is the key a fold is on: its state (stored, merged with its partial, folded).
type foldKey struct {
	key, st []byte
	have    bool // a key has been started
	stored  bool // the key's state was in the store
}

// pendingKeys are the keys folded by earlier backlog checkpoints (nil scan: none).
type pendingKeys struct {
	scan *pendingScan
	st   []byte // scratch: a pending key's stored state
}

// foldOut is what a fold's records are made of. Records come from the task's arena and carry
// one timestamp per 1024 keys (franz-go would read the clock for each).
type foldOut struct {
	now     time.Time
	scratch []byte // a rendered result
	tk      []byte // a timer key
}

func (t *Task) newMergeFold(ctx context.Context, c *chain, p Producer, pd *Pending, silent bool) (*mergeFold, error) {
	agg := c.ops.Agg
	f := &mergeFold{
		t: t, c: c, agg: agg, p: p, pd: pd, ctx: ctx, silent: silent,
		hdr: c.changelogHeaders(silent), cl: pd.changelogPromise(c.ns),
		wm: c.wm, final: agg.Emit() == "final",
		cur: foldKey{st: make([]byte, 0, agg.StateSize())},
	}
	bulk := c.buffered() >= int64(t.d.LoaderThreshold)
	var err error
	if f.put, err = t.writer(c.ns, bulk, pd); err != nil {
		return nil, err
	}
	if silent {
		if f.mark, err = t.writer(c.pendNS, bulk, pd); err != nil {
			return nil, err
		}
	}
	// A bootstrap (no state yet for this operator and partition) needs no reads at all.
	if f.hasState, err = changelog.HasAny(t.d.Store, c.ns); err != nil {
		return nil, err
	}
	if agg.Closes() {
		f.closed = map[string]struct{}{}
	}
	if !silent && c.hasPending {
		f.pend.scan = scanPending(t.d.Store, c.pendNS)
	}
	return f, nil
}

func (f *mergeFold) close() {
	if f.pend.scan != nil {
		f.pend.scan.close()
	}
}

// merge folds the sorted backlog and the partials, key by key. Keys arrive in byte order from
// two sorted sources, the partials' keys and the sorter's merge; a key in both starts once.
func (f *mergeFold) merge(it *sorter.Iterator) error {
	pkeys := f.c.part.sortedKeys()
	for it.Next() {
		if !f.cur.have || !bytes.Equal(it.Key(), f.cur.key) {
			ik := it.Key()
			for len(pkeys) > 0 && pkeys[0] <= string(ik) {
				if pkeys[0] < string(ik) {
					if err := f.start([]byte(pkeys[0])); err != nil {
						return err
					}
				}
				pkeys = pkeys[1:]
			}
			if err := f.start(ik); err != nil {
				return err
			}
		}
		if p := it.Payload(); p[0] == tagPartial {
			f.cur.st = f.agg.Merge(f.cur.st, p[1:])
		} else {
			f.cur.st = f.agg.Fold(f.cur.st, p[1:])
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("task %d: merge: %w", f.t.partition, err)
	}
	for _, k := range pkeys {
		if err := f.start([]byte(k)); err != nil {
			return err
		}
	}
	if f.cur.have {
		return f.emit(f.cur.key, f.cur.st, true, f.cur.stored)
	}
	return nil
}

// start emits the previous key and begins k: its stored state (read once), merged with its
// pre-aggregated partial if it has one.
func (f *mergeFold) start(k []byte) error {
	cur := &f.cur
	if cur.have {
		if err := f.emit(cur.key, cur.st, true, cur.stored); err != nil {
			return err
		}
	}
	cur.key = append(cur.key[:0], k...)
	if err := f.flushPending(cur.key); err != nil {
		return err
	}
	var err error
	if cur.st, cur.stored, err = f.load(cur.key, cur.st); err != nil {
		return err
	}
	if ps, ok := f.c.part.get(cur.key); ok {
		cur.st = f.agg.Merge(cur.st, ps)
	}
	cur.have = true
	return nil
}

// load returns key's stored state, read into buf's memory, or, when it has none, a new initial
// state there; stored: it was stored. A stored state of the wrong size is a bad state (badState).
func (f *mergeFold) load(key, buf []byte) (st []byte, stored bool, err error) {
	v, ok := buf[:0], false
	if f.hasState {
		if v, ok, err = f.t.d.Store.Get(f.c.ns, key, buf[:0]); err != nil {
			return nil, false, err
		}
	}
	if ok && !f.agg.ValidSize(len(v)) {
		return nil, false, f.t.badState(f.c, key, v)
	}
	if ok {
		return v, true, nil
	}
	size := f.agg.StateSize()
	st = slices.Grow(buf[:0], size)[:size]
	f.agg.InitState(st)
	return st, false, nil
}

// flushPending emits the keys folded by earlier backlog checkpoints that sort before key (all
// of them when key is nil) with their stored state; a pending key equal to key is consumed
// (the fold of key emits it).
func (f *mergeFold) flushPending(key []byte) error {
	pend := f.pend.scan
	for pend != nil {
		pk, ok := pend.peek()
		if !ok {
			return pend.err()
		}
		if key != nil {
			if c := bytes.Compare(pk, key); c > 0 {
				return nil
			} else if c == 0 {
				pend.next()
				return nil
			}
		}
		v, ok, err := f.t.d.Store.Get(f.c.ns, pk, f.pend.st[:0])
		if err != nil {
			return err
		}
		f.pend.st = v
		if ok && !f.agg.ValidSize(len(v)) {
			return f.t.badState(f.c, pk, v)
		}
		if ok {
			if err := f.emit(pk, v, false, true); err != nil {
				return err
			}
		}
		pend.next()
	}
	return nil
}

// emit writes one state key's state, changelog record and (new) timer, and unless silent its
// result (emit: updates); a window the watermark has closed writes its final result instead
// and is deleted (if it was stored). One slice of exactly their size, from the task's arena,
// holds the key, the state and the rendered result (rendered into a scratch buffer first); the
// producer owns it until the promise.
func (f *mergeFold) emit(sk, st []byte, write, stored bool) error {
	c, pd := f.c, f.pd
	if f.keys%1024 == 0 {
		if err := f.ctx.Err(); err != nil {
			return err
		}
		f.out.now = f.t.d.Clock()
	}
	at, closes := f.agg.CloseAt(sk)
	closing := closes && !f.silent && at <= f.wm
	// With changelog: output the result is the changelog record, silent or not.
	outLog := c.plan.OutputChangelog
	render := (!f.silent || outLog) && c.plan.SinkTopic != "" && (closing || !f.final)
	n := len(sk)
	if !closing {
		n += len(st)
	}
	var (
		kl   int
		ts   int64
		keep bool // render, and the result is kept (asked once, before it is copied)
	)
	if render {
		f.out.scratch, kl, ts = f.agg.Result(sk, st, f.out.scratch[:0])
		keep = true
		if !outLog && c.comb != nil {
			// Asked first, of the result as it is (as emitTo asks): a filter drops most of
			// what it examines, and a result dropped takes nothing from the arena.
			var v []byte
			if len(f.out.scratch) > 0 {
				v = f.out.scratch
			}
			c.resultView = kgo.Record{Topic: c.plan.SinkTopic, Partition: -1, Key: sk[:kl:kl], Value: v, Timestamp: f.out.now}
			keep = keepsResult(c, c.timedResult(&c.resultView, ts))
			c.resultView = kgo.Record{}
		}
		if keep {
			n += len(f.out.scratch)
		}
	}
	buf := f.t.arena.alloc(n)
	buf = append(buf, sk...)
	k := buf[:len(sk):len(sk)]
	if keep {
		var out []byte // nil: a row that left (Result wrote nothing), a tombstone
		if len(f.out.scratch) > 0 {
			out = append(buf[len(buf):], f.out.scratch...)
			buf = buf[:len(buf)+len(out)]
		}
		if outLog {
			r := f.record(c.plan.SinkTopic, f.t.partition, k, out)
			r.Headers = f.hdr
			f.p.Produce(r, f.cl)
			pd.records++
			c.recordsOut++
		} else {
			r := c.timedResult(f.record(c.plan.SinkTopic, -1, k[:kl:kl], out), ts)
			f.p.Produce(r, pd.promise)
			pd.records++
			c.recordsOut++
		}
	}
	f.keys++
	if closing {
		c.closedAt(at)
		if !stored {
			return nil
		}
		f.closed[string(k)] = struct{}{}
		f.p.Produce(f.record(c.plan.Changelog, f.t.partition, k, nil), f.cl)
		pd.records++
		return f.batch().Delete(c.ns, k)
	}
	buf = append(buf, st...)
	if err := f.writeState(k, buf[len(buf)-len(st):len(buf):len(buf)], write); err != nil {
		return err
	}
	if !stored && closes {
		f.out.tk = codec.AppendTimerKey(f.out.tk[:0], at, k)
		return f.batch().Set(c.timerNS, f.out.tk, nil)
	}
	return nil
}

// writeState writes one key's state (unless it is stored already), its changelog record, and
// for a silent fold its pending mark.
func (f *mergeFold) writeState(k, v []byte, write bool) error {
	if write {
		if err := f.put(k, v); err != nil {
			return err
		}
	}
	if !f.c.plan.OutputChangelog { // else the result was the changelog record
		cr := f.record(f.c.plan.Changelog, f.t.partition, k, v)
		cr.Headers = f.hdr
		f.p.Produce(cr, f.cl)
		f.pd.records++
	}
	if f.silent {
		return f.mark(k, []byte{})
	}
	return nil
}

// record returns a record from the task's arena.
func (f *mergeFold) record(topic string, partition int32, k, v []byte) *kgo.Record {
	r := f.t.arena.record()
	r.Topic, r.Partition, r.Key, r.Value, r.Timestamp = topic, partition, k, v, f.out.now
	return r
}

// batch is the checkpoint's batch (timers, deletions).
func (f *mergeFold) batch() state.Batch {
	if f.pd.batch == nil {
		f.pd.batch = f.t.d.Store.NewBatch()
	}
	return f.pd.batch
}
