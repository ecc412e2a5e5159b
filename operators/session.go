package operators

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Sessions is an aggregate over session windows (window: {session: gap}), a Keyed operator: a
// key's records closer than the gap in event time form one session, [first, last + gap); a
// record between two sessions merges them. A session closes when the watermark reaches its
// end + grace: its final result is emitted (emit: final) and it is forgotten; a record arriving
// later starts a new session. A record is late when even a session of its own would be closed
// (ts + gap + grace <= watermark).
//
// A session cogroup (NewSessionCogroup) is the same operator over a cogroup's aggregate: its
// records come from several inputs (Project projects a record of input i with the cogroup's
// ProjectInput, so the projected input starts with i), a key's records of every input form its
// sessions, and each session's state counts records per input. The runtime asks IsLate with the
// record's own input's watermark and fires timers by the operator's (the smallest of its
// inputs'). Its sessions close later, at last + gap - 1 + gap + grace: when every record that
// could still join the session (its time at most last + gap - 1) is late by any input's
// watermark. A session closing at last + gap + grace could otherwise be closed by the operator's
// watermark while a record of another input that joins it is still on time by its own input's
// watermark: whether it joined the session or started a new one would depend on how the inputs
// interleaved, and a replay after an abort could answer differently. With the later close, no
// record on time ever finds its session closed, so a key's sessions are those of its records
// that are not late, in any interleaving, mode or replay.
//
// With emit: updates the operator is an Updater: Process marks the session it made as changed,
// and Flush (once per commit of the key) writes each changed session's current value, after a
// retraction of every session it published before that no longer exists under the start it was
// published with (a session a record merged into another, or one a record extended backwards):
// {"key":…,"window_start":…,"window_end":…,"retract":true}, with the start and end it was
// published with. A consumer that upserts the updates by (key, window_start) and deletes on a
// retraction holds every session's latest value: at the end, exactly the finals of emit: final.
// A closing session that changed since its last flush writes its value when it closes.
//
// State layout: a uint32 count n, then n sessions in increasing start order, each start and last
// event time (int64, big-endian), with emit: updates the start and end it was last published
// with (math.MinInt64 if never) and a changed flag byte, then the aggregate state of its records.
// With emit: updates the sessions are followed by a uint32 count m and m (start, end) pairs: the
// published sessions to retract at the next flush. The key's timer is the earliest close of its
// sessions. Not safe for concurrent use (one per task); Layout and IsLate are.
type Sessions struct {
	agg     *Aggregate
	gap     int64
	grace   int64
	hold    int64  // a session cogroup's extra delay before a session closes: gap - 1 (0 for one input)
	updates bool   // emit: updates
	retract []span // scratch: the key's retractions to write (updates)

	ss    []session // scratch: the decoded sessions of the key being processed
	buf   []byte    // scratch: the encoded state, the rendered output
	arena []byte    // scratch: aggregate states of ss
}

type session struct {
	start, last int64
	pub         span   // the start and end last published (updates; start unpublished if never)
	changed     bool   // changed since its last flush (updates)
	st          []byte // aggregate state (in arena)
}

// span is a published session's window_start and window_end.
type span struct{ start, end int64 }

// unpublished is the pub.start of a session never published.
const unpublished = math.MinInt64

// NewSessions returns the session-window aggregate of cfg, whose Window must be a session.
func NewSessions(name string, cfg configs.Aggregate) (*Sessions, error) {
	if cfg.Window.Kind() != "session" {
		return nil, fmt.Errorf("operators: %s: not a session window", name)
	}
	agg, err := NewAggregate(name, cfg)
	if err != nil {
		return nil, err
	}
	return newSessions(name, agg, cfg.Window)
}

// NewSessionCogroup returns the session-window cogroup of cfg (operators[i].cogroup with
// window: {session: gap}): a Sessions over NewCogroup's aggregate. cfg must have been validated.
func NewSessionCogroup(name string, cfg configs.Cogroup) (*Sessions, error) {
	if cfg.Window.Kind() != "session" {
		return nil, fmt.Errorf("operators: %s: not a session window", name)
	}
	agg, err := NewCogroup(name, cfg)
	if err != nil {
		return nil, err
	}
	return newSessions(name, agg, cfg.Window)
}

func newSessions(name string, agg *Aggregate, w *configs.Window) (*Sessions, error) {
	s := &Sessions{agg: agg, gap: w.Session.Milliseconds(), grace: w.Grace.Milliseconds(), updates: agg.Emit() != "final"}
	if s.gap <= 0 {
		return nil, fmt.Errorf("operators: %s: session gap %v: want at least 1ms", name, w.Session)
	}
	if len(agg.strs) > 0 {
		// A session's state is fixed-size (sessions lie side by side in the key's state).
		return nil, fmt.Errorf("operators: %s: a min or max over strings is not supported with session windows", name)
	}
	if len(agg.Inputs()) > 1 {
		s.hold = s.gap - 1
	}
	return s, nil
}

// Name returns the operator name.
func (s *Sessions) Name() string { return s.agg.Name() }

// Attributes: InternalSorter; OutputOnlyAtEnd with emit: final, OutputOnCheckpoint with updates.
func (s *Sessions) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnlyAtEnd: !s.updates, OutputOnCheckpoint: s.updates}
}

// Layout is the aggregate's layout, which ends with the session gap (window=session:<gap>ms);
// a session cogroup's is the cogroup's (kind cogroup, its inputs, each field's input). With
// emit: updates it ends with emit=updates (the state holds what was published).
func (s *Sessions) Layout() Layout {
	l := s.agg.Layout()
	if s.updates {
		l.Parts = append(l.Parts, "emit=updates")
	}
	return l
}

// OutputLag is how far behind the watermark a final emitted later can lie (TimedResults): a
// session still open at watermark wm closes after it, at last + hold + gap + grace > wm, so its
// end - 1 = last + gap - 1 >= wm - grace - hold; a record on time starts a session that ends
// later still.
func (s *Sessions) OutputLag() int64 { return s.grace + s.hold }

// Updates reports whether the operator writes updates (emit: updates; an Updater).
func (s *Sessions) Updates() bool { return s.updates }

// Aggregate returns the aggregate folded per session.
func (s *Sessions) Aggregate() *Aggregate { return s.agg }

// Project is the aggregate's ProjectInput: for a session cogroup the projected input starts
// with the record's input index (an aggregate of one input has only input 0).
func (s *Sessions) Project(input int, r *Record, dst []byte) ([]byte, error) {
	return s.agg.ProjectInput(input, r, dst)
}

// sat adds saturating at MaxInt64.
func sat(a, b int64) int64 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxInt64
}

// endAt is when a session of a record at ts alone would close (one input): its end + grace.
func (s *Sessions) endAt(ts int64) int64 { return sat(sat(ts, s.gap), s.grace) }

// closeAt is when a session whose last record is at last closes: its end + grace, or for a
// session cogroup when the latest record that could join it would be late.
func (s *Sessions) closeAt(last int64) int64 { return s.endAt(sat(last, s.hold)) }

// IsLate reports whether a session of a record at ts alone would already be closed at wm (the
// watermark of the record's input): ts + gap + grace <= wm.
func (s *Sessions) IsLate(_ int, ts, wm int64) bool { return s.endAt(ts) <= wm }

// head is the size of a session's fields before its aggregate state.
func (s *Sessions) head() int { return headOf(s.updates) }

// headOf is head for the layout of emit: updates (updates) or final.
func headOf(updates bool) int {
	if updates {
		return 33
	}
	return 16
}

// decode loads st into s.ss (and s.retract). It reports false for bytes that are not a sessions
// state.
func (s *Sessions) decode(st []byte) bool {
	s.ss = s.ss[:0]
	s.retract = s.retract[:0]
	s.arena = s.arena[:0]
	return s.decodeAs(st, s.updates)
}

// decodeAs appends the sessions of st to s.ss (and s.retract), st being a state of the layout
// of emit: updates if updates, of emit: final otherwise (a partial's).
func (s *Sessions) decodeAs(st []byte, updates bool) bool {
	if len(st) == 0 {
		return true
	}
	if len(st) < 4 {
		return false
	}
	n := uint64(binary.BigEndian.Uint32(st))
	size, head := s.agg.StateSize(), headOf(updates)
	p := st[4:]
	if uint64(len(p)) < n*uint64(head+size) {
		return false
	}
	s.arena = slices.Grow(s.arena, (int(n)+1)*size) // room for Process's merged session too
	for range n {
		x := session{
			start: int64(binary.BigEndian.Uint64(p)),
			last:  int64(binary.BigEndian.Uint64(p[8:])),
			pub:   span{unpublished, 0},
		}
		if updates {
			if p[32] > 1 {
				return false
			}
			x.pub = span{int64(binary.BigEndian.Uint64(p[16:])), int64(binary.BigEndian.Uint64(p[24:]))}
			x.changed = p[32] == 1
		}
		off := len(s.arena)
		s.arena = append(s.arena, p[head:head+size]...)
		x.st = s.arena[off : off+size : off+size]
		s.ss = append(s.ss, x)
		p = p[head+size:]
	}
	if !updates {
		return len(p) == 0
	}
	if len(p) < 4 {
		return false
	}
	m := uint64(binary.BigEndian.Uint32(p))
	if p = p[4:]; uint64(len(p)) != m*16 {
		return false
	}
	for ; len(p) > 0; p = p[16:] {
		s.retract = append(s.retract, span{int64(binary.BigEndian.Uint64(p)), int64(binary.BigEndian.Uint64(p[8:]))})
	}
	return true
}

// encode writes s.ss (and s.retract) as a state into s.buf and returns it.
func (s *Sessions) encode() []byte {
	s.buf = s.encodeAs(s.buf[:0], s.updates)
	return s.buf
}

// encodeAs appends s.ss (and s.retract) to b as a state of the layout of emit: updates if
// updates, of emit: final otherwise.
func (s *Sessions) encodeAs(b []byte, updates bool) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.ss)))
	for _, x := range s.ss {
		b = binary.BigEndian.AppendUint64(b, uint64(x.start))
		b = binary.BigEndian.AppendUint64(b, uint64(x.last))
		if updates {
			b = binary.BigEndian.AppendUint64(b, uint64(x.pub.start))
			b = binary.BigEndian.AppendUint64(b, uint64(x.pub.end))
			changed := byte(0)
			if x.changed {
				changed = 1
			}
			b = append(b, changed)
		}
		b = append(b, x.st...)
	}
	if updates {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.retract)))
		for _, r := range s.retract {
			b = binary.BigEndian.AppendUint64(b, uint64(r.start))
			b = binary.BigEndian.AppendUint64(b, uint64(r.end))
		}
	}
	return b
}

// ValidState reports whether b is a sessions state of this operator.
func (s *Sessions) ValidState(b []byte) bool {
	var t Sessions = Sessions{agg: s.agg, updates: s.updates}
	if !t.decode(b) {
		return false
	}
	for i, x := range t.ss {
		if x.last < x.start || !s.agg.ValidState(x.st) || i > 0 && t.ss[i-1].last >= x.start {
			return false
		}
		if x.pub.start == unpublished && x.pub.end != 0 {
			return false
		}
	}
	return true
}

// Process merges the record into the key's sessions: the sessions within the gap of ts (at most
// two, one on each side) and the record become one.
func (s *Sessions) Process(ctx Context, key []byte, ts int64, in []byte) error {
	if !s.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a sessions state", s.Name(), key)
	}
	merged := s.newSession(ts, ts)
	s.agg.InitState(merged.st)
	s.agg.Fold(merged.st, in)
	s.absorb(merged)
	return s.store(ctx)
}

// newSession returns a changed, unpublished session [start, last] whose state is new room in
// s.arena, for the caller to fill.
func (s *Sessions) newSession(start, last int64) session {
	size := s.agg.StateSize()
	off := len(s.arena)
	s.arena = append(s.arena, make([]byte, size)...)
	return session{start: start, last: last, pub: span{unpublished, 0}, changed: true, st: s.arena[off : off+size : off+size]}
}

// absorb makes merged, a run of the key's records less than the gap apart (one record, or a
// writer's partial session), and the sessions of s.ss within the gap of it one session in
// s.ss: the sessions of s.ss are more than the gap apart, so those within it are at most one
// on each side of it and the others overlap it. Sessions merge in any order to the same state.
// A session made of an earlier one and merged is published as the earliest was (sessions come
// in start order); the others' publications go to the retractions.
func (s *Sessions) absorb(merged session) {
	ts, tl := merged.start, merged.last
	out := s.ss[:0:0]
	for _, x := range s.ss {
		if ts-x.last < s.gap && x.start-tl < s.gap {
			s.agg.Merge(merged.st, x.st)
			merged.start, merged.last = min(merged.start, x.start), max(merged.last, x.last)
			switch {
			case x.pub.start == unpublished:
			case merged.pub.start == unpublished:
				merged.pub = x.pub
			default:
				s.retract = append(s.retract, x.pub)
			}
			continue
		}
		out = append(out, x)
	}
	i, _ := slices.BinarySearchFunc(out, merged.start, func(x session, t int64) int {
		switch {
		case x.start < t:
			return -1
		case x.start > t:
			return 1
		}
		return 0
	})
	s.ss = slices.Insert(out, i, merged)
}

// OnTimer closes the key's sessions that the watermark has reached: each emits its final
// result and is forgotten. With emit: updates a closing session writes its value only if it
// changed since its last flush, after the key's retractions.
func (s *Sessions) OnTimer(ctx Context, key []byte, _ int64) error {
	if !s.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a sessions state", s.Name(), key)
	}
	wm := ctx.Watermark()
	keep := s.ss[:0]
	for _, x := range s.ss {
		if s.closeAt(x.last) > wm {
			keep = append(keep, x)
			continue
		}
		if s.updates {
			if !x.changed {
				continue
			}
			s.emitRetractions(ctx, key)
			s.emitUpdate(ctx, key, &x)
			continue
		}
		end := sat(x.last, s.gap)
		s.buf = s.agg.RenderWindow(key, x.start, end, x.st, s.buf[:0])
		ctx.EmitAt(s.buf, end-1)
	}
	s.ss = keep
	return s.store(ctx)
}

// Flush writes, with emit: updates, the key's retractions and then the value of each session
// that changed since its last flush (see Sessions). The runtime calls it once per commit for
// each key Process or OnTimer touched.
func (s *Sessions) Flush(ctx Context, key []byte) error {
	if !s.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a sessions state", s.Name(), key)
	}
	if !s.updates || len(s.ss) == 0 && len(s.retract) == 0 {
		return nil
	}
	s.emitRetractions(ctx, key)
	for i := range s.ss {
		if s.ss[i].changed {
			s.emitUpdate(ctx, key, &s.ss[i])
		}
	}
	return s.store(ctx)
}

// emitRetractions writes the key's pending retractions and forgets them.
func (s *Sessions) emitRetractions(ctx Context, key []byte) {
	for _, r := range s.retract {
		s.buf = s.renderRetraction(key, r, s.buf[:0])
		ctx.Emit(s.buf)
	}
	s.retract = s.retract[:0]
}

// emitUpdate writes x's current value, after the retraction of its earlier publication under
// another start or end, and marks it published.
func (s *Sessions) emitUpdate(ctx Context, key []byte, x *session) {
	cur := span{x.start, sat(x.last, s.gap)}
	if x.pub.start != unpublished && x.pub.start != cur.start {
		s.buf = s.renderRetraction(key, x.pub, s.buf[:0])
		ctx.Emit(s.buf)
	}
	s.buf = s.agg.RenderWindow(key, cur.start, cur.end, x.st, s.buf[:0])
	ctx.Emit(s.buf)
	x.pub, x.changed = cur, false
}

// renderRetraction appends the retraction of the session published as r.
func (s *Sessions) renderRetraction(key []byte, r span, dst []byte) []byte {
	dst = append(dst, `{"key":`...)
	dst = jsonstr.AppendBytes(dst, key)
	dst = append(dst, `,"window_start":`...)
	dst = strconv.AppendInt(dst, r.start, 10)
	dst = append(dst, `,"window_end":`...)
	dst = strconv.AppendInt(dst, r.end, 10)
	return append(dst, `,"retract":true}`...)
}

// store writes the decoded sessions back and sets the timer to the earliest close.
func (s *Sessions) store(ctx Context) error {
	if len(s.ss) == 0 && len(s.retract) == 0 {
		ctx.Delete()
		return nil
	}
	ctx.Put(s.encode())
	if len(s.ss) == 0 {
		ctx.ClearTimer() // only retractions, which the next flush writes
		return nil
	}
	next := int64(math.MaxInt64)
	for _, x := range s.ss {
		next = min(next, s.closeAt(x.last))
	}
	ctx.SetTimer(next)
	return nil
}

var _ PartialMerger = (*Sessions)(nil)

// A partial of a re-keying writer (PartialMerger) is a sessions state of the layout of emit:
// final, whatever the operator emits: a uint32 count n, then n sessions in start order, each
// start, last and aggregate state. The writer's state in its table is that, in at least
// PartialSize bytes (one session; a new state holds none).

// PartialSize is the size of a partial state of one session.
func (s *Sessions) PartialSize() int { return 4 + 16 + s.agg.StateSize() }

// InitPartial writes a partial state of no session into dst (PartialSize bytes).
func (s *Sessions) InitPartial(dst []byte) {
	clear(dst)
}

// PartialBytes returns the partial state st without the room it leaves unused (the writer's
// record of it).
func (s *Sessions) PartialBytes(st []byte) []byte {
	n := int(binary.BigEndian.Uint32(st))
	return st[:4+n*(16+s.agg.StateSize())]
}

// FoldPartial merges the record at ts, whose projected input is in, into the partial state st
// (the writer's own, as FoldPartial made it), as Process merges it into a key's sessions, and
// returns the state: st, or a new slice when it holds more sessions than st has room for.
func (s *Sessions) FoldPartial(st []byte, ts int64, in []byte) []byte {
	s.ss, s.retract, s.arena = s.ss[:0], s.retract[:0], s.arena[:0]
	s.decodeAs(s.PartialBytes(st), false)
	merged := s.newSession(ts, ts)
	s.agg.InitState(merged.st)
	s.agg.Fold(merged.st, in)
	s.absorb(merged)
	s.buf = s.encodeAs(s.buf[:0], false)
	return append(st[:0], s.buf...)
}

// PartialStart returns the earliest event time of the partial p, the writer's record of a
// partial state; false when p is not one of this operator's (its times outside the years a
// record's can be, MinTime to MaxTime, included).
func (s *Sessions) PartialStart(p []byte) (int64, bool) {
	size := s.agg.StateSize()
	if len(p) < 4 {
		return 0, false
	}
	n := uint64(binary.BigEndian.Uint32(p))
	if n == 0 || uint64(len(p)-4) != n*uint64(16+size) {
		return 0, false
	}
	start := int64(math.MaxInt64)
	for q := p[4:]; len(q) > 0; q = q[16+size:] {
		first, last := int64(binary.BigEndian.Uint64(q)), int64(binary.BigEndian.Uint64(q[8:]))
		if last < first || first < MinTime || last > MaxTime || !s.agg.ValidState(q[16:16+size]) {
			return 0, false
		}
		start = min(start, first)
	}
	return start, true
}

// MergePartial merges each session of the partial p (PartialStart validated it) into the key's
// sessions, as Process merges a record: the key's sessions are then those the partial's records
// would have made one by one.
func (s *Sessions) MergePartial(ctx Context, key, p []byte) error {
	if !s.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a sessions state", s.Name(), key)
	}
	size := s.agg.StateSize()
	for q := p[4:]; len(q) >= 16+size; q = q[16+size:] {
		x := s.newSession(int64(binary.BigEndian.Uint64(q)), int64(binary.BigEndian.Uint64(q[8:])))
		copy(x.st, q[16:16+size])
		s.absorb(x)
	}
	return s.store(ctx)
}
