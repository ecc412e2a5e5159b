package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// Pending is one task's checkpoint in flight: its records are in the open transaction; its state
// writes wait for the transaction's outcome. (A fold done by Prepare starts one early.) Promises update it concurrently (mu); everything
// else belongs to the task goroutine.
type Pending struct {
	// Offsets are the next offsets to commit for this task's partition, by topic. Topics whose
	// offset did not move are absent.
	Offsets map[string]int64
	// Progress is, for a topic that several chains read, each chain's progress past its Offset
	// (by plan.ChainPlan.ID), committed with it as its metadata (EncodeProgress) and given back to
	// the task at start (SetProgress). A topic whose chains are all at its offset has none.
	Progress map[string]map[string]int64

	mu     sync.Mutex
	err    error                     // first produce error of this checkpoint's records
	clNext map[state.Namespace]int64 // next changelog offset after this checkpoint's records

	inline *errTracker // the task's records produced since the previous checkpoint

	batch   state.Batch
	loaders map[state.Namespace]state.Loader
	flushed []*chain        // chains whose dirty cache entries were written
	folded  []*chain        // chains that folded their sorted backlog
	silent  map[*chain]bool // folds of a backlog checkpoint: no outputs, the chain stays in backlog
	keys    map[*chain]int64
	tables  map[*table]int64     // tables whose offset this checkpoint commits
	next    map[*chain]*progress // each chain's progress once this checkpoint commits (progress.go)
	records int
}

// Records returns how many records the checkpoint produced.
func (pd *Pending) Records() int { return pd.records }

// Err returns the first produce error of the checkpoint's records (a *ProduceError), once the
// producer has been flushed; a checkpoint with an error must not be committed.
func (pd *Pending) Err() error {
	if err := pd.inline.get(); err != nil {
		return err
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return pd.err
}

func (pd *Pending) fail(err error) {
	pd.mu.Lock()
	if pd.err == nil {
		pd.err = err
	}
	pd.mu.Unlock()
}

func (pd *Pending) promise(r *kgo.Record, err error) {
	if err != nil {
		pd.fail(produceError(r, err))
	}
}

func (pd *Pending) changelogPromise(ns state.Namespace) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		pd.mu.Lock()
		defer pd.mu.Unlock()
		if err != nil {
			if pd.err == nil {
				pd.err = produceError(r, err)
			}
			return
		}
		if r.Offset+1 > pd.clNext[ns] {
			pd.clNext[ns] = r.Offset + 1
		}
	}
}

// Checkpoint writes everything the task has processed since its last checkpoint into the open
// transaction through p: dead letters; for real-time chains, one output and one changelog record
// per dirty key; for chains leaving backlog, the merged, folded backlog (one output and one
// changelog record per key, state written in key order). It returns the pending checkpoint,
// whose Offsets the caller commits in the same transaction. The task's state is unchanged until
// Committed or Aborted; the caller must call exactly one of them before Process.
func (t *Task) Checkpoint(p Producer) (pd *Pending, err error) {
	t.must("Checkpoint", phaseIdle, phasePrepared)
	t.phase = phaseInFlight
	defer func() {
		if err != nil {
			t.phase = phaseFailed
		}
	}()
	pd = t.prep
	t.prep = nil
	if pd == nil {
		pd = newPending()
	}
	pd.inline = t.out
	t.out = &errTracker{}
	if err := t.checkpointAll(t.producer(p), pd); err != nil {
		t.abortPending(pd)
		return nil, err
	}
	pd.sealProgress()
	return pd, nil
}

// checkpointAll writes each chain's part of a checkpoint, then the tables' offsets, the
// watermarks, and the topics' offsets (after the announcements of the watermarks, which a
// top's filtering writer commits with them: topicOffsets).
func (t *Task) checkpointAll(p Producer, pd *Pending) error {
	for _, c := range t.chains {
		if err := t.checkpointChain(c, p, pd); err != nil {
			return err
		}
	}
	t.tableOffsets(p, pd)
	for _, c := range t.chains {
		if err := t.checkpointWatermark(c, p, pd); err != nil {
			return err
		}
		pd.records += t.announceWatermark(c, pd)
		if c.plan.Rekey != "" && !c.timed() {
			pd.next[c].wm, pd.next[c].iwm = c.wm, c.iwm // a re-keying writer's, committed with its offset (rewind)
			if c.held() {
				pd.next[c].wm, pd.next[c].iwm = c.comb.fromWM, c.comb.fromWM // as of its held offset
			}
		}
	}
	t.topicOffsets(pd)
	return nil
}

// checkpointChain writes a chain's outputs: a keyed operator's (a real-time flush, or the fold
// of a switch or a backlog checkpoint), its outbox and dead letters, and its next progress.
func (t *Task) checkpointChain(c *chain, p Producer, pd *Pending) error {
	if c.ops.Keyed() && c.primary && !foldedIn(pd, c) && c.streaming() {
		// A watermark can move with no record after it to fire its timers: a writer's,
		// read in backlog by a chain that left it with nothing to fold.
		if err := t.fireDue(c); err != nil {
			return err
		}
	}
	kept := 0
	for _, r := range c.outbox {
		if !keepsResult(c, r) {
			continue
		}
		p.Produce(r, pd.promise)
		kept++
	}
	if kept > 0 {
		pd.records += kept
		c.recordsOut += int64(kept)
		t.d.Metrics.recordsOut(c.outTopic(), kept)
	}
	c.outbox = nil
	pd.records += t.flushCombined(c, p, pd.promise)
	if c.ops.Keyed() && c.primary && !foldedIn(pd, c) {
		var err error
		switch {
		case len(c.dirty) > 0 && c.kop != nil:
			err = t.flushKeyed(c, p, pd)
		case len(c.dirty) > 0:
			err = t.flushMergeable(c, p, pd)
		case c.leaving():
			err = t.fold(context.Background(), c, p, pd, false)
		case t.backlogCheckpointDue(c):
			err = t.fold(context.Background(), c, p, pd, true)
		}
		if err != nil {
			return err
		}
	}
	// A keyed operator that leaves backlog in this checkpoint says so after its switch's
	// outputs (attributes.go).
	if c.internalParts > 0 && c.ops.Keyed() && foldedIn(pd, c) && !pd.silent[c] {
		pd.records += t.announceMode(c, false, pd.promise)
	}
	// A chain's progress moves only when nothing before it is still waiting in a sorter; its
	// dead letters go out with it (while it stays put, a rewind produces them again).
	n := pd.nextProgress(c, c.done.off)
	if c.held() {
		// A combining writer holding its table: the records from its first on are read
		// again after a rewind, and their dead letters written again (combine.go).
		n.off = max(c.comb.from, c.done.off)
	} else if c.buffered() == 0 || foldedIn(pd, c) {
		n.off = max(c.next, c.done.off)
		for _, r := range c.dlq {
			p.Produce(r, pd.promise)
			pd.records++
		}
		c.dlq = nil
	}
	return nil
}

// topicOffsets sets each topic's offset: the smallest progress of its chains (several
// operators reading one input: each chain skips what it has done already, Progress). It is
// committed when any of them moved, or when a writer that filters for a top over windows
// announced something new of its watermark: its Progress holds what it announced last
// (saidPrefix, idlePrefix), which its next owner needs (SetProgress, combiner.dropsBeaten).
func (t *Task) topicOffsets(pd *Pending) {
	for topic, cs := range t.byTopic {
		off, moved := int64(math.MaxInt64), false
		for _, c := range cs {
			off = min(off, pd.next[c].off)
			moved = moved || pd.next[c].off > c.done.off ||
				c.keepsSaid() && (c.wmSaid != c.done.wmSaid || c.idleSaid != c.done.idleSaid)
		}
		if !moved || off < 0 {
			continue
		}
		pd.Offsets[topic] = off
		progress := map[string]int64{}
		for _, c := range cs {
			if len(cs) > 1 && pd.next[c].off > off {
				progress[c.plan.ID()] = pd.next[c].off
			}
			if c.keepsSaid() && c.wmSaid != math.MinInt64 {
				progress[saidPrefix+c.plan.ID()] = c.wmSaid
				if c.idleSaid {
					progress[idlePrefix+c.plan.ID()] = 1
				}
			}
		}
		if len(cs) > 1 || len(progress) > 0 {
			pd.Progress[topic] = progress
		}
	}
}

// What a writer filtering for a top over windows, or combining windows or sessions
// (chain.keepsSaid), last announced, in its
// topic's committed Progress: saidPrefix and its ID, its watermark (chain.wmSaid); idlePrefix
// and its ID, 1 if it announced idle after it. No operator name has a colon, so no chain ID
// (an operator's name, a source's, rekey:<name> or taps:<name>) starts with either.
const (
	saidPrefix = "said:"
	idlePrefix = "idle:"
)

// keepsSaid reports whether c is a re-keying writer whose filter, combining or projection rests
// on what it announced of its watermark (a top's over windows, combiner.dropsBeaten; partial
// windows or sessions, combiner.project; projected records, projector.value), which it commits
// with its offsets: its reader keeps the largest watermark each writer announced, so a next
// owner that started over from its own records would take a record for on time that the
// reader judges late. (A filter of window finals, dropsResult, rests on no watermark.)
func (c *chain) keepsSaid() bool {
	if c.plan.Rekey == "" {
		return false
	}
	if c.proj != nil {
		return true
	}
	cb := c.comb
	return cb != nil && (cb.bound != nil && cb.bound.Windowed() || cb.timed())
}

// tableOffsets writes the tables' dead letters and offsets once no chain holds a backlog (a
// table's offset moves with them).
func (t *Task) tableOffsets(p Producer, pd *Pending) {
	for _, c := range t.chains {
		if c.buffered() > 0 && !foldedIn(pd, c) {
			return
		}
	}
	for _, r := range t.dlq {
		p.Produce(r, pd.promise)
		pd.records++
	}
	t.dlq = nil
	// A table's offset is committed too (its rows are in the store already): the group's lag
	// shows how far a table is, and a rewind after an abort goes back to it. It moves only
	// with its dead letters.
	for _, tb := range t.tables {
		if tb.next > tb.committed {
			pd.Offsets[tb.topic] = tb.next
			if pd.tables == nil {
				pd.tables = map[*table]int64{}
			}
			pd.tables[tb] = tb.next
		}
	}
}

func newPending() *Pending {
	return &Pending{
		Offsets:  map[string]int64{},
		Progress: map[string]map[string]int64{},
		next:     map[*chain]*progress{},
		clNext:   map[state.Namespace]int64{},
		loaders:  map[state.Namespace]state.Loader{},
		keys:     map[*chain]int64{},
		silent:   map[*chain]bool{},
	}
}

// WantsFold reports whether a chain of the task is due to fold its backlog (the expensive part
// of a switch), which Prepare can do ahead of the checkpoint.
func (t *Task) WantsFold() bool {
	for _, c := range t.chains {
		if c.leaving() && (t.prep == nil || !foldedIn(t.prep, c)) {
			return true
		}
	}
	return false
}

// Prepare folds the backlogs of the chains that leave backlog now, ahead of the next
// checkpoint: their records go into the open transaction through p and their state writes
// wait in a pending checkpoint that the next Checkpoint completes and returns. It lets the
// caller do a switch's work without holding every other task at the checkpoint barrier. The
// task must not process records between Prepare and Checkpoint (they would miss the fold), and
// the transaction must not end in between (the caller's checkpoint includes the task's reply,
// which comes after Prepare). A cancelled ctx stops the fold within 1024 keys: Prepare
// then returns ctx.Err() and drops the pending state writes; the records already produced stay
// in the open transaction, which the caller must abort (a revoke does), and the task must not be
// used again but for Close.
func (t *Task) Prepare(ctx context.Context, p Producer) error {
	t.must("Prepare", phaseIdle, phasePrepared)
	p = t.producer(p)
	for _, c := range t.chains {
		if !c.leaving() || (t.prep != nil && foldedIn(t.prep, c)) {
			continue
		}
		if t.prep == nil {
			t.prep = newPending()
		}
		if err := t.fold(ctx, c, p, t.prep, false); err != nil {
			t.abortPending(t.prep)
			t.prep = nil
			t.phase = phaseFailed
			return err
		}
		t.phase = phasePrepared
	}
	return nil
}

// foldedIn reports whether pd folded the backlog of c's operator (through any of its chains).
func foldedIn(pd *Pending, c *chain) bool {
	for _, f := range pd.folded {
		if f.opState == c.opState {
			return true
		}
	}
	return false
}

// writer returns how a fold writes ns: a bulk loader (an sstable ingested after the commit) for
// large folds, the checkpoint's batch otherwise.
func (t *Task) writer(ns state.Namespace, bulk bool, pd *Pending) (func(k, v []byte) error, error) {
	if bulk {
		ld, err := t.d.Store.NewLoader(ns)
		if err != nil {
			return nil, err
		}
		pd.loaders[ns] = ld
		return ld.Add, nil
	}
	if pd.batch == nil {
		pd.batch = t.d.Store.NewBatch()
	}
	return func(k, v []byte) error { return pd.batch.Set(ns, k, v) }, nil
}

// Committed applies a checkpoint whose transaction committed: the state and the changelog
// offsets it reflects go to the store in one batch (and bulk loads are ingested), the cache
// becomes clean, folded sorters are emptied, and folded chains stream from now on.
func (t *Task) Committed(pd *Pending) (err error) {
	t.must("Committed", phaseInFlight)
	defer func() {
		if t.phase = phaseIdle; err != nil {
			t.phase = phaseFailed
		}
	}()
	for ns, next := range pd.clNext {
		if ld, ok := pd.loaders[ns]; ok {
			ld.SetOffset(next)
			continue
		}
		if pd.batch == nil {
			pd.batch = t.d.Store.NewBatch()
		}
		if err := pd.batch.SetOffset(ns, next); err != nil {
			return err
		}
	}
	// The batch first: it holds what a bulk-loaded namespace commits beside its ingest (the
	// watermark, timers, deletions of closed windows), and a load syncs every batch committed
	// before it, so once an ingest (state and offset) is durable, so is that. The other order
	// lost the watermark of a switch to a kill -9 right after it (the batch is NoSync) while the
	// ingest survived; its offset said the state was up to date, so the changelog's watermark
	// record was never replayed and records late by it counted again (testdata/windows/crash).
	// A crash after the batch and before the ingest leaves the watermark ahead of the state: the
	// changelog replayed from the older offset brings the same watermark record again.
	if pd.batch != nil {
		if err := pd.batch.Commit(); err != nil {
			return fmt.Errorf("task %d: %w", t.partition, err)
		}
		pd.batch.Close()
	}
	// Pending marks next: a crash before the state's ingest replays the changelog (which
	// carries the marks) from the older offset; the reverse order could lose marks.
	for _, pass := range []bool{true, false} {
		for ns, ld := range pd.loaders {
			if codec.IsPendingNamespace(ns) != pass {
				continue
			}
			if err := ld.Commit(); err != nil {
				return fmt.Errorf("task %d: ingest: %w", t.partition, err)
			}
		}
	}
	for _, c := range pd.flushed {
		if c.kop != nil {
			c.committedKeyed()
		} else {
			c.committedMergeable()
		}
		for _, e := range c.dirty {
			e.dirty = false
		}
		clear(c.dirty)
		c.dirty = c.dirty[:0]
	}
	for _, c := range t.chains {
		if c.inBack && len(c.cache) > 0 {
			clear(c.cache) // backlog mode folds from the store; the cache must not shadow it
		}
		if c.timed() {
			c.tm.reset() // the windows and keys of the heap are stored now, with their timers
		}
	}
	for _, c := range pd.folded {
		if err := c.sorter.Reset(); err != nil {
			return err
		}
		c.slices.reset()
		if c.part != nil {
			c.part.reset()
		}
		if c.last != nil {
			c.last.reset()
		}
		if pd.silent[c] {
			c.hasPending = c.kop == nil // a Keyed operator's backlog checkpoint emitted its outputs
			c.lastBackCkpt = t.d.Clock()
			t.log.Info("backlog checkpoint", "operator", c.plan.Keyed.Name, "keys", pd.keys[c], "offset", pd.next[c].off)
			continue
		}
		if c.hasPending {
			// Every pending key has had its output now (a crash before this drop repeats some
			// outputs, with the same values, at the next switch).
			if err := t.d.Store.Drop(c.pendNS); err != nil {
				return err
			}
			c.hasPending = false
		}
		if c.inBack {
			t.leaveBacklog(c, pd.keys[c])
		}
	}
	pd.commitProgress()
	for tb, next := range pd.tables {
		tb.committed = max(tb.committed, next)
	}
	t.needCkpt = false
	for _, c := range t.chains {
		if len(c.dirty) >= t.cacheCap {
			t.needCkpt = true
		}
	}
	t.publish()
	return nil
}

// Aborted drops everything since the last committed checkpoint: the cache, the sorted backlog,
// unsent dead letters, and the pending state writes. Each chain's mode is decided afresh from the
// next lag observed. It returns, by topic, the offset the consumer must seek this partition to.
func (t *Task) Aborted(pd *Pending) map[string]int64 {
	t.must("Aborted", phaseInFlight)
	t.phase = phaseIdle
	if pd != nil {
		t.abortPending(pd)
	}
	seek := map[string]int64{}
	if t.untouchedByAbort(pd) {
		// Every chain is sorting a backlog and put nothing into the aborted transaction (no
		// flush, no fold, dead letters held): keep the sorted records and resume after them.
		for _, c := range t.chains {
			seekMin(seek, c.plan.Source.Topic, c.next)
			c.rewindAnnouncements() // an announcement of the idle phase was in it: repeat it
		}
		for _, tb := range t.tables {
			if tb.next >= 0 {
				seek[tb.topic] = tb.next // its held dead letters are kept too
			}
		}
		t.needCkpt = false
		t.publish()
		return dropUnstarted(seek)
	}
	for _, c := range t.chains {
		c.rewind()
		clear(c.cache)
		clear(c.dirty)
		c.dirty = c.dirty[:0]
		if c.sorter != nil {
			_ = c.sorter.Reset()
		}
		c.slices.reset()
		if c.part != nil {
			c.part.reset()
		}
		if c.last != nil {
			c.last.reset()
		}
		if c.jf != nil {
			c.jf.reset() // the sorted records it judged are dropped
		}
		if c.det != nil {
			if c.inBack {
				t.d.Metrics.setBacklog(c, false)
			}
			c.inBack = false
			c.det = c.det.Fresh()
		}
		c.ended = false
		c.inputEnded = false
		c.observed = false
		c.outbox = nil
		seekMin(seek, c.plan.Source.Topic, c.done.off) // a chain ahead skips to its own
		c.dlq = nil
	}
	// A table's rows stay applied (applying them again changes nothing), but its dead letters
	// since the last commit are dropped with the others: it reads them again.
	for _, tb := range t.tables {
		// Always named: the consumer would otherwise rewind the table to the first offset it
		// dispatched since the assignment.
		if tb.committed >= 0 {
			tb.next = tb.committed
			seek[tb.topic] = tb.committed
		}
	}
	t.dlq = nil
	t.needCkpt = false
	t.publish()
	return dropUnstarted(seek)
}

// seekMin lowers seek[topic] to off (sets it if absent). A negative off (a chain that has not
// started) leaves the topic out for good: the consumer rewinds it to where it started, which
// no chain of it is before.
func seekMin(seek map[string]int64, topic string, off int64) {
	if cur, ok := seek[topic]; !ok || off < cur {
		seek[topic] = off
	}
}

// dropUnstarted removes the topics whose seek a chain that has not started left negative.
func dropUnstarted(seek map[string]int64) map[string]int64 {
	for topic, off := range seek {
		if off < 0 {
			delete(seek, topic)
		}
	}
	return seek
}

func (t *Task) abortPending(pd *Pending) {
	for _, ld := range pd.loaders {
		_ = ld.Abort()
	}
	if pd.batch != nil {
		pd.batch.Close()
	}
}

// untouchedByAbort reports whether the aborted checkpoint pd held nothing of this task: no
// record, no offset, and all its chains keyed, in backlog, with no dirty entries and no fold.
func (t *Task) untouchedByAbort(pd *Pending) bool {
	if pd != nil && (pd.records > 0 || len(pd.Offsets) > 0) {
		return false // its dead letters or its offset were in the transaction
	}
	for _, c := range t.chains {
		if !c.ops.Keyed() || !c.inBack || !c.det.Backlog() || len(c.dirty) > 0 {
			return false
		}
		if pd != nil && (foldedIn(pd, c) || slices.ContainsFunc(pd.flushed, func(f *chain) bool { return f.opState == c.opState })) {
			return false
		}
	}
	return len(t.chains) > 0
}

// pendingScan reads the keys of a pending namespace in order through a store iterator (a
// snapshot taken when it starts), so the switch can merge-join them with the sorted backlog
// without holding them all. Not safe for concurrent use; close finishes the iterator (the
// store's Close waits for an unfinished one).
type pendingScan struct {
	it  state.Iter
	cur []byte
	ok  bool
	e   error
}

func scanPending(st state.Store, ns state.Namespace) *pendingScan {
	s := &pendingScan{}
	if s.it, s.e = st.NewIter(ns); s.e != nil {
		return s // peek reports the end at once and err says why
	}
	s.next()
	return s
}

func (s *pendingScan) peek() ([]byte, bool) { return s.cur, s.ok }

// next moves to the next key; the one peek returned before stays valid (it is a copy).
func (s *pendingScan) next() {
	if s.it == nil {
		s.cur, s.ok = nil, false
		return
	}
	if s.ok = s.it.Next(); s.ok {
		s.cur = bytes.Clone(s.it.Key())
		return
	}
	s.cur, s.e = nil, s.it.Err()
}

// err is valid once peek reports the end.
func (s *pendingScan) err() error { return s.e }

func (s *pendingScan) close() {
	if s.it != nil {
		_ = s.it.Close()
	}
}

// progressPrefix starts the offset-commit metadata that carries Pending.Progress.
const progressPrefix = "sluice-progress:"

// progressIDs, an entry of every progress EncodeProgress writes, says that its re-keying
// chains go by their own IDs (plan.ChainPlan.ID), not by LegacyID. No name has a colon.
const progressIDs = "ids:2"

// EncodeProgress writes a topic partition's Pending.Progress as offset-commit metadata (JSON
// after progressPrefix, with progressIDs), committed in the transaction with the offset.
func EncodeProgress(progress map[string]int64) string {
	m := maps.Clone(progress)
	m[progressIDs] = 2
	b, _ := json.Marshal(m) // a map of strings to numbers always marshals
	return progressPrefix + string(b)
}

// DecodeProgress reads the metadata of a committed offset: the chains' progress EncodeProgress
// wrote, or nil (other metadata: every chain is at the offset).
func DecodeProgress(meta string) (map[string]int64, error) {
	rest, ok := strings.CutPrefix(meta, progressPrefix)
	if !ok {
		return nil, nil
	}
	var progress map[string]int64
	if err := json.Unmarshal([]byte(rest), &progress); err != nil {
		return nil, fmt.Errorf("task: committed offset metadata %q: %w", meta, err)
	}
	return progress, nil
}
