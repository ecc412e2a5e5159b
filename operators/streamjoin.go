package operators

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/sluice-dev/sluice/configs"
)

// StreamJoin is the windowed stream-stream join (configs.Join with left, right and within): per
// key, every pair of a left and a right record whose event times are at most within apart is
// emitted exactly once, as {"<left>": {...}, "<right>": {...}}; with type left (or outer) a
// left (or either) record that found no partner is emitted with null for the other side once
// no partner can arrive any more, never earlier (no spurious nulls).
//
// Time: a record at t is late when the watermark of its own input, including it, has passed
// t + within (its last partner would be late); the runtime sends it to the dead-letter topic. A
// buffered record is dropped (and, unmatched, emitted with null) when the operator's
// watermark, the smaller of its inputs' watermarks, passes t + 2·within: by then any partner of
// it is late by its own input's watermark. So the pairs and the unmatched records depend only
// on which records are late, decided per input in offset order, and not on how the two inputs
// interleave: the answer is the same in both modes and across aborts.
//
// State per key: the buffered records in a canonical order (side, time, value), each with a
// matched flag; the key's timer is the earliest drop time among them. A StreamJoin belongs to
// one task and is not safe for concurrent use; Layout, ValidState and IsLate are.
type StreamJoin struct {
	name        string
	left, right string // the input names: the output's member names
	within      int64  // ms
	emitLeft    bool   // left and outer joins: unmatched left records
	emitRight   bool   // outer joins: unmatched right records
	kind        string
	sel         *PairSelect

	recs  []sjRecord // decoded state, scratch
	out   []byte
	names pairNames
	st    []byte
}

// sjRecord is one buffered record.
type sjRecord struct {
	side    byte // 0 left, 1 right
	matched bool
	ts      int64
	value   []byte
}

// Join sides, the first byte of a projected input.
const (
	sideLeft  = 0
	sideRight = 1
)

// NewStreamJoin compiles a windowed stream-stream join; cfg must have been validated.
func NewStreamJoin(name string, cfg configs.Join) (*StreamJoin, error) {
	if cfg.Left == "" || cfg.Right == "" || cfg.Within <= 0 {
		return nil, fmt.Errorf("operators: join %s: a stream-stream join needs left, right and within > 0", name)
	}
	sel, err := NewPairSelect(name, cfg.Columns(), cfg.Where)
	if err != nil {
		return nil, err
	}
	j := &StreamJoin{name: name, left: cfg.Left, right: cfg.Right, within: cfg.Within.Milliseconds(), kind: cfg.Type, sel: sel}
	switch cfg.Type {
	case "", configs.JoinInner:
		j.kind = configs.JoinInner
	case configs.JoinLeft:
		j.emitLeft = true
	case configs.JoinOuter:
		j.emitLeft, j.emitRight = true, true
	default:
		return nil, fmt.Errorf("operators: join %s: unknown type %q", name, cfg.Type)
	}
	return j, nil
}

// Name returns the operator name.
func (j *StreamJoin) Name() string { return j.name }

// Attributes: the join sorts its input in backlog (by key) and emits as pairs complete.
func (j *StreamJoin) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind, the window and the sides (a state's records carry their side).
func (j *StreamJoin) Layout() Layout {
	return Layout{Kind: "stream-join", Version: 1, Parts: []string{
		LayoutPart("within", "ms", strconv.FormatInt(j.within, 10)),
		LayoutPart("sides", "list", j.left, j.right),
	}}
}

// Project appends the side of input (0 left, 1 right) and the record's value.
func (j *StreamJoin) Project(input int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: j.name, Reason: reasonNoKey}
	}
	if input != sideLeft && input != sideRight {
		return dst, fmt.Errorf("operators: join %s: input %d", j.name, input)
	}
	dst = append(dst, byte(input))
	return append(dst, r.Value...), nil
}

func satAdd(a, b int64) int64 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxInt64
}

// IsLate reports whether a record at ts arriving at its input's watermark wm is late.
func (j *StreamJoin) IsLate(_ int, ts, wm int64) bool { return wm > satAdd(ts, j.within) }

// dropAt is when a record at ts leaves the state (the timer fires at the watermark ≥ dropAt).
func (j *StreamJoin) dropAt(ts int64) int64 { return satAdd(satAdd(ts, 2*j.within), 1) }

// Process buffers one record and emits its pairs with the buffered records of the other side.
func (j *StreamJoin) Process(ctx Context, key []byte, ts int64, in []byte) error {
	if len(in) < 1 || in[0] > sideRight {
		return fmt.Errorf("operators: join %s: bad input", j.name)
	}
	if !j.decode(ctx.State()) {
		return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
	}
	nr := sjRecord{side: in[0], ts: ts, value: in[1:]}
	matched := false
	for i := range j.recs {
		r := &j.recs[i]
		if r.side == nr.side || absDiff(r.ts, ts) > j.within {
			continue
		}
		l, rv := nr.value, r.value
		if nr.side == sideRight {
			l, rv = r.value, nr.value
		}
		paired, err := j.emitPair(ctx, key, l, rv)
		if err != nil {
			return err
		}
		if paired { // the where held
			matched = matched || !r.matched
			r.matched, nr.matched = true, true
		}
	}
	if matched {
		slices.SortStableFunc(j.recs, compareSJ) // a record's matched flag is part of the order
	}
	i, _ := slices.BinarySearchFunc(j.recs, nr, compareSJ)
	j.recs = slices.Insert(j.recs, i, nr)
	j.store(ctx)
	return nil
}

// OnTimer drops the records whose partners can no longer arrive, emitting the unmatched ones of
// a left or outer join.
func (j *StreamJoin) OnTimer(ctx Context, key []byte, at int64) error {
	if !j.decode(ctx.State()) {
		return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
	}
	wm := ctx.Watermark()
	keep := j.recs[:0]
	for _, r := range j.recs {
		if j.dropAt(r.ts) > wm {
			keep = append(keep, r)
			continue
		}
		if !r.matched {
			var err error
			switch {
			case r.side == sideLeft && j.emitLeft:
				_, err = j.emitPair(ctx, key, r.value, nil)
			case r.side == sideRight && j.emitRight:
				_, err = j.emitPair(ctx, key, nil, r.value)
			}
			if err != nil {
				return err
			}
		}
	}
	j.recs = keep
	j.store(ctx)
	return nil
}

// emitPair emits {"<left>": l, "<right>": r}, null for a nil side (its select's columns, with
// one), and reports whether it did (a pair its where does not hold for is not emitted).
func (j *StreamJoin) emitPair(ctx Context, key, l, r []byte) (bool, error) {
	return emitPair(ctx, j.sel, &j.out, &j.names, key, j.left, l, j.right, r, false) // paired: the where held
}

// store writes the records back (or deletes the key's state when none is left) and sets the
// timer to the earliest drop time.
func (j *StreamJoin) store(ctx Context) {
	if len(j.recs) == 0 {
		ctx.Delete()
		return
	}
	st := binary.BigEndian.AppendUint32(j.st[:0], uint32(len(j.recs)))
	next := int64(math.MaxInt64)
	for _, r := range j.recs {
		flags := r.side
		if r.matched {
			flags |= 2
		}
		st = append(st, flags)
		st = binary.BigEndian.AppendUint64(st, uint64(r.ts))
		st = binary.BigEndian.AppendUint32(st, uint32(len(r.value)))
		st = append(st, r.value...)
		next = min(next, j.dropAt(r.ts))
	}
	j.st = st
	ctx.Put(st)
	ctx.SetTimer(next)
}

// decode loads st into j.recs (the values alias st). It reports false for bytes that are not a
// join state.
func (j *StreamJoin) decode(st []byte) bool {
	j.recs = j.recs[:0]
	if len(st) == 0 {
		return true
	}
	if len(st) < 4 {
		return false
	}
	n := int(binary.BigEndian.Uint32(st))
	p := st[4:]
	for range n {
		if len(p) < 13 || p[0]&^3 != 0 || p[0]&1 > sideRight {
			return false
		}
		r := sjRecord{side: p[0] & 1, matched: p[0]&2 != 0, ts: int64(binary.BigEndian.Uint64(p[1:]))}
		l := int(binary.BigEndian.Uint32(p[9:]))
		if len(p) < 13+l {
			return false
		}
		r.value = p[13 : 13+l]
		p = p[13+l:]
		j.recs = append(j.recs, r)
	}
	return len(p) == 0
}

// ValidState reports whether b is a join state (records well formed, in canonical order).
func (j *StreamJoin) ValidState(b []byte) bool {
	var c StreamJoin
	if !c.decode(b) || (len(b) > 0 && len(c.recs) == 0) {
		return false
	}
	return slices.IsSortedFunc(c.recs, compareSJ)
}

// compareSJ orders buffered records canonically: side, time, value, matched.
func compareSJ(a, b sjRecord) int {
	switch {
	case a.side != b.side:
		return int(a.side) - int(b.side)
	case a.ts != b.ts:
		if a.ts < b.ts {
			return -1
		}
		return 1
	}
	if c := bytes.Compare(a.value, b.value); c != 0 {
		return c
	}
	switch {
	case a.matched == b.matched:
		return 0
	case !a.matched:
		return -1
	}
	return 1
}

func absDiff(a, b int64) int64 {
	if a > b {
		a, b = b, a
	}
	if d := b - a; d >= 0 {
		return d
	}
	return math.MaxInt64
}
