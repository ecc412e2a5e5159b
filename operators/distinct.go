package operators

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/expr-lang/expr"

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
// With a window (tumbling or hopping event-time windows, configs.Distinct.Window), a key's
// flags are per window: a record goes on once for each of its windows (still open at its
// watermark) in which it is the key's first for some flag, with that window's columns,
// window_start and window_end, and with the window's end - 1 as its event time (TimedResults),
// as an aggregate's finals: a later aggregate or cogroup over the same windows that reads them
// as window finals (configs.Aggregate.WindowFinals) sums each into its own window alone
// (COUNT(DISTINCT value) per group and window, expandCountDistinct). A window's flags
// are forgotten once the watermark reaches its end + grace; a record whose every window is
// closed is late (dead-letter topic).
//
// The per-record cost does not grow with the number of distinct values: a key's state is a
// version byte and a 64-bit mask of the flags it has seen (9 bytes); with windows, a version
// byte and, per open window in increasing start order, its start and its mask (16 bytes each),
// the key's timer the earliest window's close. It is a Keyed operator
// (backlog replays each key's records in arrival order), so every mode marks the same records.
// What it emits follows from its state alone (a record is emitted once, with the change of mask
// it makes), so a replay of records whose state was committed emits nothing again. Not safe for
// concurrent use; Layout, ValidState and IsLate are.
type Distinct struct {
	name  string
	flags []string // column names, sorted: bit i is flags[i]
	names [][]byte // each flag's column name as a JSON string, with its colon
	drop  []string // members of the input left out of the output: the flags, and the window's columns
	keep  []string // nil, or the only members of the input its output has (besides its columns; none of drop)
	exprs []string
	progs []*program
	env   exprEnv
	win   *Windows // nil: a key's flags for ever
	ws    []distinctWindow
	st    []byte
	out   []byte
}

// distinctWindow is one open window of a key: its start and the flags it has seen.
type distinctWindow struct {
	start int64
	seen  uint64
}

const (
	distinctVersion        = 1 // the state of a distinct without windows: the version and a mask
	distinctWindowsVersion = 2 // with windows: the version, then (start, mask) per open window
)

// NewDistinct compiles a distinct operator; cfg must have been validated. keep, unless nil,
// names the only members of its input records its output records have besides its columns
// (those its readers read: plan.ChainPlan.Keep).
func NewDistinct(name string, cfg configs.Distinct, keep []string) (*Distinct, error) {
	if len(cfg.Flags) == 0 || len(cfg.Flags) > 64 {
		return nil, fmt.Errorf("operators: distinct %s: needs 1 to 64 flags, not %d", name, len(cfg.Flags))
	}
	d := &Distinct{name: name, keep: keep}
	for f := range cfg.Flags {
		d.flags = append(d.flags, f)
	}
	slices.Sort(d.flags)
	for _, f := range d.flags {
		d.names = append(d.names, append(jsonstr.AppendString(nil, f), ':'))
	}
	d.drop = d.flags
	switch k := cfg.Window.Kind(); k {
	case "":
	case "tumbling", "hopping":
		win, err := NewWindows(cfg.Window)
		if err != nil {
			return nil, fmt.Errorf("operators: distinct %s: window: %w", name, err)
		}
		d.win = win
		d.drop = append(slices.Clip(d.flags), "window_start", "window_end")
	default:
		return nil, fmt.Errorf("operators: distinct %s: window: want tumbling or hopping, got %q", name, k)
	}
	if keep != nil { // what it keeps that is not dropped: one list to ask per member
		d.keep = slices.DeleteFunc(slices.Clone(keep), func(m string) bool { return slices.Contains(d.drop, m) })
	}
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
// makes the stored masks mean something else); with windows, their size, advance and grace.
func (d *Distinct) Layout() Layout {
	parts := make([]string, len(d.flags))
	for i, f := range d.flags {
		parts[i] = LayoutPart(f, "flag", d.exprs[i])
	}
	if d.win == nil {
		return Layout{Kind: "distinct", Version: distinctVersion, Parts: parts}
	}
	parts = append(parts, LayoutPart("window", "ms", strconv.FormatInt(d.win.Size, 10), strconv.FormatInt(d.win.Advance, 10), strconv.FormatInt(d.win.Grace, 10)))
	return Layout{Kind: "distinct", Version: distinctWindowsVersion, Parts: parts}
}

// OutputLag is how far behind the watermark the event time of a record emitted later can lie
// (TimedResults): a window still open at watermark wm closes after it, start + size + grace >
// wm, so its end - 1 >= wm - grace. Without windows, records carry no event time (0).
func (d *Distinct) OutputLag() int64 {
	if d.win == nil {
		return 0
	}
	return d.win.Grace
}

// ValidState reports whether b is a state of this operator: the version byte and a mask of no
// more bits than flags; with windows, windows in increasing start order, each with some flag
// seen and no more bits than flags.
func (d *Distinct) ValidState(b []byte) bool {
	if d.win == nil {
		return len(b) == 9 && b[0] == distinctVersion && d.validMask(binary.BigEndian.Uint64(b[1:]))
	}
	v := Distinct{flags: d.flags, win: d.win}
	if len(b) < 1+16 || !v.decode(b) {
		return false
	}
	for i, x := range v.ws {
		if i > 0 && v.ws[i-1].start >= x.start || x.seen == 0 || !d.validMask(x.seen) || floorDiv(x.start, d.win.Advance)*d.win.Advance != x.start {
			return false
		}
	}
	return true
}

// validMask reports whether m has no more bits than flags.
func (d *Distinct) validMask(m uint64) bool {
	return len(d.flags) == 64 || m>>len(d.flags) == 0
}

// decode loads a windowed state into d.ws (empty for none).
func (d *Distinct) decode(b []byte) bool {
	d.ws = d.ws[:0]
	if len(b) == 0 {
		return true
	}
	if b[0] != distinctWindowsVersion || (len(b)-1)%16 != 0 {
		return false
	}
	for b = b[1:]; len(b) > 0; b = b[16:] {
		d.ws = append(d.ws, distinctWindow{start: int64(binary.BigEndian.Uint64(b)), seen: binary.BigEndian.Uint64(b[8:])})
	}
	return true
}

// store writes d.ws back and sets the timer to the earliest close (none left: the state and
// timer are deleted).
func (d *Distinct) store(ctx Context) {
	if len(d.ws) == 0 {
		ctx.Delete()
		return
	}
	d.st = append(d.st[:0], distinctWindowsVersion)
	for _, x := range d.ws {
		d.st = binary.BigEndian.AppendUint64(d.st, uint64(x.start))
		d.st = binary.BigEndian.AppendUint64(d.st, x.seen)
	}
	ctx.Put(d.st)
	ctx.SetTimer(d.win.Close(d.ws[0].start))
}

// Project evaluates the flags and appends their mask (8 bytes, big-endian) and the record's
// value without the members named as flags (and, with windows, as the window's columns), which
// Process adds, and with keep, only the members it names. A record without a key, or one
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
		named := func(f string) bool { return nameEquals(v[m.ks:m.ke], m.esc, f) }
		if d.keep != nil && !slices.ContainsFunc(d.keep, named) || d.keep == nil && slices.ContainsFunc(d.drop, named) {
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
	if err := d.env.begin(r); err != nil {
		return 0, &Error{Operator: d.name, Reason: err.Error()}
	}
	var mask uint64
	for i, p := range d.progs {
		out, err := d.env.run(p)
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

// IsLate reports whether every window of a record at ts is closed at wm (the last of them, the
// one starting at or before ts latest, closes at or before wm); without windows, never (a key
// remembers its flags for ever).
func (d *Distinct) IsLate(_ int, ts, wm int64) bool {
	return d.win != nil && d.win.Close(floorDiv(ts, d.win.Advance)*d.win.Advance) <= wm
}

// Process marks the flags the key sees for the first time (with windows: in each of the
// record's windows still open) and, if there are any, emits the record with its columns.
func (d *Distinct) Process(ctx Context, key []byte, ts int64, in []byte) error {
	if len(in) < 10 {
		return fmt.Errorf("operators: %s: key %q: projected input of %d bytes", d.name, key, len(in))
	}
	if d.win != nil {
		return d.processWindows(ctx, key, ts, in)
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
	d.out = d.appendOutput(d.out[:0], in[8:], firsts)
	ctx.Emit(d.out)
	return nil
}

// processWindows is Process with windows: the record's mask against each of its open windows.
func (d *Distinct) processWindows(ctx Context, key []byte, ts int64, in []byte) error {
	if !d.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a windowed distinct state", d.name, key)
	}
	mask := binary.BigEndian.Uint64(in)
	if mask == 0 {
		return nil // no flag passes: nothing to mark in any window
	}
	changed := false
	d.win.Assign(ts, ctx.Watermark(), func(start int64) {
		i := 0
		for i < len(d.ws) && d.ws[i].start < start {
			i++
		}
		if i == len(d.ws) || d.ws[i].start != start {
			d.ws = slices.Insert(d.ws, i, distinctWindow{start: start})
		}
		firsts := mask &^ d.ws[i].seen
		if firsts == 0 {
			return
		}
		d.ws[i].seen |= mask
		changed = true
		end := start + d.win.Size
		d.out = d.appendOutput(d.out[:0], in[8:], firsts)
		d.out = append(d.out[:len(d.out)-1], `,"window_start":`...)
		d.out = strconv.AppendInt(d.out, start, 10)
		d.out = append(d.out, `,"window_end":`...)
		d.out = strconv.AppendInt(d.out, end, 10)
		ctx.EmitAt(append(d.out, '}'), end-1)
	})
	if changed {
		d.store(ctx)
	}
	return nil
}

// appendOutput appends the record's value (body: its members without the dropped ones, as a
// JSON object) with a 0/1 column per flag, 1 for the flags in firsts.
func (d *Distinct) appendOutput(dst, body []byte, firsts uint64) []byte {
	dst = append(dst, body[:len(body)-1]...)
	for i, name := range d.names {
		if i > 0 || len(body) > 2 {
			dst = append(dst, ',')
		}
		dst = append(dst, name...)
		dst = append(dst, '0'+byte(firsts>>i&1))
	}
	return append(dst, '}')
}

// OnTimer forgets every window of the key that the watermark has closed (without windows it
// is never called: no timer is set).
func (d *Distinct) OnTimer(ctx Context, key []byte, _ int64) error {
	if d.win == nil {
		return nil
	}
	if !d.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a windowed distinct state", d.name, key)
	}
	wm := ctx.Watermark()
	open := d.ws[:0]
	for _, x := range d.ws {
		if d.win.Close(x.start) > wm {
			open = append(open, x)
		}
	}
	d.ws = open
	d.store(ctx)
	return nil
}
