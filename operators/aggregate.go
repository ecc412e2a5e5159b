package operators

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Attributes are the FLIP-327/331 operator attributes. `sluice validate` prints them; the
// runtime does not read them (it runs every keyed operator the same way in each mode).
type Attributes struct {
	InternalSorter     bool // wants key-sorted input while in backlog
	OutputOnlyAtEnd    bool // emits only when its input leaves backlog or ends
	OutputOnCheckpoint bool // emits (at most once per key) when a checkpoint is taken
}

// Aggregate kinds.
const (
	aggSum = iota
	aggCount
	aggMin
	aggMax
	aggAvg
)

// State layout (all integers little-endian):
//
//	[0]      format version (stateVersion)
//	[1:9]    n, the number of records folded (uint64; count renders it)
//	then per spec, in Specs() order:
//	  sum, avg: 24 bytes, int192 sum of units (w0, w1, w2)
//	  min, max: 16 bytes, dec (lo, hi); meaningless while n == 0
//	  count:    nothing (it is n)
//
// Input layout: one dec (lo, hi; 16 bytes) per distinct field path, in first-use order. With
// retractions, a sign byte first (0: an addition, 1: a retraction, whose decs are negated).
const (
	stateVersion = 1
	headerSize   = 9
	sumSize      = 24
	decSize      = 16
)

type aggSpec struct {
	name   string
	kind   int
	src    int // the input it aggregates (cogroup); 0 otherwise
	field  string
	off    int    // offset in state
	in     int    // offset in input
	prefix []byte // `,"name":`
}

// Aggregate is the keyed aggregate operator (configs.Aggregate): sum, count, min, max and avg
// over numeric fields, with exact decimal arithmetic so the state after any set of records is
// the same bytes whatever order they were folded in.
//
// The state is a fixed-size byte slice owned and stored by the runtime; Fold mutates it in
// place. One Aggregate per task; not safe for concurrent use (its methods hold no mutable state
// besides their arguments, but that is not promised).
type Aggregate struct {
	name      string
	emit      string
	specs     []aggSpec
	fields    []path // distinct input fields, in input order
	stateSize int
	window    string // layout part of the window ("" when unwindowed)
	// windows assigns records to tumbling or hopping windows (nil: unwindowed, or session
	// windows, which are Sessions' own): see Mergeable.
	windows *Windows

	// A cogroup (NewCogroup) has several inputs: its state has a record count per input after
	// the version byte (header = 1 + 8·inputs), each spec counts or checks emptiness by its
	// input's count, and a projected input starts with its input's index followed by that
	// input's fields (srcFields[i], offsets srcIn).
	inputs    []string
	header    int
	srcFields [][]path

	// keyColumns: the key is a composite group_by's JSON object, whose members the output
	// carries as columns in place of "key".
	keyColumns bool

	// retract: the input is a change stream (configs.Aggregate.Retractions): a record whose
	// retract field is true is folded negated and counts -1, so an addition and its retraction
	// cancel to the bytes of neither; the count is then signed (a partial may be negative) and
	// a key with no record left renders nothing (the caller writes a tombstone).
	retract     bool
	retractPath path

	// outputLog: its results are its changelog (configs.Aggregate.Changelog output; StateOf).
	outputLog bool
}

// NewAggregate compiles the aggregate's field specs. cfg must have been validated.
func NewAggregate(name string, cfg configs.Aggregate) (*Aggregate, error) {
	a, err := newAggregate(name, cfg, nil, nil)
	if err == nil && cfg.OutputChangelog() {
		if !a.ResultsRebuildState() {
			return nil, fmt.Errorf("operators: %s: changelog: output needs results that give the state back (no window, retractions or avg)", name)
		}
		a.outputLog = true
	}
	return a, err
}

// NewCogroup compiles a cogroup (configs.Cogroup): an aggregate whose fields each take their
// records from one of several inputs. Records are projected with ProjectInput(i, ...), i the
// index of their input in cfg.Inputs. cfg must have been validated.
func NewCogroup(name string, cfg configs.Cogroup) (*Aggregate, error) {
	if len(cfg.Inputs) < 2 {
		return nil, fmt.Errorf("operators: %s: a cogroup needs two or more inputs", name)
	}
	a, err := newAggregate(name, *cfg.Aggregate(), cfg.Inputs, cfg.From())
	if a != nil {
		a.keyColumns = cfg.KeyColumns // rendering only: the state does not change
	}
	return a, err
}

func newAggregate(name string, cfg configs.Aggregate, inputs []string, from map[string]string) (*Aggregate, error) {
	header := headerSize
	if len(inputs) > 1 {
		header = 1 + 8*len(inputs)
	}
	a := &Aggregate{name: name, emit: cfg.Emit, stateSize: header, header: header, inputs: inputs}
	if cfg.Retractions {
		if len(inputs) > 1 || cfg.Window != nil {
			return nil, fmt.Errorf("operators: %s: retractions apply to an unwindowed aggregate of one input", name)
		}
		a.retract, a.retractPath = true, newPath(configs.RetractField)
	}
	if cfg.Window.Kind() == "session" {
		a.window = fmt.Sprintf("window=session:%dms", cfg.Window.Session.Milliseconds())
	} else if w, err := NewWindows(cfg.Window); err != nil {
		return nil, fmt.Errorf("operators: %s: %w", name, err)
	} else if w != nil {
		a.windows = w
		// Window keys mean their windows: another size or advance reads them wrongly. (Grace
		// changes when windows close, not what a state means.)
		a.window = fmt.Sprintf("window=tumbling:%dms", w.Size)
		if w.Advance != w.Size {
			a.window = fmt.Sprintf("window=hopping:%dms:advance:%dms", w.Size, w.Advance)
		}
	}
	switch cfg.Emit {
	case "":
		a.emit = "updates"
	case "updates", "final":
	default:
		return nil, fmt.Errorf("operators: %s: unknown emit %q (allowed: updates, final)", name, cfg.Emit)
	}
	specs := cfg.Specs()
	if len(specs) != len(cfg.Fields) {
		return nil, fmt.Errorf("operators: %s: aggregate has invalid fields (validate the config first)", name)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("operators: %s: aggregate has no fields", name)
	}
	reserved := []string{"", "key", "window_start", "window_end"}
	if parts := SplitGroupBy(cfg.GroupBy); len(parts) > 1 {
		a.keyColumns = true
		reserved = append(reserved, parts...)
	}
	fieldIn := map[string]int{}
	for _, sp := range specs {
		if slices.Contains(reserved, sp.Name) {
			return nil, fmt.Errorf("operators: %s: field name %q is reserved (the output's key columns: %s)", name, sp.Name, strings.Join(reserved[1:], ", "))
		}
		s := aggSpec{name: sp.Name, field: sp.Field, off: a.stateSize}
		if len(inputs) > 1 {
			s.src = -1
			for i, in := range inputs {
				if from[sp.Name] == in {
					s.src = i
				}
			}
			if s.src < 0 {
				return nil, fmt.Errorf("operators: %s: field %s: from %q is not an input (%v)", name, sp.Name, from[sp.Name], inputs)
			}
		}
		switch sp.Func {
		case "sum":
			s.kind = aggSum
		case "count":
			s.kind = aggCount
		case "min":
			s.kind = aggMin
		case "max":
			s.kind = aggMax
		case "avg":
			s.kind = aggAvg
		default:
			return nil, fmt.Errorf("operators: %s: field %s: unknown function %q (allowed: sum, count, min, max, avg)", name, sp.Name, sp.Func)
		}
		if a.retract && (s.kind == aggMin || s.kind == aggMax) {
			return nil, fmt.Errorf("operators: %s: field %s: %s cannot take a retraction back (use sum, count or avg)", name, sp.Name, sp.Func)
		}
		switch s.kind {
		case aggCount:
			s.field = ""
		case aggSum, aggAvg:
			a.stateSize += sumSize
		default:
			a.stateSize += decSize
		}
		if s.kind != aggCount {
			p, err := checkedPath(sp.Field)
			if err != nil {
				return nil, fmt.Errorf("operators: %s: field %s: %w", name, sp.Name, err)
			}
			if len(inputs) > 1 {
				// A cogroup projects each input's own fields.
				if a.srcFields == nil {
					a.srcFields = make([][]path, len(inputs))
				}
				key := fmt.Sprintf("%d\x00%s", s.src, sp.Field)
				in, ok := fieldIn[key]
				if !ok {
					in = len(a.srcFields[s.src]) * decSize
					fieldIn[key] = in
					a.srcFields[s.src] = append(a.srcFields[s.src], p)
				}
				s.in = in
			} else {
				in, ok := fieldIn[sp.Field]
				if !ok {
					in = len(a.fields) * decSize
					fieldIn[sp.Field] = in
					a.fields = append(a.fields, p)
				}
				s.in = in
			}
		}
		s.prefix = jsonstr.AppendString([]byte{','}, sp.Name)
		s.prefix = append(s.prefix, ':')
		a.specs = append(a.specs, s)
	}
	return a, nil
}

// Name returns the operator name.
func (a *Aggregate) Name() string { return a.name }

// Attributes: InternalSorter and OutputOnCheckpoint always; OutputOnlyAtEnd when emit=final.
func (a *Aggregate) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: a.emit != "final", OutputOnlyAtEnd: a.emit == "final"}
}

// Emit returns "updates" or "final".
func (a *Aggregate) Emit() string { return a.emit }

// StateSize is the fixed size of a key's state in bytes.
func (a *Aggregate) StateSize() int { return a.stateSize }

// InputSize is the fixed size of one projected input in bytes (0 when only counting without
// retractions).
func (a *Aggregate) InputSize() int {
	if a.retract {
		return 1 + len(a.fields)*decSize
	}
	return len(a.fields) * decSize
}

// Retractions reports whether the aggregate reads a change stream (configs.Aggregate.Retractions).
func (a *Aggregate) Retractions() bool { return a.retract }

// Inputs returns a cogroup's inputs (nil for an aggregate of one input).
func (a *Aggregate) Inputs() []string { return a.inputs }

// InitState writes an empty state into dst[:StateSize()].
func (a *Aggregate) InitState(dst []byte) {
	clear(dst[:a.stateSize])
	dst[0] = stateVersion
}

const reasonNoKey = "record has no key (aggregates are keyed: set the source's key field or produce keyed records)"

// Project appends the input r contributes, InputSize() bytes, to dst. A record without a key,
// a missing or non-numeric field, or an out-of-range number is an *Error (dst is returned
// unchanged). It does not allocate.
func (a *Aggregate) Project(r *Record, dst []byte) ([]byte, error) {
	return a.ProjectInput(0, r, dst)
}

// ProjectInput is Project for a record of input i of a cogroup (i indexes NewCogroup's
// inputs; an aggregate of one input has only input 0): the input's index, then its fields.
func (a *Aggregate) ProjectInput(i int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: a.name, Reason: reasonNoKey}
	}
	n0 := len(dst)
	fields := a.fields
	retraction := false
	if a.retract {
		raw, ok, err := r.lookup(a.retractPath)
		switch {
		case err != nil:
			return dst, &Error{Operator: a.name, Reason: err.Error()}
		case !ok || string(raw) == "false" || string(raw) == "null":
		case string(raw) == "true":
			retraction = true
		default:
			return dst, &Error{Operator: a.name, Reason: fmt.Sprintf("field %q is %s, want true (a retraction) or false", configs.RetractField, kindOf(raw[0]))}
		}
		dst = append(dst, b2u8(retraction))
	}
	if len(a.inputs) > 1 {
		if i < 0 || i >= len(a.inputs) {
			return dst, fmt.Errorf("operators: %s: input %d of %d", a.name, i, len(a.inputs))
		}
		dst = append(dst, byte(i))
		fields = a.srcFields[i]
	}
	for k := range fields {
		p := &fields[k]
		raw, ok, err := r.lookup(*p)
		if err != nil {
			return dst[:n0], &Error{Operator: a.name, Reason: err.Error()}
		}
		if !ok {
			return dst[:n0], &Error{Operator: a.name, Reason: fmt.Sprintf("field %q missing", p.text)}
		}
		if c := raw[0]; c != '-' && (c < '0' || c > '9') {
			return dst[:n0], &Error{Operator: a.name, Reason: fmt.Sprintf("field %q is %s, want a number", p.text, kindOf(c))}
		}
		d, err := parseDecimal(raw)
		if err != nil {
			return dst[:n0], &Error{Operator: a.name, Reason: fmt.Sprintf("field %q: %s: %s", p.text, raw, reason(err))}
		}
		if retraction {
			d = d.negate() // never overflows: a dec lies in [-(2^127-1), 2^127-1]
		}
		dst = binary.LittleEndian.AppendUint64(dst, d.lo)
		dst = binary.LittleEndian.AppendUint64(dst, d.hi)
	}
	return dst, nil
}

// reason strips the package prefix from a sentinel error for use in an *Error.
func reason(err error) string {
	switch err {
	case errNumberRange:
		return "number out of range"
	case errNumberSyntax:
		return "invalid number"
	}
	return err.Error()
}

func loadDec(b []byte) dec {
	return dec{lo: binary.LittleEndian.Uint64(b), hi: binary.LittleEndian.Uint64(b[8:])}
}

func storeDec(b []byte, d dec) {
	binary.LittleEndian.PutUint64(b, d.lo)
	binary.LittleEndian.PutUint64(b[8:], d.hi)
}

func loadSum(b []byte) int192 {
	return int192{
		w0: binary.LittleEndian.Uint64(b),
		w1: binary.LittleEndian.Uint64(b[8:]),
		w2: binary.LittleEndian.Uint64(b[16:]),
	}
}

func storeSum(b []byte, s int192) {
	binary.LittleEndian.PutUint64(b, s.w0)
	binary.LittleEndian.PutUint64(b[8:], s.w1)
	binary.LittleEndian.PutUint64(b[16:], s.w2)
}

// Fold folds one projected input into state, in place. The resulting bytes depend only on the
// multiset of inputs folded since InitState, never on their order. It does not allocate.
func (a *Aggregate) Fold(state, input []byte) {
	_ = state[a.stateSize-1]
	i := 0 // a cogroup's input starts with its index; it folds only that input's fields and count
	if len(a.inputs) > 1 {
		i, input = int(input[0]), input[1:]
	}
	one := uint64(1)
	if a.retract {
		if input[0] == 1 {
			one = ^uint64(0) // -1: the count wraps like the sums, so it cancels exactly
		}
		input = input[1:]
	}
	n := binary.LittleEndian.Uint64(state[1+8*i:])
	for k := range a.specs {
		s := &a.specs[k]
		if s.src != i {
			continue
		}
		switch s.kind {
		case aggSum, aggAvg:
			st := state[s.off : s.off+sumSize]
			storeSum(st, loadSum(st).add(loadDec(input[s.in:])))
		case aggMin:
			keepIf(state[s.off:s.off+decSize], loadDec(input[s.in:]), n == 0, -1)
		case aggMax:
			keepIf(state[s.off:s.off+decSize], loadDec(input[s.in:]), n == 0, 1)
		}
	}
	binary.LittleEndian.PutUint64(state[1+8*i:], n+one)
}

// count returns the records folded into state for spec s (its input's, in a cogroup).
func (a *Aggregate) count(state []byte, s *aggSpec) uint64 {
	return binary.LittleEndian.Uint64(state[1+8*s.src:])
}

// Merge folds the partial state src into dst, in place: the result is the state of folding
// dst's inputs and src's inputs, byte for byte whatever the split (sums add, counts add, min and
// max compare, an empty side changes nothing). It lets backlog mode pre-aggregate a key's
// records in memory and combine the partial with the stored state later. It does not allocate.
func (a *Aggregate) Merge(dst, src []byte) {
	_, _ = dst[a.stateSize-1], src[a.stateSize-1]
	for k := range a.specs {
		s := &a.specs[k]
		nd, ns := a.count(dst, s), a.count(src, s)
		if ns == 0 && !a.retract {
			continue // (with retractions, a partial of no net record may still move a sum)
		}
		switch s.kind {
		case aggSum, aggAvg:
			d := dst[s.off : s.off+sumSize]
			storeSum(d, loadSum(d).plus(loadSum(src[s.off:])))
		case aggMin:
			keepIf(dst[s.off:s.off+decSize], loadDec(src[s.off:]), nd == 0, -1)
		case aggMax:
			keepIf(dst[s.off:s.off+decSize], loadDec(src[s.off:]), nd == 0, 1)
		}
	}
	for i := range max(len(a.inputs), 1) { // the counts: one, or a cogroup's per input
		o := 1 + 8*i
		binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(dst[o:])+binary.LittleEndian.Uint64(src[o:]))
	}
}

// keepIf stores v as the min (want -1) or max (want 1) held in st, when st holds none yet
// (empty) or v beats it.
func keepIf(st []byte, v dec, empty bool, want int) {
	if empty || v.cmp(loadDec(st)) == want {
		storeDec(st, v)
	}
}

// Render appends the output JSON value for key's state to dst:
//
//	{"key":"c-1","amount":123.45,"avg_amount":41.15,"max_amount":99.1,"min_amount":1,"orders":3}
//
// "key" first, then each field in Specs() (name) order. Decimals have no trailing zeros; avg
// is rounded half-to-even to 9 fractional digits; min, max and avg of an empty state are null.
//
// With a composite group_by, the key's columns take the place of "key":
//
//	{"auction":1001,"day":"2015-07-15","bids":3}
//
// With retractions, a key whose every record was retracted (its count is not positive) has no
// row: Render appends nothing, and the caller writes a tombstone in its place.
func (a *Aggregate) Render(key, state, dst []byte) []byte {
	if a.retract && int64(binary.LittleEndian.Uint64(state[1:])) <= 0 {
		return dst
	}
	dst = a.appendKey(dst, key)
	return a.renderFields(state, dst)
}

// appendKey opens the output object with its key: "key", or a composite key's columns.
func (a *Aggregate) appendKey(dst, key []byte) []byte {
	if a.keyColumns && len(key) > 2 && key[0] == '{' && key[len(key)-1] == '}' {
		return append(dst, key[:len(key)-1]...)
	}
	dst = append(dst, `{"key":`...)
	return jsonstr.AppendBytes(dst, key)
}

// RenderWindow appends the output JSON value of a window's state to dst: Render's value with
// "window_start" and "window_end" (epoch ms) after "key":
//
//	{"key":"c-1","window_start":1767225600000,"window_end":1767229200000,"amount":12.5,"orders":2}
func (a *Aggregate) RenderWindow(key []byte, start, end int64, state, dst []byte) []byte {
	dst = a.appendKey(dst, key)
	dst = append(dst, `,"window_start":`...)
	dst = strconv.AppendInt(dst, start, 10)
	dst = append(dst, `,"window_end":`...)
	dst = strconv.AppendInt(dst, end, 10)
	return a.renderFields(state, dst)
}

// renderFields appends each field of state and the closing brace.
func (a *Aggregate) renderFields(state, dst []byte) []byte {
	for k := range a.specs {
		s := &a.specs[k]
		n := a.count(state, s)
		dst = append(dst, s.prefix...)
		switch s.kind {
		case aggCount:
			dst = appendUint64(dst, n)
		case aggSum:
			dst = appendInt192(dst, loadSum(state[s.off:]))
		case aggAvg:
			if n == 0 {
				dst = append(dst, "null"...)
			} else {
				dst = appendAvg(dst, loadSum(state[s.off:]), n)
			}
		case aggMin, aggMax:
			if n == 0 {
				dst = append(dst, "null"...)
			} else {
				dst = appendDecimal(dst, loadDec(state[s.off:]))
			}
		}
	}
	return append(dst, '}')
}

// ValidState reports whether b is a well-formed state for this aggregate: the right size and
// version, an empty state all zeros, min <= max bounds in range.
func (a *Aggregate) ValidState(b []byte) bool {
	if len(b) != a.stateSize || b[0] != stateVersion {
		return false
	}
	var total uint64
	for i := range max(len(a.inputs), 1) {
		n := binary.LittleEndian.Uint64(b[1+8*i:])
		if int64(n) < 0 && !a.retract {
			return false
		}
		total += n
	}
	if total == 0 {
		for _, c := range b[a.header:] {
			if c != 0 {
				return false
			}
		}
		return true
	}
	for k := range a.specs {
		s := &a.specs[k]
		if (s.kind == aggMin || s.kind == aggMax) && a.count(b, s) > 0 {
			if d := loadDec(b[s.off:]); d.hi == 1<<63 && d.lo == 0 { // -2^127 is never produced
				return false
			}
		}
	}
	return true
}

// b2u8 is 1 for true, 0 for false.
func b2u8(b bool) byte {
	if b {
		return 1
	}
	return 0
}
