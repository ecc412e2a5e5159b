package operators

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Distinct marks, per key, the first record that passes each of its flags (boolean
// expressions): a record that is the key's first for some flag goes on, in arrival order, with
// one 0/1 column per flag, 1 for each flag it is the key's first to pass; every other record is
// dropped. Keyed by (group, value) (a composite group_by such as "day, bidder"), the columns
// summed per group by a later aggregate (or cogroup, beside the group's record counts taken from
// another branch) are COUNT(DISTINCT value) FILTER (WHERE flag) per group: the first step of
// Flink's split-distinct aggregation, whose partial counts are these +1 deltas.
//
// The per-record cost does not grow with the number of distinct values: a key's state is a
// version byte and a 64-bit mask of the flags it has seen (9 bytes). It is a Keyed operator
// (backlog replays each key's records in arrival order), so every mode marks the same records.
// What it emits follows from its state alone (a record is emitted once, with the change of mask
// it makes), so a replay of records whose state was committed emits nothing again. Not safe for
// concurrent use; Layout, ValidState and IsLate are.
type Distinct struct {
	name  string
	flags []string // column names, sorted: bit i is flags[i]
	exprs []string
	progs []*vm.Program
	env   exprEnv
	st    []byte
	out   []byte
}

const distinctVersion = 1

// NewDistinct compiles a distinct operator; cfg must have been validated.
func NewDistinct(name string, cfg configs.Distinct) (*Distinct, error) {
	if len(cfg.Flags) == 0 || len(cfg.Flags) > 64 {
		return nil, fmt.Errorf("operators: distinct %s: needs 1 to 64 flags, not %d", name, len(cfg.Flags))
	}
	d := &Distinct{name: name}
	for f := range cfg.Flags {
		d.flags = append(d.flags, f)
	}
	slices.Sort(d.flags)
	for _, f := range d.flags {
		p, err := compile(name, cfg.Flags[f], expr.AsBool())
		if err != nil {
			return nil, &FieldError{Operator: name, Field: f, Part: "flags", Err: err}
		}
		d.exprs = append(d.exprs, cfg.Flags[f])
		d.progs = append(d.progs, p)
		d.env.addProgram(p)
	}
	return d, nil
}

// Name returns the operator name.
func (d *Distinct) Name() string { return d.name }

// Attributes: the operator sorts its input in backlog (by key) and emits as it goes.
func (d *Distinct) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind and the flags in bit order, each with its expression (another expression
// makes the stored masks mean something else).
func (d *Distinct) Layout() Layout {
	parts := make([]string, len(d.flags))
	for i, f := range d.flags {
		parts[i] = LayoutPart(f, "flag", d.exprs[i])
	}
	return Layout{Kind: "distinct", Version: distinctVersion, Parts: parts}
}

// ValidState reports whether b is a state of this operator: the version byte and a mask of no
// more bits than flags.
func (d *Distinct) ValidState(b []byte) bool {
	if len(b) != 9 || b[0] != distinctVersion {
		return false
	}
	return len(d.flags) == 64 || binary.BigEndian.Uint64(b[1:])>>len(d.flags) == 0
}

// Project evaluates the flags and appends their mask (8 bytes, big-endian) and the record's
// value without the members named as flags (Process adds them). A record without a key, or one
// on which a flag fails (a missing field compared), is an *Error.
func (d *Distinct) Project(_ int, r *Record, dst []byte) ([]byte, error) {
	mask, err := d.Mask(r)
	if err != nil {
		return dst, err
	}
	dst = binary.BigEndian.AppendUint64(dst, mask)
	idx, _ := r.index() // fill succeeded, so Value is indexed
	v := r.Value
	dst = append(dst, '{')
	first := true
	for _, m := range idx {
		if slices.ContainsFunc(d.flags, func(f string) bool { return nameEquals(v[m.ks:m.ke], m.esc, f) }) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, v[m.ks-1:m.ke+1]...)
		dst = append(dst, ':')
		dst = append(dst, v[m.vs:m.ve]...)
	}
	return append(dst, '}'), nil
}

// Mask evaluates the flags on r: bit i is set when flags[i] passes. A record without a key, or
// one on which a flag fails (a missing field compared), is an *Error.
func (d *Distinct) Mask(r *Record) (uint64, error) {
	if r.Key == nil {
		return 0, &Error{Operator: d.name, Reason: reasonNoKey}
	}
	if err := d.env.fill(r); err != nil {
		return 0, &Error{Operator: d.name, Reason: err.Error()}
	}
	var mask uint64
	for i, p := range d.progs {
		out, err := d.env.vm.Run(p, d.env.vars)
		if err != nil {
			return 0, &Error{Operator: d.name, Reason: fmt.Sprintf("flag %s: %s", d.flags[i], d.env.reason(err))}
		}
		pass, ok := out.(bool)
		if !ok {
			return 0, &Error{Operator: d.name, Reason: fmt.Sprintf("flag %s: result is %T, want bool", d.flags[i], out)}
		}
		if pass {
			mask |= 1 << i
		}
	}
	return mask, nil
}

// IsLate: never (a key remembers its flags for ever).
func (d *Distinct) IsLate(int, int64, int64) bool { return false }

// Process marks the flags the key sees for the first time and, if there are any, emits the
// record with its columns.
func (d *Distinct) Process(ctx Context, key []byte, _ int64, in []byte) error {
	if len(in) < 10 {
		return fmt.Errorf("operators: %s: key %q: projected input of %d bytes", d.name, key, len(in))
	}
	var seen uint64
	if st := ctx.State(); st != nil {
		if !d.ValidState(st) {
			return fmt.Errorf("operators: %s: key %q: stored state is not a distinct state", d.name, key)
		}
		seen = binary.BigEndian.Uint64(st[1:])
	}
	mask := binary.BigEndian.Uint64(in)
	firsts := mask &^ seen
	if firsts == 0 {
		return nil // no first: nothing to count
	}
	d.st = binary.BigEndian.AppendUint64(append(d.st[:0], distinctVersion), seen|mask)
	ctx.Put(d.st)
	body := in[8:]
	d.out = append(d.out[:0], body[:len(body)-1]...)
	for i, f := range d.flags {
		if i > 0 || len(body) > 2 {
			d.out = append(d.out, ',')
		}
		d.out = jsonstr.AppendString(d.out, f)
		if firsts&(1<<i) != 0 {
			d.out = append(d.out, ":1"...)
		} else {
			d.out = append(d.out, ":0"...)
		}
	}
	ctx.Emit(append(d.out, '}'))
	return nil
}

// OnTimer is never called: the operator sets no timer.
func (d *Distinct) OnTimer(Context, []byte, int64) error { return nil }
