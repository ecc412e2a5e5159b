package operators

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"

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
//	[0]      format version (stateVersion; stateVersionFields when a field has a where or is
//	         a min or max over strings)
//	[1:9]    n, the number of records folded (uint64; count renders it)
//	then per spec, in Specs() order:
//	  with a where (except sum): 8 bytes first, the spec's own count of the records that
//	          passed it (uint64, signed with retractions); it stands in for n below
//	  sum, avg: 24 bytes, int192 sum of units (w0, w1, w2)
//	  min, max: 16 bytes, dec (lo, hi); meaningless while n == 0
//	  min, max of type string: 4 bytes, the length of its string (uint32; 0 while n == 0)
//	  count:    nothing (it is n)
//	then (version 2 only) the strings of the string min and max specs, in Specs() order: the
//	state is StateSize() bytes plus their lengths.
//
// Input layout: with retractions, a sign byte first (0: an addition, 1: a retraction, whose
// decs are negated); a cogroup's input index; when any spec has a where, a uint64 mask of the
// wheres the record passed (bit i: wheres[i]); one dec (lo, hi; 16 bytes) per distinct numeric
// field path, in first-use order; then per distinct string field path a uint32 length and the
// string's bytes (unescaped). A field that no spec folds for this record (its wheres failed)
// is projected as zero or "" without being read.
const (
	stateVersion       = 1
	stateVersionFields = 2
	headerSize         = 9
	sumSize            = 24
	decSize            = 16
	countSize          = 8
	lenSize            = 4
	maxWheres          = 64
)

type aggSpec struct {
	name   string
	kind   int
	src    int // the input it aggregates (cogroup); 0 otherwise
	field  string
	off    int    // offset in state
	in     int    // offset in input (a string: its index among its input's strings)
	prefix []byte // `,"name":`
	// where: the index of the spec's filter in Aggregate.wheres (-1: none); cnt: the offset of
	// its own count in state (0: it uses its input's count).
	where, cnt int
	// str: the index of a string min or max among Aggregate.strs (-1: not one).
	str int
}

// projection is what one input of the aggregate projects beyond its numeric fields (fields,
// or srcFields[i]): its string fields and, per field, which specs read it.
type projection struct {
	strs []path
	// decUse, strUse: per field, the mask of the wheres of the specs that read it; decAll,
	// strAll: some spec without a where reads it (a record always needs it).
	decUse, strUse []uint64
	decAll, strAll []bool
	wheres         uint64 // the wheres of this input's specs
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

	// version is the state format version (stateVersion, or stateVersionFields when a spec has a
	// where or is a string min or max). proj: per input, its strings and which fields each
	// record needs. wheres: the fields' filters (evaluated in env), whereText their source.
	// strs: the specs that are string min or max, in state order (their strings' order).
	version   byte
	proj      []projection
	wheres    []*program
	whereText []string
	env       exprEnv
	strs      []int
}

// NewAggregate compiles the aggregate's field specs. cfg must have been validated.
func NewAggregate(name string, cfg configs.Aggregate) (*Aggregate, error) {
	a, err := newAggregate(name, cfg, nil, nil)
	if err == nil && cfg.OutputChangelog() {
		if !a.ResultsRebuildState() {
			return nil, fmt.Errorf("operators: %s: changelog: output needs results that give the state back (no window, retractions, avg, where or string min or max)", name)
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
	a := &Aggregate{name: name, emit: cfg.Emit, stateSize: header, header: header, inputs: inputs, version: stateVersion}
	a.proj = make([]projection, max(len(inputs), 1))
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
	if parts := configs.GroupByNames(cfg.GroupBy); len(parts) > 1 {
		a.keyColumns = true
		reserved = append(reserved, parts...)
	}
	fieldIn := map[string]int{}
	for _, sp := range specs {
		if slices.Contains(reserved, sp.Name) {
			return nil, fmt.Errorf("operators: %s: field name %q is reserved (the output's key columns: %s)", name, sp.Name, strings.Join(reserved[1:], ", "))
		}
		s := aggSpec{name: sp.Name, field: sp.Field, where: -1, str: -1}
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
		case configs.CountDistinct:
			return nil, fmt.Errorf("operators: %s: field %s: count_distinct runs as internal operators that configs.Parse writes out; parse the config", name, sp.Name)
		default:
			return nil, fmt.Errorf("operators: %s: field %s: unknown function %q (allowed: sum, count, min, max, avg)", name, sp.Name, sp.Func)
		}
		if a.retract && (s.kind == aggMin || s.kind == aggMax) {
			return nil, fmt.Errorf("operators: %s: field %s: %s cannot take a retraction back (use sum, count or avg)", name, sp.Name, sp.Func)
		}
		if sp.Where != "" {
			if err := a.addWhere(&s, sp.Where); err != nil {
				return nil, err
			}
		}
		isStr := sp.Type == configs.AggTypeString
		if isStr && s.kind != aggMin && s.kind != aggMax {
			return nil, fmt.Errorf("operators: %s: field %s: type string applies to min and max, not %s", name, sp.Name, sp.Func)
		}
		if s.where >= 0 && s.kind != aggSum {
			s.cnt = a.stateSize
			a.stateSize += countSize
		}
		s.off = a.stateSize
		switch {
		case s.kind == aggCount:
			s.field = ""
		case s.kind == aggSum, s.kind == aggAvg:
			a.stateSize += sumSize
		case isStr:
			s.str = len(a.strs)
			a.strs = append(a.strs, len(a.specs))
			a.version = stateVersionFields
			a.stateSize += lenSize
		default:
			a.stateSize += decSize
		}
		pj := &a.proj[s.src]
		if s.where >= 0 {
			pj.wheres |= 1 << s.where
		}
		if s.kind != aggCount && isStr {
			p, err := checkedPath(sp.Field)
			if err != nil {
				return nil, fmt.Errorf("operators: %s: field %s: %w", name, sp.Name, err)
			}
			k := slices.IndexFunc(pj.strs, func(q path) bool { return q.text == sp.Field })
			if k < 0 {
				k = len(pj.strs)
				pj.strs = append(pj.strs, p)
				pj.strUse, pj.strAll = append(pj.strUse, 0), append(pj.strAll, false)
			}
			s.in = k
			use(&pj.strUse[k], &pj.strAll[k], s.where)
		} else if s.kind != aggCount {
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
			k := s.in / decSize
			for len(pj.decUse) <= k {
				pj.decUse, pj.decAll = append(pj.decUse, 0), append(pj.decAll, false)
			}
			use(&pj.decUse[k], &pj.decAll[k], s.where)
		}
		s.prefix = jsonstr.AppendString([]byte{','}, sp.Name)
		s.prefix = append(s.prefix, ':')
		a.specs = append(a.specs, s)
	}
	return a, nil
}

// use records that a spec with filter where (-1: none) reads a field.
func use(mask *uint64, all *bool, where int) {
	if where < 0 {
		*all = true
	} else {
		*mask |= 1 << where
	}
}

// FieldError is a part of an operator's config that does not compile (an aggregate field's
// where, a distinct's flag): the plan turns it into a config error naming its key. A plain value.
type FieldError struct {
	Operator, Field string
	Part            string // "where" (a field's), or "flags" (a distinct's flag Field)
	Err             error
}

func (e *FieldError) Error() string {
	if e.Part == "flags" {
		return fmt.Sprintf("%v (flag %s)", e.Err, e.Field)
	}
	return fmt.Sprintf("%v (field %s, %s)", e.Err, e.Field, e.Part)
}

func (e *FieldError) Unwrap() error { return e.Err }

// addWhere compiles spec s's filter, sharing one with an equal filter of the same input.
func (a *Aggregate) addWhere(s *aggSpec, text string) error {
	a.version = stateVersionFields
	for i, t := range a.whereText {
		if t == text && a.proj[s.src].wheres&(1<<i) != 0 {
			s.where = i
			return nil
		}
	}
	if len(a.wheres) == maxWheres {
		return &FieldError{Operator: a.name, Field: s.name, Part: "where", Err: fmt.Errorf("operators: %s: more than %d distinct where expressions", a.name, maxWheres)}
	}
	p, err := compile(a.name, text, expr.AsBool())
	if err != nil {
		return &FieldError{Operator: a.name, Field: s.name, Part: "where", Err: err}
	}
	a.env.addProgram(p)
	s.where = len(a.wheres)
	a.wheres, a.whereText = append(a.wheres, p), append(a.whereText, text)
	return nil
}

// Name returns the operator name.
func (a *Aggregate) Name() string { return a.name }

// Attributes: InternalSorter and OutputOnCheckpoint always; OutputOnlyAtEnd when emit=final.
func (a *Aggregate) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: a.emit != "final", OutputOnlyAtEnd: a.emit == "final"}
}

// Emit returns "updates" or "final".
func (a *Aggregate) Emit() string { return a.emit }

// StateSize is the size of a key's empty state in bytes: the size of every state unless a spec
// is a min or max over strings, whose strings follow (ValidSize).
func (a *Aggregate) StateSize() int { return a.stateSize }

// ValidSize reports whether a state may be n bytes long: StateSize(), or at least that with
// strings.
func (a *Aggregate) ValidSize(n int) bool {
	return n == a.stateSize || len(a.strs) > 0 && n > a.stateSize
}

// InputSize is the size of one projected input of an aggregate of one input in bytes (0 when
// only counting without retractions), without its strings (each adds 4 bytes and its own).
func (a *Aggregate) InputSize() int {
	n := len(a.fields)*decSize + len(a.proj[0].strs)*lenSize
	if len(a.wheres) > 0 {
		n += 8
	}
	if a.retract {
		n++
	}
	return n
}

// Retractions reports whether the aggregate reads a change stream (configs.Aggregate.Retractions).
func (a *Aggregate) Retractions() bool { return a.retract }

// Inputs returns a cogroup's inputs (nil for an aggregate of one input).
func (a *Aggregate) Inputs() []string { return a.inputs }

// InitState writes an empty state into dst[:StateSize()].
func (a *Aggregate) InitState(dst []byte) {
	clear(dst[:a.stateSize])
	dst[0] = a.version
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
	pj := &a.proj[i]
	var mask uint64
	if len(a.wheres) > 0 {
		var err error
		if mask, err = a.filter(pj.wheres, r); err != nil {
			return dst[:n0], err
		}
		dst = binary.LittleEndian.AppendUint64(dst, mask)
	}
	for k := range fields {
		p := &fields[k]
		if k < len(pj.decAll) && !pj.decAll[k] && pj.decUse[k]&mask == 0 {
			dst = append(dst, make([]byte, decSize)...) // no spec folds it: not read
			continue
		}
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
	for k := range pj.strs {
		p := &pj.strs[k]
		if !pj.strAll[k] && pj.strUse[k]&mask == 0 {
			dst = binary.LittleEndian.AppendUint32(dst, 0)
			continue
		}
		raw, ok, err := r.lookup(*p)
		if err != nil {
			return dst[:n0], &Error{Operator: a.name, Reason: err.Error()}
		}
		if !ok {
			return dst[:n0], &Error{Operator: a.name, Reason: fmt.Sprintf("field %q missing", p.text)}
		}
		if raw[0] != '"' {
			return dst[:n0], &Error{Operator: a.name, Reason: fmt.Sprintf("field %q is %s, want a string (its min or max has type: string)", p.text, kindOf(raw[0]))}
		}
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		if body, esc := stringBody(raw); esc {
			dst = appendUnescaped(dst, body)
		} else {
			dst = append(dst, body...)
		}
		if len(dst)-at-lenSize > maxString {
			return dst[:n0], &Error{Operator: a.name, Reason: fmt.Sprintf("field %q: a string of %d bytes; at most %d", p.text, len(dst)-at-lenSize, maxString)}
		}
		binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-lenSize))
	}
	return dst, nil
}

// maxString bounds a string a min or max keeps (a Kafka record is smaller anyway).
const maxString = 1 << 30

// filter returns the mask of the wheres among those of mask that r passes. A where that fails
// on r (a missing field compared) or yields no bool is an *Error.
func (a *Aggregate) filter(mask uint64, r *Record) (uint64, error) {
	if mask == 0 {
		return 0, nil
	}
	if err := a.env.begin(r); err != nil {
		return 0, &Error{Operator: a.name, Reason: err.Error()}
	}
	var pass uint64
	for i, p := range a.wheres {
		if mask&(1<<i) == 0 {
			continue
		}
		if v, ok := a.env.runTyped(p); ok && v.k == fBool { // the tree's answer, unboxed
			if v.b {
				pass |= 1 << i
			}
			continue
		}
		out, err := a.env.run(p)
		if err != nil {
			return 0, &Error{Operator: a.name, Reason: fmt.Sprintf("where %s: %s", a.whereText[i], a.env.reason(err))}
		}
		ok, isBool := out.(bool)
		if !isBool {
			return 0, &Error{Operator: a.name, Reason: fmt.Sprintf("where %s: result is %T, want bool", a.whereText[i], out)}
		}
		if ok {
			pass |= 1 << i
		}
	}
	return pass, nil
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

// Fold folds one projected input into state, in place, and returns the state: the same slice,
// unless a string min or max took a longer string than its slice's capacity holds (the state
// is then a new slice, as append's result). The resulting bytes depend only on the multiset of
// inputs folded since InitState, never on their order. It allocates only for such a string.
func (a *Aggregate) Fold(state, input []byte) []byte {
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
	var mask uint64
	if len(a.wheres) > 0 {
		mask, input = binary.LittleEndian.Uint64(input), input[8:]
	}
	strs := input[len(a.inputFields(i))*decSize:]
	n := binary.LittleEndian.Uint64(state[1+8*i:])
	for k := range a.specs {
		s := &a.specs[k]
		if s.src != i || s.where >= 0 && mask&(1<<s.where) == 0 {
			continue
		}
		c := n
		if s.cnt != 0 {
			c = binary.LittleEndian.Uint64(state[s.cnt:])
			binary.LittleEndian.PutUint64(state[s.cnt:], c+one)
		}
		switch {
		case s.kind == aggSum, s.kind == aggAvg:
			st := state[s.off : s.off+sumSize]
			storeSum(st, loadSum(st).add(loadDec(input[s.in:])))
		case s.str >= 0:
			state = a.keepString(state, s, stringAt(strs, s.in), c == 0)
		case s.kind == aggMin:
			keepIf(state[s.off:s.off+decSize], loadDec(input[s.in:]), c == 0, -1)
		case s.kind == aggMax:
			keepIf(state[s.off:s.off+decSize], loadDec(input[s.in:]), c == 0, 1)
		}
	}
	binary.LittleEndian.PutUint64(state[1+8*i:], n+one)
	return state
}

// inputFields returns input i's numeric fields.
func (a *Aggregate) inputFields(i int) []path {
	if len(a.inputs) > 1 {
		return a.srcFields[i]
	}
	return a.fields
}

// stringAt returns the k-th string of a projected input's strings.
func stringAt(strs []byte, k int) []byte {
	for ; k > 0; k-- {
		strs = strs[lenSize+int(binary.LittleEndian.Uint32(strs)):]
	}
	return strs[lenSize : lenSize+int(binary.LittleEndian.Uint32(strs))]
}

// stringOf returns where the string of spec s lies in state: state[start:end].
func (a *Aggregate) stringOf(state []byte, s *aggSpec) (start, end int) {
	start = a.stateSize
	for _, k := range a.strs[:s.str] {
		start += int(binary.LittleEndian.Uint32(state[a.specs[k].off:]))
	}
	return start, start + int(binary.LittleEndian.Uint32(state[s.off:]))
}

// keepString stores v as the string min or max of spec s in state when it holds none yet
// (empty) or v beats it (byte order), and returns the state (grown as append grows it).
func (a *Aggregate) keepString(state []byte, s *aggSpec, v []byte, empty bool) []byte {
	start, end := a.stringOf(state, s)
	want := -1
	if s.kind == aggMax {
		want = 1
	}
	if !empty && bytes.Compare(v, state[start:end]) != want {
		return state
	}
	state = slices.Replace(state, start, end, v...)
	binary.LittleEndian.PutUint32(state[s.off:], uint32(len(v)))
	return state
}

// count returns the records folded into state for spec s: its own count when it has a where,
// else its input's (one per input in a cogroup).
func (a *Aggregate) count(state []byte, s *aggSpec) uint64 {
	if s.cnt != 0 {
		return binary.LittleEndian.Uint64(state[s.cnt:])
	}
	return binary.LittleEndian.Uint64(state[1+8*s.src:])
}

// Merge folds the partial state src into dst, in place, and returns dst (a new slice when a
// string min or max outgrew its capacity, as Fold): the result is the state of folding dst's
// inputs and src's inputs, byte for byte whatever the split (sums add, counts add, min and max
// compare, an empty side changes nothing). It lets backlog mode pre-aggregate a key's records in
// memory and combine the partial with the stored state later. It allocates only for a string.
func (a *Aggregate) Merge(dst, src []byte) []byte {
	_, _ = dst[a.stateSize-1], src[a.stateSize-1]
	for k := range a.specs {
		s := &a.specs[k]
		nd, ns := a.count(dst, s), a.count(src, s)
		if ns == 0 && !a.retract {
			continue // (with retractions, a partial of no net record may still move a sum)
		}
		switch {
		case s.kind == aggSum, s.kind == aggAvg:
			d := dst[s.off : s.off+sumSize]
			storeSum(d, loadSum(d).plus(loadSum(src[s.off:])))
		case s.str >= 0:
			start, end := a.stringOf(src, s)
			dst = a.keepString(dst, s, src[start:end], nd == 0)
		case s.kind == aggMin:
			keepIf(dst[s.off:s.off+decSize], loadDec(src[s.off:]), nd == 0, -1)
		case s.kind == aggMax:
			keepIf(dst[s.off:s.off+decSize], loadDec(src[s.off:]), nd == 0, 1)
		}
		if s.cnt != 0 {
			binary.LittleEndian.PutUint64(dst[s.cnt:], nd+ns)
		}
	}
	for i := range max(len(a.inputs), 1) { // the counts: one, or a cogroup's per input
		o := 1 + 8*i
		binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(dst[o:])+binary.LittleEndian.Uint64(src[o:]))
	}
	return dst
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
			switch {
			case n == 0:
				dst = append(dst, "null"...)
			case s.str >= 0:
				start, end := a.stringOf(state, s)
				dst = jsonstr.AppendBytes(dst, state[start:end])
			default:
				dst = appendDecimal(dst, loadDec(state[s.off:]))
			}
		}
	}
	return append(dst, '}')
}

// ValidState reports whether b is a well-formed state for this aggregate: the right size and
// version, an empty state all zeros, min <= max bounds in range, strings that fill the rest.
func (a *Aggregate) ValidState(b []byte) bool {
	if !a.ValidSize(len(b)) || b[0] != a.version {
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
	tail := len(b) - a.stateSize
	for k := range a.specs {
		s := &a.specs[k]
		c := a.count(b, s)
		if s.cnt != 0 && int64(c) < 0 && !a.retract {
			return false
		}
		if s.str >= 0 {
			l := int(binary.LittleEndian.Uint32(b[s.off:]))
			if l > tail || c == 0 && l != 0 {
				return false
			}
			tail -= l
			continue
		}
		if (s.kind == aggMin || s.kind == aggMax) && c > 0 {
			if d := loadDec(b[s.off:]); d.hi == 1<<63 && d.lo == 0 { // -2^127 is never produced
				return false
			}
		}
	}
	return tail == 0
}

// b2u8 is 1 for true, 0 for false.
func b2u8(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// ReadsMembers returns the top-level members of its input records that the aggregate reads
// (its fields' and string fields' first parts, the retract field, the members its wheres name),
// each once, in no particular order; ok is false when it may read more (a where naming $env) or
// it has several inputs (a cogroup). Its results are made of these, the record's key and its
// event time only: a record with only these members folds to the same bytes.
func (a *Aggregate) ReadsMembers() (names []string, ok bool) {
	if len(a.inputs) > 1 {
		return nil, false
	}
	return a.ReadsInput(0)
}

// ReadsInput is ReadsMembers for the records of input i of a cogroup (0 for an aggregate):
// its fields, its strings, the retraction flag and the members its fields' wheres read.
func (a *Aggregate) ReadsInput(i int) (names []string, ok bool) {
	if i < 0 || i >= max(len(a.inputs), 1) {
		return nil, false
	}
	names = []string{}
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, p := range a.inputFields(i) {
		add(p.parts[0])
	}
	if i < len(a.proj) {
		for _, p := range a.proj[i].strs {
			add(p.parts[0])
		}
	}
	if a.retract {
		add(a.retractPath.parts[0])
	}
	all := false
	for k := range a.specs {
		if s := &a.specs[k]; s.where >= 0 && s.src == i {
			eachVariable(a.wheres[s.where], func(n string) {
				switch n {
				case "key", "ts":
				case "$env":
					all = true
				default:
					add(n)
				}
			})
		}
	}
	if all {
		return nil, false
	}
	return names, true
}

// ReadsMembers is its aggregate's (Aggregate.ReadsMembers; not ok for a session cogroup): a
// session's results are made of the records' members the aggregate reads, their keys and event
// times.
func (s *Sessions) ReadsMembers() ([]string, bool) { return s.agg.ReadsMembers() }
