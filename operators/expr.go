package operators

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/vm"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Stage is a stateless operator (filter, map). One per task; not safe for concurrent use.
type Stage interface {
	Name() string
	// Apply returns keep=false to drop the record; it may rewrite r.Value (map). A non-nil err
	// is an *Error: the record goes to the dead-letter topic.
	Apply(r *Record) (keep bool, err error)
}

// Expressions (expr-lang/expr) see the record's top-level JSON members as variables (strings,
// numbers, booleans, null, nested objects as map[string]any and arrays as []any), plus `key`
// (string, the group key) and `ts` (int64, event time in epoch ms), which shadow members of the
// same names. A missing member is nil. Members whose names are not identifiers are reachable as
// $env["a-b"]. The builtin now() is disabled: results must not depend on when a record is
// processed.
//
// Numbers are exact; nothing is binary floating point unless the expression asks for it:
//
//   - A JSON integer that fits int64 is an int; any other JSON number (123.45, 1e-3, an integer
//     beyond int64) is an exact decimal, read from its text. Number literals in the expression
//     are the same: 0.908 and 1e-3 are decimals (from their source text), 42 is an int; an
//     integer literal beyond int64 is a syntax error (write 9223372036854775808.0).
//   - + - * are exact. On two ints they give an int, or the exact decimal when the int64 would
//     overflow. / always gives a decimal: exact when the quotient terminates (1 / 8 = 0.125),
//     else rounded half to even to quoScale (18) fractional digits (2 / 3 =
//     0.666666666666666667). % takes integers (ints, or decimals that are whole numbers) and
//     truncates like Go's. x ** n with an integer n is exact (n < 0 divides as /); a non-integer
//     exponent is an error. Division or % by zero is an error.
//   - < <= > >= == != compare exactly across ints and decimals (0.1 + 0.2 == 0.3, 1 == 1.0);
//     == and `in` compare numbers inside arrays and objects the same way.
//   - float(x) gives a float64 (the nearest); arithmetic or comparison with a float64 operand
//     converts the other operand to float64 and follows Go's float rules. Only float64 results
//     can be NaN or infinite, which a map cannot write (an error).
//   - round(x) and round(x, n) round half away from zero (as SQL's ROUND) to n fractional
//     digits (n < 0: to tens, hundreds...); int(x) truncates toward zero (an error beyond int64);
//     ceil, floor and abs keep ints ints and decimals decimals; min, max, sum, mean (sum / count,
//     as /), median, sort and sortBy compare and add exactly; type(x) of a decimal is "decimal";
//     fromJSON decodes numbers as records do. Builtins that take ints (bitand, repeat, array
//     indexes) refuse decimals.
//   - A decimal is a coefficient of at most decMaxDigits (1000) significant digits times 10^e,
//     |e| <= decMaxExp (10000); a record's number or a result beyond that is an error ("number
//     out of range").
//   - A map writes a decimal as the shortest JSON number that is exactly it: 425593.22, -0.5,
//     1000, integers of any length as integers, and in exponent form only when the plain form
//     would take more than 20 zeros after the digits or 5 after the point (1e+21, 1.5e-7).
//     Floats are written as encoding/json writes them.
//
// sluice adds SQL's hour, date_format, regexp_extract, split_index and count_char (exprfunc.go:
// UTC times, nil in gives nil out, constant patterns compiled and checked with the expression).
//
// Static type errors are expr-lang's own (checked on the expression as written); at run time a
// wrong operand type is an *Error naming both types ("invalid operation: string * decimal").

// exprEnv decodes, per record, only the members an expression refers to.
type exprEnv struct {
	names []string // top-level member names referenced
	key   bool     // `key` referenced
	ts    bool     // `ts` referenced
	all   bool     // $env referenced: decode every member
	vars  map[string]any
	vm    vm.VM
	dec   jsonDecoder

	// The trees' side (exprfast.go): the members they read, the record of the last begin,
	// whether the trees may run on it and whether vars hold it, and how many programs have no
	// tree (any: the VM runs them all).
	slots   []fslot
	parents []pathParent // the top-level members the path slots read into
	// borrow, when set, gives the index another reader made of exactly that slice for the
	// same record (a join's select, for its where: PairSelect.pair), so pathOf need not scan it.
	borrow func(raw []byte, dst *[]member) bool
	rec    *Record
	fast   bool
	filled bool
	slow   int
}

// identVisitor collects identifiers (other than the names of called functions) and calls of
// unknown functions.
type identVisitor struct {
	idents  []*ast.IdentifierNode
	callees map[*ast.IdentifierNode]bool
	unknown string // first called identifier that is not a function: the env defines none
}

func (v *identVisitor) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.IdentifierNode:
		v.idents = append(v.idents, x)
	case *ast.CallNode:
		if id, ok := x.Callee.(*ast.IdentifierNode); ok {
			v.callees[id] = true
			_, num := numBuiltins[id.Value]
			_, fn := exprFuncs[id.Value]
			if !num && !fn && v.unknown == "" {
				v.unknown = id.Value
			}
		}
	}
}

func walkIdents(p *vm.Program) *identVisitor {
	v := &identVisitor{callees: map[*ast.IdentifierNode]bool{}}
	node := p.Node()
	ast.Walk(&node, v)
	return v
}

// compile compiles src twice: as written, for expr-lang's static type checks and messages,
// then rewritten by numPatcher for exact numbers (the program that runs).
func compile(name, src string, opts ...expr.Option) (*program, error) {
	base := []expr.Option{
		expr.Env(map[string]any{"key": "", "ts": int64(0)}),
		expr.AllowUndefinedVariables(),
		expr.DisableBuiltin("now"),
		numOptions(),
		funcOptions(),
	}
	written, err := expr.Compile(src, slices.Concat(base, opts, []expr.Option{expr.Optimize(false)})...)
	if err != nil {
		return nil, fmt.Errorf("operators: %s: expr: %w", name, err)
	}
	np := &numPatcher{src: []rune(src)}
	fp := &funcPatcher{src: np.src}
	p, err := expr.Compile(src, slices.Concat(base, opts, []expr.Option{expr.Patch(fp), expr.Patch(np)})...)
	if err == nil {
		err = cmp.Or(fp.err, np.err)
	}
	if err != nil {
		return nil, fmt.Errorf("operators: %s: expr: %w", name, err)
	}
	if v := walkIdents(p); v.unknown != "" {
		return nil, fmt.Errorf("operators: %s: expr: unknown function %s()", name, v.unknown)
	}
	c := conf.CreateNew()
	for _, o := range opts {
		o(c)
	}
	return &program{vm: p, tree: written.Node(), src: np.src, wantBool: c.Expect == reflect.Bool}, nil
}

// addProgram registers the variables program refers to and compiles its tree (a program
// belongs to one env).
func (e *exprEnv) addProgram(p *program) {
	if p.fast = e.compileFast(p.tree, p.src); p.fast == nil {
		e.slow++
	}
	eachVariable(p, func(n string) {
		switch n {
		case "key":
			e.key = true
		case "ts":
			e.ts = true
		case "$env":
			e.all = true
		default:
			if !slices.Contains(e.names, n) {
				e.names = append(e.names, n)
			}
		}
	})
	slices.Sort(e.names)
}

// eachVariable calls f with the name of each identifier p reads as a variable (not one it
// calls).
func eachVariable(p *program, f func(string)) {
	v := walkIdents(p.vm)
	for _, id := range v.idents {
		if !v.callees[id] {
			f(id.Value)
		}
	}
}

// fill loads r into the variables map (reused across records).
func (e *exprEnv) fill(r *Record) error {
	if e.vars == nil {
		e.vars = make(map[string]any, len(e.names)+2)
	}
	clear(e.vars)
	idx, err := r.index()
	if err != nil {
		return err
	}
	if e.all {
		for _, m := range idx {
			name := string(r.Value[m.ks:m.ke])
			if m.esc {
				name = string(appendUnescaped(nil, r.Value[m.ks:m.ke]))
			}
			if e.vars[name], _, err = e.dec.value(r.Value[m.vs:m.ve], 0); err != nil {
				return fmt.Errorf("expr: field %q: %w", name, err)
			}
		}
	} else {
		for _, n := range e.names {
			if raw, ok, _ := r.top(n); ok {
				if e.vars[n], _, err = e.dec.value(raw, 0); err != nil {
					return fmt.Errorf("expr: field %q: %w", n, err)
				}
			}
		}
	}
	if e.key {
		e.vars["key"] = string(r.Key)
	}
	if e.ts {
		e.vars["ts"] = r.Time
	}
	return nil
}

// jsonDecoder converts validated JSON to expression values: int for integers that fit int64,
// decimal for other numbers. Its buffer is reused; not safe for concurrent use.
type jsonDecoder struct {
	strBuf []byte
}

// value decodes the validated JSON value at b[i:] (no leading space) and returns the index
// after it. The only error is a number out of the decimal range.
func (d *jsonDecoder) value(b []byte, i int) (any, int, error) {
	switch c := b[i]; {
	case c == '"':
		end, esc, _ := scanString(b, i)
		body := b[i+1 : end-1]
		if esc {
			d.strBuf = appendUnescaped(d.strBuf[:0], body)
			body = d.strBuf
		}
		return string(body), end, nil
	case c == 't':
		return true, i + 4, nil
	case c == 'f':
		return false, i + 5, nil
	case c == 'n':
		return nil, i + 4, nil
	case c == '{':
		m := map[string]any{}
		i = skipSpace(b, i+1)
		for i < len(b) && b[i] == '"' {
			end, esc, _ := scanString(b, i)
			name := string(b[i+1 : end-1])
			if esc {
				name = string(appendUnescaped(nil, b[i+1:end-1]))
			}
			i = skipSpace(b, skipSpace(b, end)+1)
			v, next, err := d.value(b, i)
			if err != nil {
				return nil, 0, err
			}
			m[name] = v
			i = skipSpace(b, next)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
			}
		}
		return m, i + 1, nil
	case c == '[':
		a := []any{}
		i = skipSpace(b, i+1)
		for i < len(b) && b[i] != ']' {
			v, next, err := d.value(b, i)
			if err != nil {
				return nil, 0, err
			}
			a = append(a, v)
			i = skipSpace(b, next)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
			}
		}
		return a, i + 1, nil
	default:
		end, _ := scanNumber(b, i)
		num := b[i:end]
		if isInteger(num) {
			if v, ok := parseInt64(num); ok {
				return int(v), end, nil
			}
		}
		v, err := parseValidDec(num)
		if err != nil {
			if len(num) > 40 {
				num = append(num[:37:37], "..."...)
			}
			return nil, 0, fmt.Errorf("%s: %w", num, err)
		}
		return v, end, nil
	}
}

// isInteger reports whether the JSON number num is written as an integer (no '.', no
// exponent).
func isInteger(num []byte) bool {
	for _, c := range num {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// reason flattens an expr error (which may carry a multi-line source snippet) and names the
// referenced members the record lacks, the usual cause.
func (e *exprEnv) reason(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	var missing []string
	for _, n := range e.names {
		if _, ok := e.vars[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 && !e.all {
		msg += " (missing fields: " + strings.Join(missing, ", ") + ")"
	}
	return "expr: " + msg
}

// filter keeps records for which its expression is true.
type filter struct {
	name string
	prog *program
	env  exprEnv
}

// NewFilter compiles cfg.Expr, which must yield a bool. Compile errors name the operator:
// "operators: big: expr: ...". Numbers compare exactly (ints and decimals; see the comment on
// expressions above): amount > 100.5 holds for 100.50000000000000001. A constant expression
// that fails (1 / 0) is a compile error.
func NewFilter(name string, cfg configs.Filter) (Stage, error) {
	if strings.TrimSpace(cfg.Expr) == "" {
		return nil, fmt.Errorf("operators: %s: expr: empty expression", name)
	}
	p, err := compile(name, cfg.Expr, expr.AsBool())
	if err != nil {
		return nil, err
	}
	f := &filter{name: name, prog: p}
	f.env.addProgram(p)
	return f, nil
}

func (f *filter) Name() string { return f.name }

// ReadsTime reports whether s may read a record's event time (ts): a filter, map or select
// that names it (or $env); any other stage.
func ReadsTime(s Stage) bool {
	switch s := s.(type) {
	case *filter:
		return s.env.ts || s.env.all
	case *mapStage:
		return s.env.ts || s.env.all
	case *selectStage:
		return s.env.ts || s.env.all
	}
	return true
}

func (f *filter) Apply(r *Record) (bool, error) {
	if err := f.env.begin(r); err != nil {
		return false, &Error{Operator: f.name, Reason: err.Error()}
	}
	out, err := f.env.run(f.prog)
	if err != nil {
		return false, &Error{Operator: f.name, Reason: f.env.reason(err)}
	}
	keep, ok := out.(bool)
	if !ok {
		return false, &Error{Operator: f.name, Reason: fmt.Sprintf("expr: result is %T, want bool", out)}
	}
	return keep, nil
}

// mapStage sets top-level members to expression results.
type mapStage struct {
	name   string
	fields []string // sorted
	heads  [][]byte // per field: "name": as it writes it
	escs   []bool   // per field: its head's name has a backslash escape
	progs  []*program
	env    exprEnv
	vals   []fval   // per field: its value on the record being mapped
	last   []int    // per field: index of the member it replaces, or -1
	of     []int    // per input member: the field it names, or -1
	idx    []member // the index of the value it writes, made as it writes it (swapped with the record's)
}

// NewMap compiles cfg.Set (member name -> expression). Every expression sees the input record
// (assignments are simultaneous, not sequential). The output value is the input object with
// each set member replaced in place (earlier duplicates dropped) or appended, in name order;
// other members keep their order and raw text. Map changes neither Key nor Time.
//
// Results are exact (see the comment on expressions above): + - * exact, / exact when the
// quotient terminates and otherwise rounded half to even to quoScale (18) fractional digits,
// written as the shortest JSON number that is exactly the result (price * 0.908 for 468715 is
// 425593.22). Only float(x) brings float64 in; a NaN or infinite result is an *Error.
//
// With cfg.Select instead, the output value is a new object of exactly the select's columns, in
// order (see newSelect).
func NewMap(name string, cfg configs.Map) (Stage, error) {
	if len(cfg.Select) > 0 {
		if len(cfg.Set) > 0 {
			return nil, fmt.Errorf("operators: %s: map has both set and select", name)
		}
		return newSelect(name, cfg.Columns())
	}
	if len(cfg.Set) == 0 {
		return nil, fmt.Errorf("operators: %s: map sets no fields", name)
	}
	m := &mapStage{name: name}
	for f := range cfg.Set {
		if f == "" {
			return nil, fmt.Errorf("operators: %s: empty field name in set", name)
		}
		m.fields = append(m.fields, f)
	}
	slices.Sort(m.fields)
	for _, f := range m.fields {
		p, err := compile(name, cfg.Set[f], expr.AsAny())
		if err != nil {
			return nil, fmt.Errorf("%w (set %s)", err, f)
		}
		m.progs = append(m.progs, p)
		m.env.addProgram(p)
	}
	m.vals = make([]fval, len(m.fields))
	m.last = make([]int, len(m.fields))
	for _, f := range m.fields {
		head := append(jsonstr.AppendString(nil, f), ':')
		m.heads = append(m.heads, head)
		m.escs = append(m.escs, bytes.IndexByte(head, '\\') >= 0)
	}
	return m, nil
}

func (m *mapStage) Name() string { return m.name }

func (m *mapStage) Apply(r *Record) (bool, error) {
	if err := m.env.begin(r); err != nil {
		return false, &Error{Operator: m.name, Reason: err.Error()}
	}
	for k, p := range m.progs {
		if tv, ok := m.env.runTyped(p); ok {
			m.vals[k] = tv
			continue
		}
		v, err := m.env.run(p)
		if err != nil {
			return false, &Error{Operator: m.name, Reason: fmt.Sprintf("set %s: %s", m.fields[k], m.env.reason(err))}
		}
		m.vals[k] = fval{k: fAny, x: v}
	}
	idx, _ := r.index() // begin succeeded, so Value is indexed
	val := r.Value
	for k := range m.last {
		m.last[k] = -1
	}
	m.of = m.of[:0]
	for j := range idx {
		k := m.fieldOf(val[idx[j].ks:idx[j].ke], idx[j].esc)
		m.of = append(m.of, k)
		if k >= 0 {
			m.last[k] = j
		}
	}
	// The new value's index is made as it is written (each member's offsets), not by parsing
	// it again: its members are the input's, valid, and the values appendAnyJSON writes.
	var out []byte
	nidx := m.idx[:0]
	var err error
	if m.adds(idx, len(val)) {
		// Every member stays where it is: the loop below would copy the value byte for byte.
		out = append(r.scratchValue(), val[:len(val)-1]...)
		nidx = append(nidx, idx...)
		idx = nil
	} else {
		out = append(r.scratchValue(), '{')
	}
	for j, mem := range idx {
		k := m.of[j]
		if k >= 0 && m.last[k] != j {
			continue // an earlier duplicate of a member being set
		}
		if len(nidx) > 0 {
			out = append(out, ',')
		}
		nm := member{ks: int32(len(out) + 1), esc: mem.esc}
		out = append(out, val[mem.ks-1:mem.ke+1]...)
		nm.ke = int32(len(out) - 1)
		out = append(out, ':')
		nm.vs = int32(len(out))
		if k < 0 {
			out = append(out, val[mem.vs:mem.ve]...)
		} else if out, err = appendFval(out, m.vals[k]); err != nil {
			return false, &Error{Operator: m.name, Reason: fmt.Sprintf("set %s: %v", m.fields[k], err)}
		}
		nm.ve = int32(len(out))
		nidx = append(nidx, nm)
	}
	for k := range m.fields {
		if m.last[k] >= 0 {
			continue
		}
		if len(nidx) > 0 {
			out = append(out, ',')
		}
		nm := member{ks: int32(len(out) + 1), ke: int32(len(out) + len(m.heads[k]) - 2), esc: m.escs[k]}
		out = append(out, m.heads[k]...)
		nm.vs = int32(len(out))
		if out, err = appendFval(out, m.vals[k]); err != nil {
			return false, &Error{Operator: m.name, Reason: fmt.Sprintf("set %s: %v", m.fields[k], err)}
		}
		nm.ve = int32(len(out))
		nidx = append(nidx, nm)
	}
	out = append(out, '}')
	if len(out) > 1<<31-1 {
		return false, &Error{Operator: m.name, Reason: "re-encoded value: value too large"}
	}
	m.idx = r.setIndexedValue(out, nidx)
	return true, nil
}

// mapCopiesWhole lets a map that only adds members copy the value whole (a variable for the
// tests, which compare both ways).
var mapCopiesWhole = true

// adds reports whether the map only adds members to a value of n bytes indexed by idx: it has
// members, none of them is set, and they are written compactly (no space between the braces,
// names, colons, values and commas), as the loop of Apply writes them.
func (m *mapStage) adds(idx []member, n int) bool {
	if !mapCopiesWhole || len(idx) == 0 || idx[0].ks != 2 || idx[len(idx)-1].ve != int32(n-1) {
		return false
	}
	for k := range m.last {
		if m.last[k] >= 0 {
			return false
		}
	}
	for j := range idx {
		if idx[j].vs != idx[j].ke+2 || (j > 0 && idx[j].ks != idx[j-1].ve+2) {
			return false
		}
	}
	return true
}

// fieldOf returns the index of the field a member's raw name (escaped when esc) names, or -1.
func (m *mapStage) fieldOf(raw []byte, esc bool) int {
	for k, f := range m.fields {
		if esc {
			if nameEquals(raw, true, f) {
				return k
			}
		} else if len(raw) == len(f) && string(raw) == f {
			return k
		}
	}
	return -1
}

// selectStage writes a new object of its columns.
type selectStage struct {
	name string
	cols []selectCol
	env  exprEnv
	// The objects the member path columns read (auction of auction.id), each indexed once per
	// row rather than scanned once per column: a wide side of a join is read in one pass.
	parents []parentObject
	// row is the index of the last row appendRow wrote, made as it wrote it (offsets from its
	// opening brace).
	row []member
	// indexed, when set, is another env that may have indexed a parent object of this row
	// already (a join's where, evaluated on the pair just before its columns): its index is
	// taken rather than made again.
	indexed *exprEnv
	// primed: parents are looked up for the record of the next appendRow already (column).
	primed bool
	// given: the indexes of parent objects of the row, made before the row (those very slices
	// of the row's bytes: PairSelect.judge's), taken rather than made again; nil raw: none.
	given [2]givenIndex
}

// givenIndex is the index of an object made before it is read: raw is that very slice.
type givenIndex struct {
	raw     []byte
	members []member
}

// of returns a copy of the index of raw into *dst when g is raw's.
func (g *givenIndex) of(raw []byte, dst *[]member) bool {
	if g.raw == nil || !sameBytes(g.raw, raw) {
		return false
	}
	*dst = append((*dst)[:0], g.members...)
	return true
}

// parentObject is the first member of some member path columns, as the current row has it.
type parentObject struct {
	name    string
	raw     []byte   // its value, when it is an object
	members []member // raw's members, valid when indexed
	seen    bool     // looked up in this row
	indexed bool     // raw is an object and members index it
	// last is a copy of the object members last indexed, when it is at most maxLastParent
	// bytes (else empty): a row with the same object (the one side of a join that stays while
	// the other side's records pair with it) takes its index again rather than scan it.
	last []byte
}

// maxLastParent is the largest parent object a select keeps a copy of (parentObject.last).
const maxLastParent = 16 << 10

// selectCol is one output column: a member copied as written (field) or an expression's
// result (prog).
type selectCol struct {
	name  string
	head  []byte // "name": as the row writes it
	esc   bool   // head's name has a backslash escape
	field string
	path  path // a join's member path column (see NewPairSelect)
	// parent is the index in parents of path's first member.
	parent int
	prog   *program
}

// newSelect compiles a map's select. A column written as a bare name, or whose expression is
// only a member's name (price: price), copies that member's JSON text as it is (null when the
// record lacks it); `key` and `ts` as expressions are the group key and the event time, as a
// bare name they are members. Other columns are expression results written as a map's set
// writes them (nil as null). Select changes neither Key nor Time.
func newSelect(name string, cols []configs.Column) (Stage, error) {
	if len(cols) == 0 {
		return nil, fmt.Errorf("operators: %s: select has no columns", name)
	}
	s := &selectStage{name: name}
	seen := map[string]bool{}
	for _, c := range cols {
		if c.Name == "" || seen[c.Name] {
			return nil, fmt.Errorf("operators: %s: select: empty or duplicate column name %q", name, c.Name)
		}
		seen[c.Name] = true
		if c.Field {
			s.cols = append(s.cols, selectCol{name: c.Name, field: c.Expr})
			continue
		}
		p, err := compile(name, c.Expr, expr.AsAny())
		if err != nil {
			return nil, fmt.Errorf("%w (select %s)", err, c.Name)
		}
		if id, ok := p.vm.Node().(*ast.IdentifierNode); ok && id.Value != "key" && id.Value != "ts" && id.Value != "$env" {
			s.cols = append(s.cols, selectCol{name: c.Name, field: id.Value})
			continue
		}
		s.cols = append(s.cols, selectCol{name: c.Name, prog: p})
		s.env.addProgram(p)
	}
	for k := range s.cols {
		s.cols[k].head = append(jsonstr.AppendString(nil, s.cols[k].name), ':')
		s.cols[k].esc = bytes.IndexByte(s.cols[k].head, '\\') >= 0
	}
	return s, nil
}

func (s *selectStage) Name() string { return s.name }

func (s *selectStage) Apply(r *Record) (bool, error) {
	out, err := s.appendRow(append(r.scratchValue(), '{'), r, false)
	if err != nil {
		return false, err
	}
	s.row = r.setIndexedValue(out, s.row) // the row's index, made as it was written
	return true, nil
}

// appendRow appends the columns of r to dst (an object's opening brace) and closes the object.
// With nullOnError, a column whose expression fails is null (and err is nil); otherwise the
// first failure is an *Error.
func (s *selectStage) appendRow(dst []byte, r *Record, nullOnError bool) ([]byte, error) {
	out := dst
	base := len(dst) - 1 // the row's opening brace: its members' offsets count from it
	s.row = s.row[:0]
	primed := s.primed // column looked up r's parents
	s.primed = false
	filled := true
	if err := s.env.begin(r); err != nil {
		if !nullOnError {
			return out, &Error{Operator: s.name, Reason: err.Error()}
		}
		filled = false // the expressions' columns are null; the copied ones need a valid Value
		if _, err := r.index(); err != nil {
			return out, &Error{Operator: s.name, Reason: err.Error()}
		}
	}
	if !primed {
		for k := range s.parents {
			s.parents[k].seen = false
		}
	}
	defer s.forgetParents()
	for k, c := range s.cols {
		if k > 0 {
			s.row[len(s.row)-1].ve = int32(len(out) - base)
			out = append(out, ',')
		}
		s.row = append(s.row, member{ks: int32(len(out) + 1 - base), ke: int32(len(out) + len(c.head) - 2 - base),
			vs: int32(len(out) + len(c.head) - base), esc: c.esc})
		out = append(out, c.head...)
		if c.prog == nil {
			var raw []byte
			var ok bool
			if c.path.parts != nil {
				raw, ok = s.lookupPath(r, &s.cols[k])
			} else {
				raw, ok, _ = r.top(c.field) // fill indexed Value
			}
			if !ok {
				raw = nullJSON
			}
			out = append(out, raw...)
			continue
		}
		if !filled {
			out = append(out, nullJSON...)
			continue
		}
		tv, ok := s.env.runTyped(c.prog)
		if !ok {
			v, err := s.env.run(c.prog)
			if err != nil {
				if nullOnError {
					out = append(out, nullJSON...)
					continue
				}
				return out, &Error{Operator: s.name, Reason: fmt.Sprintf("select %s: %s", c.name, s.env.reason(err))}
			}
			tv = fval{k: fAny, x: v}
		}
		var err error
		mark := len(out)
		if out, err = appendFval(out, tv); err != nil {
			if nullOnError {
				out = append(out[:mark], nullJSON...)
				continue
			}
			return out, &Error{Operator: s.name, Reason: fmt.Sprintf("select %s: %v", c.name, err)}
		}
	}
	if len(s.row) > 0 {
		s.row[len(s.row)-1].ve = int32(len(out) - base)
	}
	return append(out, '}'), nil
}

// lookupPath returns the raw JSON of path column c's member (as Record.lookup finds it), from
// the index of its first member's object, made at the row's first column that reads it.
func (s *selectStage) lookupPath(r *Record, c *selectCol) ([]byte, bool) {
	o := &s.parents[c.parent]
	if !o.seen {
		o.seen, o.indexed, o.raw = true, false, nil
		raw, ok, _ := r.top(o.name)
		switch {
		case !ok || len(raw) == 0 || raw[0] != '{':
		case s.given[0].of(raw, &o.members) || s.given[1].of(raw, &o.members):
			o.raw, o.indexed = raw, true
			o.last = o.last[:0]
		case bytes.Equal(raw, o.last):
			o.raw, o.indexed = raw, true // members index it already
		case s.indexed != nil && s.indexed.parentIndex(raw, &o.members):
			o.raw, o.indexed = raw, true
			o.last = o.last[:0]
		default:
			var err error
			o.members, err = indexObject(raw, o.members)
			o.raw, o.indexed = raw, err == nil
			o.last = o.last[:0]
			if err == nil && len(raw) <= maxLastParent {
				o.last = append(o.last, raw...)
			}
		}
	}
	if !o.indexed {
		return nil, false
	}
	raw, ok := memberOf(o.raw, o.members, c.path.parts[1])
	for _, part := range c.path.parts[2:] {
		if !ok || len(raw) == 0 || raw[0] != '{' {
			return nil, false
		}
		raw, ok = findMember(raw, part)
	}
	return raw, ok
}

// column returns the raw JSON of member path column k of the row appendRow would write of r (as
// lookupPath finds it), before it is written: the parent objects it looks up stay for that row,
// or for the next column call, until forgetParents.
func (s *selectStage) column(r *Record, k int) ([]byte, bool) {
	if !s.primed {
		for i := range s.parents {
			s.parents[i].seen = false
		}
		s.primed = true
	}
	return s.lookupPath(r, &s.cols[k])
}

// parentIndexOf sets *dst to the index of the object raw when s indexed that very slice as a
// parent of the row it is looking up (column, before appendRow), and reports whether it did.
func (s *selectStage) parentIndexOf(raw []byte, dst *[]member) bool {
	if !s.primed {
		return false
	}
	for k := range s.parents {
		if o := &s.parents[k]; o.seen && o.indexed && sameBytes(o.raw, raw) {
			*dst = append((*dst)[:0], o.members...)
			return true
		}
	}
	return false
}

// forgetParents drops the row's parent objects, so they pin no record's memory.
func (s *selectStage) forgetParents() {
	for k := range s.parents {
		s.parents[k].raw = nil
	}
	s.primed = false
}

// PairSelect is a join's select and where (configs.Join.Select, Where): the columns it writes
// of each joined record instead of the record, and the condition a pair must meet. It is not
// safe for concurrent use (one per operator); the row Row returns is its own, valid until the
// next call.
type PairSelect struct {
	s      *selectStage // nil: the joined record itself
	where  *program     // nil: every pair
	wenv   exprEnv
	rec    Record
	out    []byte
	joined []byte // the joined record pair writes
	names  pairNames
	// given: the indexes of the sides of the pair being judged (judge, fails), which the where
	// borrows (borrowIndex) and the select takes (selectStage.given).
	given [2]givenIndex
	// The column a result filter ranks rows by (pair's beaten), looked up for fname: its index
	// in s.cols, -1 when it is none that copies a member of a side.
	fname string
	fcol  int
	exprs bool // a column is an expression's result: a row's size has no bound before it is written
	// The bound of a row's size beatenSized takes, for the sides named sizeL and sizeR: base
	// bytes, and per column that copies a member of the left (right) side, that side's length
	// (at least null's): nL, nR.
	sizeL, sizeR   string
	sizeBase       int
	sizeNL, sizeNR int
}

// NewPairSelect compiles the select of join name and its where; it returns nil when both are
// empty (the join writes every joined record). Columns are a map's select columns, except that
// a column that is only a member path (bids.auction, as a bare name is a member) copies that
// member's JSON text as written, null when the record lacks it or it is not in an object, and
// that ts is refused: a joined record has no event time of its own. where is a filter's
// expression on the joined record (ts refused too).
func NewPairSelect(name string, cols []configs.Column, where string) (*PairSelect, error) {
	if len(cols) == 0 && where == "" {
		return nil, nil
	}
	p := &PairSelect{}
	if where != "" {
		w, err := compile(name, where, expr.AsBool())
		if err != nil {
			return nil, fmt.Errorf("%w (where)", err)
		}
		p.where = w
		p.wenv.addProgram(w)
		p.wenv.borrow = p.borrowIndex
		if p.wenv.ts {
			return nil, fmt.Errorf("operators: %s: where: ts is not defined on a joined record (it has no event time of its own)", name)
		}
	}
	if len(cols) == 0 {
		return p, nil
	}
	st, err := newSelect(name, cols)
	if err != nil {
		return nil, err
	}
	s := st.(*selectStage)
	for k := range s.cols {
		c := &s.cols[k]
		if c.prog == nil {
			continue
		}
		if mp, ok := memberPath(c.prog.vm.Node()); ok {
			c.prog, c.path = nil, newPath(mp)
			c.parent = slices.IndexFunc(s.parents, func(o parentObject) bool { return o.name == c.path.parts[0] })
			if c.parent < 0 {
				c.parent = len(s.parents)
				s.parents = append(s.parents, parentObject{name: c.path.parts[0]})
			}
		}
	}
	s.env = exprEnv{}
	for _, c := range s.cols {
		if c.prog == nil {
			continue
		}
		s.env.addProgram(c.prog)
		if s.env.ts {
			return nil, fmt.Errorf("operators: %s: select %s: ts is not defined on a joined record (it has no event time of its own)", name, c.name)
		}
	}
	if p.where != nil {
		s.indexed = &p.wenv
	}
	p.s = s
	p.exprs = slices.ContainsFunc(s.cols, func(c selectCol) bool { return c.prog != nil })
	return p, nil
}

// memberPath returns "a.b.c" when n is only that member access (a.b.c or a["b"]["c"], of a
// member a other than key, ts and $env).
func memberPath(n ast.Node) (string, bool) {
	var parts []string
	for {
		switch x := n.(type) {
		case *ast.MemberNode:
			prop, ok := x.Property.(*ast.StringNode)
			if !ok || x.Optional || x.Method || prop.Value == "" || strings.Contains(prop.Value, ".") {
				return "", false
			}
			parts = append(parts, prop.Value)
			n = x.Node
			continue
		case *ast.IdentifierNode:
			if len(parts) == 0 || x.Value == "key" || x.Value == "ts" || x.Value == "$env" || strings.Contains(x.Value, ".") {
				return "", false
			}
			parts = append(parts, x.Value)
			slices.Reverse(parts)
			return strings.Join(parts, "."), true
		}
		return "", false
	}
}

// Row returns the columns of the joined record value under key (the record itself without
// columns). A column whose expression fails is null; err is only a value that is not a JSON
// object (a join's own bug). The where is not evaluated: a stream-table join has none.
func (p *PairSelect) Row(key, value []byte) ([]byte, error) {
	p.rec.Release() // value may be a reused buffer of the length last indexed
	p.rec.Key, p.rec.Value = key, value
	return p.row()
}

// row writes the columns of p.rec, which Row or pair set, and releases it.
func (p *PairSelect) row() ([]byte, error) {
	if p.s == nil {
		out := p.rec.Value // the joined record pair wrote
		p.rec.Release()
		return out, nil
	}
	out, err := p.s.appendRow(append(p.out[:0], '{'), &p.rec, true)
	p.out = out
	p.rec.Release()
	return out, err
}

// Reads returns the top-level members of the joined record's member side (the name of an
// input) that the columns and the where read, in their order: nil when they may read it whole
// (a column of the side itself, or an expression that names it other than through its
// members), empty when they read none of it.
func (p *PairSelect) Reads(side string) []string {
	out := []string{}
	if p.where != nil {
		var whole bool
		if out, whole = sideMembers(p.where.vm.Node(), side, out); whole {
			return nil
		}
	}
	s := p.s
	if s == nil {
		return nil // the joined record whole
	}
	if s.env.all || slices.Contains(s.env.names, side) {
		return nil
	}
	for _, c := range s.cols {
		switch {
		case c.prog != nil: // its names are the env's
		case c.path.parts == nil:
			if c.field == side {
				return nil
			}
		case c.path.parts[0] == side:
			if len(c.path.parts) < 2 {
				return nil
			}
			if !slices.Contains(out, c.path.parts[1]) {
				out = append(out, c.path.parts[1])
			}
		}
	}
	return out
}

// sideMembers appends to out the members of side that the expression n reads as side.m (or
// side.m.more, side["m"]), each once, and reports whether it may read side whole: it names side
// otherwise, or reads $env.
func sideMembers(n ast.Node, side string, out []string) ([]string, bool) {
	v := &pathVisitor{covered: map[*ast.IdentifierNode]bool{}}
	ast.Walk(&n, v)
	for _, mp := range v.paths {
		if parts := strings.Split(mp, "."); parts[0] == side && !slices.Contains(out, parts[1]) {
			out = append(out, parts[1])
		}
	}
	for _, id := range v.idents {
		if !v.covered[id] && (id.Value == side || id.Value == "$env") {
			return out, true
		}
	}
	return out, false
}

// pathVisitor collects an expression's member paths (memberPath) and its identifiers, and which
// of those are a path's root.
type pathVisitor struct {
	paths   []string
	idents  []*ast.IdentifierNode
	covered map[*ast.IdentifierNode]bool
}

func (v *pathVisitor) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.IdentifierNode:
		v.idents = append(v.idents, x)
	case *ast.MemberNode:
		mp, ok := memberPath(x)
		if !ok {
			return
		}
		v.paths = append(v.paths, mp)
		root := x.Node
		for {
			m, ok := root.(*ast.MemberNode)
			if !ok {
				break
			}
			root = m.Node
		}
		if id, ok := root.(*ast.IdentifierNode); ok {
			v.covered[id] = true
		}
	}
}

// IndexRow gives r the index of its Value when that is the row p returned last (the same
// bytes, not a copy), as p made it while writing the row, and reports whether it did: a reader
// of the row (a filter on it) need not scan it again.
func (p *PairSelect) IndexRow(r *Record) bool {
	if p.s == nil || len(r.Value) == 0 || len(r.Value) != len(p.out) || unsafe.SliceData(r.Value) != unsafe.SliceData(p.out) {
		return false
	}
	r.members = append(r.members[:0], p.s.row...)
	r.setIndexed(r.Value, nil)
	return true
}

// pair returns the columns of the pair {left: l, right: r} (a nil side is null) under key, as
// Row returns those of that joined record, whose index it makes as it writes it; ok false: the
// where does not hold for the pair (it is evaluated only when both sides are there: a left or
// outer join's unmatched record is not a pair). With f (nil: none), a row f drops is not
// written: row nil, ok true.
//
// With anyOK (the caller does not read ok), a pair f drops is dropped before the where is
// evaluated: whether the where holds for it changes nothing the caller sees, and most pairs a
// result filter sees it drops (Nexmark q9: the bids that do not beat their auction's best so
// far), so most pairs are spared the where; the where then takes the side's index the select
// made for f (exprEnv.borrow).
func (p *PairSelect) pair(f ResultFilter, key []byte, left string, l []byte, right string, r []byte, anyOK bool) (row []byte, ok bool, err error) {
	p.setPair(key, left, l, right, r)
	if anyOK && f != nil && p.where != nil && p.s != nil && !p.exprs && l != nil && r != nil {
		p.wenv.forgetParents() // the where's index is the last pair's: none for the select to take
		if p.beaten(f, left, l, right, r) {
			p.s.forgetParents()
			p.rec.Release()
			return nil, true, nil
		}
		if !p.holds() {
			p.s.forgetParents()
			p.rec.Release()
			return nil, false, nil
		}
		row, err = p.row()
		return row, true, err
	}
	if p.where != nil {
		if l != nil && r != nil && !p.holds() {
			p.rec.Release()
			return nil, false, nil
		}
		if l == nil || r == nil {
			p.wenv.forgetParents() // no index of the where's for the select to take
		}
	}
	if f != nil && p.beaten(f, left, l, right, r) {
		p.s.forgetParents()
		p.rec.Release()
		return nil, true, nil
	}
	row, err = p.row()
	return row, true, err
}

// setPair makes p.rec the joined record {left: l, right: r} under key, indexed as it is written.
func (p *PairSelect) setPair(key []byte, left string, l []byte, right string, r []byte) {
	p.rec.Release()
	p.joined, p.rec.members = appendPair(p.joined[:0], p.rec.members, &p.names, left, l, right, r)
	p.rec.Key, p.rec.Value = key, p.joined
	p.rec.setIndexed(p.joined, nil)
}

// judge reports whether the row of the pair {left: l, right: r} (both there) under key would
// not be written: f drops it (asked as pair asks it, before the where), or the where does not
// hold. A side may be given in part (the members the where and f's column read: judgeMembers),
// llen and rlen being the lengths of the whole records, which bound the row's size. judged
// false: the row cannot be judged before it is written (no select, a column that is an
// expression's, or f asks nothing).
//
// lidx and ridx, when not nil, are the indexes of l and r, which the select and the where take
// rather than scan those sides again.
func (p *PairSelect) judge(f ResultFilter, key []byte, left string, l []byte, llen int, lidx []member,
	right string, r []byte, rlen int, ridx []member) (drop, judged bool) {
	if p.s == nil || p.exprs || f == nil || f.FilterMember() == "" || l == nil || r == nil {
		return false, false
	}
	p.setPair(key, left, l, right, r)
	p.wenv.forgetParents() // the where's index is the last pair's: none for the select to take
	p.give(lidx, ridx)
	drop = p.beatenSized(f, left, llen, right, rlen) || p.where != nil && !p.holds()
	p.give(nil, nil)
	p.s.forgetParents()
	p.rec.Release()
	return drop, true
}

// give makes lidx and ridx (nil: none) the indexes of the sides of the pair in p.rec, which
// the select's columns and the where take rather than make: appendPair copied the sides as they
// are, so an index of a side (offsets from its first byte) indexes its copy too.
func (p *PairSelect) give(lidx, ridx []member) {
	for side, idx := range [2][]member{lidx, ridx} {
		g := &p.given[side]
		g.raw, g.members = nil, nil
		if idx != nil && len(p.rec.members) == 2 {
			m := p.rec.members[side]
			g.raw, g.members = p.joined[m.vs:m.ve], idx
		}
	}
	if p.s != nil {
		p.s.given = p.given
	}
}

// borrowIndex is the where's exprEnv.borrow: the index of a side given to judge or fails, or of
// a parent object the select looked up for the row being judged.
func (p *PairSelect) borrowIndex(raw []byte, dst *[]member) bool {
	return p.given[0].of(raw, dst) || p.given[1].of(raw, dst) || p.s != nil && p.s.parentIndexOf(raw, dst)
}

// fails reports whether the where does not hold for the pair {left: l, right: r} under key (both
// there): the pair gives no row (JoinJudge for the where alone). lidx and ridx are as judge's.
// No column is read, so neither index need be forgotten here: the where's begin forgets its
// own, and the select's is untouched.
func (p *PairSelect) fails(key []byte, left string, l []byte, lidx []member, right string, r []byte, ridx []member) bool {
	p.setPair(key, left, l, right, r)
	p.give(lidx, ridx)
	drop := !p.holds()
	p.give(nil, nil)
	p.rec.Release()
	return drop
}

// judgeMembers returns the top-level members of side that judge reads of it, for a filter
// that ranks rows by the column member, and that the columns also read (for a row of side's
// record alone: a re-key's): those the where reads, and those the columns copy of side's.
// false: judge or those columns may read side whole, or the columns are not there.
func (p *PairSelect) judgeMembers(side, member string, also []string) ([]string, bool) {
	if p.s == nil || p.exprs {
		return nil, false
	}
	out := []string{}
	if p.where != nil {
		var whole bool
		if out, whole = sideMembers(p.where.vm.Node(), side, out); whole {
			return nil, false
		}
	}
	for _, name := range append([]string{member}, also...) {
		i := slices.IndexFunc(p.s.cols, func(c selectCol) bool { return c.name == name })
		if i < 0 {
			return nil, false
		}
		switch c := p.s.cols[i]; {
		case c.path.parts == nil:
			if c.field == side {
				return nil, false
			}
		case c.path.parts[0] == side:
			if len(c.path.parts) < 2 {
				return nil, false
			}
			if !slices.Contains(out, c.path.parts[1]) {
				out = append(out, c.path.parts[1])
			}
		}
	}
	return out, true
}

// beaten reports whether the result filter f drops the row of the pair in p.rec, asked before it
// is written: f ranks rows by a column that copies a member of a side (the row has it as that
// member's JSON text, null when missing), and every column copies (so a bound of the row's size
// is known: no column is longer than its side, or than null).
func (p *PairSelect) beaten(f ResultFilter, left string, l []byte, right string, r []byte) bool {
	return p.beatenSized(f, left, len(l), right, len(r))
}

// beatenSized is beaten with the lengths of the sides (the records the row's columns copy).
func (p *PairSelect) beatenSized(f ResultFilter, left string, llen int, right string, rlen int) bool {
	name := f.FilterMember()
	if name == "" || p.s == nil || p.exprs {
		return false
	}
	if name != p.fname {
		p.fname = name
		p.fcol = slices.IndexFunc(p.s.cols, func(c selectCol) bool { return c.name == name })
		if p.fcol >= 0 && p.s.cols[p.fcol].path.parts == nil {
			p.fcol = -1
		}
	}
	if p.fcol < 0 {
		return false
	}
	if p.sizeBase == 0 || left != p.sizeL || right != p.sizeR {
		p.sizeSides(left, right)
	}
	size := p.sizeBase + p.sizeNL*max(len(nullJSON), llen) + p.sizeNR*max(len(nullJSON), rlen)
	raw, ok := p.s.column(&p.rec, p.fcol)
	return ok && f.DropsBeaten(raw, size)
}

// sizeSides computes the terms of beatenSized's bound of a row's size for sides left and right:
// each column writes its head, a colon and the member it copies, which is no longer than its
// side's record (or null, when that member is missing).
func (p *PairSelect) sizeSides(left, right string) {
	p.sizeL, p.sizeR = left, right
	p.sizeBase, p.sizeNL, p.sizeNR = 1, 0, 0 // the row's braces, less the comma its first column has not
	for _, c := range p.s.cols {
		side := c.field
		if c.path.parts != nil {
			side = c.path.parts[0]
		}
		p.sizeBase += len(c.head) + 1
		switch side {
		case left:
			p.sizeNL++
		case right:
			p.sizeNR++
		default:
			p.sizeBase += len(nullJSON)
		}
	}
}

// holds reports whether the where is true on p.rec: false, null or an error is not.
func (p *PairSelect) holds() bool {
	if p.wenv.begin(&p.rec) != nil {
		return false
	}
	v, err := p.wenv.run(p.where)
	b, _ := v.(bool)
	return err == nil && b
}

var nullJSON = []byte("null")

// appendAnyJSON appends an expression result as JSON: decimals as appendDec writes them, floats
// as encoding/json does (NaN and infinities are errors).
func appendAnyJSON(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case decimal:
		return appendDec(dst, x), nil
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case string:
		return jsonstr.AppendString(dst, x), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case float64:
		return appendFloat(dst, x, 64)
	case float32:
		return appendFloat(dst, float64(x), 32)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

func appendFloat(dst []byte, f float64, bitSize int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("result %v is not a JSON number", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) || bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bitSize)
	if format == 'e' {
		// "1e-07" -> "1e-7", as encoding/json does.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}
