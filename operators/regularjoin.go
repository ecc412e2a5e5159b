package operators

import (
	"encoding/binary"
	"fmt"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// RegularJoin is the unbounded (regular) inner stream-stream join (configs.Join with left and
// right and no within): per key, every pair of a left and a right record is emitted exactly
// once, as {"<left>": {...}, "<right>": {...}}, whenever its two records arrived, as Flink's
// regular INNER JOIN on append-only inputs. The pairs depend only on which records arrived, not
// on how the two inputs interleave, so both modes give the same answer.
//
// State: every record of the key, of both sides, for ever. With unique (left or right), that
// side has at most one record per key (an entity: an auction, a person): its first record of a
// key is the one, a later one of the key is ignored, and a record of the other side that arrives
// after it is emitted with it and not kept, so the key's state stays one record; records of the
// other side that arrived before it wait in the state until it comes.
//
// State layout: per record its side (1 byte) and length (4 bytes, big-endian), then its bytes,
// the unique side's record first. Not safe for concurrent use; Layout, ValidState and IsLate
// are.
type RegularJoin struct {
	name        string
	left, right string // the input names: the output's member names
	unique      int    // sideLeft, sideRight, or -1 (none)

	recs []sjRecord // decoded state, scratch (values alias the state)
	out  []byte
	st   []byte
}

// NewRegularJoin compiles a regular inner join; cfg must have been validated.
func NewRegularJoin(name string, cfg configs.Join) (*RegularJoin, error) {
	if cfg.Left == "" || cfg.Right == "" || cfg.Within != 0 {
		return nil, fmt.Errorf("operators: join %s: a regular join needs left and right and no within", name)
	}
	if cfg.Type != "" && cfg.Type != configs.JoinInner {
		return nil, fmt.Errorf("operators: join %s: a regular join is inner (left and outer joins need within)", name)
	}
	j := &RegularJoin{name: name, left: cfg.Left, right: cfg.Right, unique: -1}
	switch cfg.Unique {
	case "":
	case configs.SideLeft:
		j.unique = sideLeft
	case configs.SideRight:
		j.unique = sideRight
	default:
		return nil, fmt.Errorf("operators: join %s: unknown unique %q", name, cfg.Unique)
	}
	return j, nil
}

// Name returns the operator name.
func (j *RegularJoin) Name() string { return j.name }

// Attributes: the join sorts its input in backlog (by key) and emits as pairs complete.
func (j *RegularJoin) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind, the sides and which is unique.
func (j *RegularJoin) Layout() Layout {
	unique := "none"
	switch j.unique {
	case sideLeft:
		unique = j.left
	case sideRight:
		unique = j.right
	}
	return Layout{Kind: "regular-join", Version: 1, Parts: []string{
		LayoutPart("sides", "list", j.left, j.right),
		LayoutPart("unique", "side", unique),
	}}
}

// Project appends the side of input (0 left, 1 right) and the record's value.
func (j *RegularJoin) Project(input int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: j.name, Reason: reasonNoKey}
	}
	if input != sideLeft && input != sideRight {
		return dst, fmt.Errorf("operators: join %s: input %d", j.name, input)
	}
	return append(append(dst, byte(input)), r.Value...), nil
}

// IsLate: never (a regular join does not use event time).
func (j *RegularJoin) IsLate(int, int64, int64) bool { return false }

// Process emits the record's pairs with the key's records of the other side and keeps it (or,
// with a unique side, keeps only what may still pair).
func (j *RegularJoin) Process(ctx Context, key []byte, _ int64, in []byte) error {
	if len(in) < 1 || in[0] > sideRight {
		return fmt.Errorf("operators: join %s: bad input", j.name)
	}
	if !j.decode(ctx.State()) {
		return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
	}
	side, value := in[0], in[1:]
	have := j.unique >= 0 && len(j.recs) > 0 && int(j.recs[0].side) == j.unique
	if int(side) == j.unique && have {
		return nil // the unique side's record of the key came already
	}
	for _, r := range j.recs {
		if r.side != side {
			j.emit(ctx, side, value, r.value)
		}
	}
	switch {
	case int(side) == j.unique:
		// The unique record joined the waiting ones; it alone stays.
		j.recs = append(j.recs[:0], sjRecord{side: side, value: value})
	case have:
		return nil // joined the unique record; nothing else can pair with it
	default:
		j.recs = append(j.recs, sjRecord{side: side, value: value})
	}
	j.store(ctx)
	return nil
}

// emit emits the pair of a record of side and a record of the other side.
func (j *RegularJoin) emit(ctx Context, side byte, value, other []byte) {
	l, r := value, other
	if side == sideRight {
		l, r = other, value
	}
	out := jsonstr.AppendString(append(j.out[:0], '{'), j.left)
	out = append(append(append(out, ':'), l...), ',')
	out = jsonstr.AppendString(out, j.right)
	j.out = append(append(append(out, ':'), r...), '}')
	ctx.Emit(j.out)
}

// OnTimer is never called (the operator sets no timer).
func (j *RegularJoin) OnTimer(Context, []byte, int64) error { return nil }

func (j *RegularJoin) store(ctx Context) {
	st := j.st[:0]
	for _, r := range j.recs {
		st = append(st, r.side)
		st = binary.BigEndian.AppendUint32(st, uint32(len(r.value)))
		st = append(st, r.value...)
	}
	j.st = st
	ctx.Put(st)
}

// decode loads st into j.recs (values alias st); false for bytes that are not a join state.
func (j *RegularJoin) decode(st []byte) bool {
	j.recs = j.recs[:0]
	for len(st) > 0 {
		if len(st) < 5 || st[0] > sideRight {
			return false
		}
		l := int(binary.BigEndian.Uint32(st[1:]))
		if len(st) < 5+l {
			return false
		}
		j.recs = append(j.recs, sjRecord{side: st[0], value: st[5 : 5+l]})
		st = st[5+l:]
	}
	return true
}

// ValidState reports whether b is a state of this join: well formed, and with a unique side,
// either that side's one record alone or only the other side's records.
func (j *RegularJoin) ValidState(b []byte) bool {
	c := RegularJoin{unique: j.unique}
	if len(b) == 0 || !c.decode(b) {
		return false
	}
	if j.unique < 0 {
		return true
	}
	uniques := 0
	for _, r := range c.recs {
		if int(r.side) == j.unique {
			uniques++
		}
	}
	return uniques == 0 || uniques == 1 && len(c.recs) == 1
}
