package operators

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/sluice-dev/sluice/configs"
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
// State layout: a uint32 count n, then n sessions in increasing start order, each start and last
// event time (int64, big-endian) and the aggregate state of its records. The key's timer is
// the earliest close of its sessions. Not safe for concurrent use (one per task); Layout and
// IsLate are.
type Sessions struct {
	agg   *Aggregate
	gap   int64
	grace int64
	hold  int64 // a session cogroup's extra delay before a session closes: gap - 1 (0 for one input)

	ss    []session // scratch: the decoded sessions of the key being processed
	buf   []byte    // scratch: the encoded state, the rendered output
	arena []byte    // scratch: aggregate states of ss
}

type session struct {
	start, last int64
	st          []byte // aggregate state (in arena)
}

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
	if agg.Emit() != "final" {
		return nil, fmt.Errorf("operators: %s: session windows emit final results only (a merge would have to retract the sessions it merged)", name)
	}
	s := &Sessions{agg: agg, gap: w.Session.Milliseconds(), grace: w.Grace.Milliseconds()}
	if s.gap <= 0 {
		return nil, fmt.Errorf("operators: %s: session gap %v: want at least 1ms", name, w.Session)
	}
	if len(agg.Inputs()) > 1 {
		s.hold = s.gap - 1
	}
	return s, nil
}

// Name returns the operator name.
func (s *Sessions) Name() string { return s.agg.Name() }

// Attributes: InternalSorter and OutputOnlyAtEnd (final results only).
func (s *Sessions) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnlyAtEnd: true}
}

// Layout is the aggregate's layout, which ends with the session gap (window=session:<gap>ms);
// a session cogroup's is the cogroup's (kind cogroup, its inputs, each field's input).
func (s *Sessions) Layout() Layout { return s.agg.Layout() }

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

// decode loads st into s.ss. It reports false for bytes that are not a sessions state.
func (s *Sessions) decode(st []byte) bool {
	s.ss = s.ss[:0]
	s.arena = s.arena[:0]
	if len(st) == 0 {
		return true
	}
	if len(st) < 4 {
		return false
	}
	n := int(binary.BigEndian.Uint32(st))
	size := s.agg.StateSize()
	if len(st) != 4+n*(16+size) {
		return false
	}
	s.arena = slices.Grow(s.arena, (n+1)*size) // room for Process's merged session too
	p := st[4:]
	for range n {
		off := len(s.arena)
		s.arena = append(s.arena, p[16:16+size]...)
		s.ss = append(s.ss, session{
			start: int64(binary.BigEndian.Uint64(p)),
			last:  int64(binary.BigEndian.Uint64(p[8:])),
			st:    s.arena[off : off+size : off+size],
		})
		p = p[16+size:]
	}
	return true
}

// encode writes s.ss as a state into s.buf and returns it.
func (s *Sessions) encode() []byte {
	b := binary.BigEndian.AppendUint32(s.buf[:0], uint32(len(s.ss)))
	for _, x := range s.ss {
		b = binary.BigEndian.AppendUint64(b, uint64(x.start))
		b = binary.BigEndian.AppendUint64(b, uint64(x.last))
		b = append(b, x.st...)
	}
	s.buf = b
	return b
}

// ValidState reports whether b is a sessions state of this operator.
func (s *Sessions) ValidState(b []byte) bool {
	var t Sessions = Sessions{agg: s.agg}
	if !t.decode(b) {
		return false
	}
	for i, x := range t.ss {
		if x.last < x.start || !s.agg.ValidState(x.st) || i > 0 && t.ss[i-1].last >= x.start {
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
	size := s.agg.StateSize()
	off := len(s.arena)
	s.arena = append(s.arena, make([]byte, size)...)
	merged := session{start: ts, last: ts, st: s.arena[off : off+size : off+size]}
	s.agg.InitState(merged.st)
	s.agg.Fold(merged.st, in)
	out := s.ss[:0:0]
	for _, x := range s.ss {
		if ts-x.last < s.gap && x.start-ts < s.gap {
			s.agg.Merge(merged.st, x.st)
			merged.start, merged.last = min(merged.start, x.start), max(merged.last, x.last)
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
	return s.store(ctx)
}

// OnTimer closes the key's sessions that the watermark has reached: each emits its final
// result and is forgotten.
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
		s.buf = s.agg.RenderWindow(key, x.start, sat(x.last, s.gap), x.st, s.buf[:0])
		ctx.Emit(s.buf)
	}
	s.ss = keep
	return s.store(ctx)
}

// store writes the decoded sessions back and sets the timer to the earliest close.
func (s *Sessions) store(ctx Context) error {
	if len(s.ss) == 0 {
		ctx.Delete()
		return nil
	}
	next := int64(math.MaxInt64)
	for _, x := range s.ss {
		next = min(next, s.closeAt(x.last))
	}
	ctx.Put(s.encode())
	ctx.SetTimer(next)
	return nil
}
