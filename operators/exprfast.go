package operators

import (
	"bytes"
	"cmp"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// Expressions of the usual shapes (members and member paths such as bid.price, literals,
// comparisons, && || !, ?:, + - * / % **, unary minus, and calls of sluice's functions and of
// the exact numeric builtins) also compile to a tree of Go functions on typed values: no
// variables map, no boxing of the numbers in between, no VM dispatch. For q17's map (a date and
// three conditional counts per bid) that is most of the stage's CPU. A member path reads into
// its top-level member's object through an index of it (pathParent), made once per record and
// taken again, with the values decoded from it, for a record whose member has the same bytes:
// a join's where on the side that stays while the other side's records pair with it (the
// VM decodes the whole object into a map, every time).
//
// The tree is an accelerator, not a second semantics: it computes a result only where it
// computes the VM's exact result (ints, decimals, strings and bools in the combinations listed
// below, through the same exact arithmetic and comparisons, and the same functions), and bails
// out everywhere else (a type it leaves to the VM, an overflow, any error), and then the VM
// evaluates the whole expression on the record, errors and messages included. A record whose
// members the tree cannot read as fill reads them (not an object, a number out of range) goes to
// the VM too, and so does every expression of an env that has one expression the tree cannot
// compile. TestFastAgreesWithVM checks the two on random expressions and records.

// program is a compiled expression: the VM's program and, when its shape allows, the tree.
type program struct {
	vm   *vm.Program
	tree ast.Node // the expression as written and type-checked, not patched
	src  []rune
	// wantBool: compiled with expr.AsBool, the VM refuses any other result
	wantBool bool
	fast     fnode // set by exprEnv.addProgram; nil: only the VM runs it
}

type fkind uint8

const (
	fNil  fkind = iota // nil: a JSON null, a missing member
	fInt               // i
	fDec               // d
	fStr               // s
	fBool              // b
	fAny               // x: anything else (an object or array member, a function's float64)
)

// fval is a typed expression value: ints, bools and decimals unboxed (a decimal's big
// coefficient, rare, as a pointer in x), the rest (a string, a function's result) in x as the VM
// has it. It is small (32 bytes): the tree passes it by value. Boxing a decimal allocated per
// result: 4% of q14's CPU, whose filter multiplies each bid's price twice.
type fval struct {
	k fkind
	b bool
	e int32 // fDec: the exponent
	i int64 // fInt: the int; fDec: the coefficient when it fits an int64
	x any   // fDec: the coefficient (*big.Int) when it does not, else nil
}

// decFval is d as a typed value: unboxed unless its coefficient is big (a pointer in x, which
// boxes without allocating).
func decFval(d decimal) fval {
	if d.big != nil {
		return fval{k: fDec, e: d.exp, x: d.big}
	}
	return fval{k: fDec, e: d.exp, i: d.c}
}

// decimal is the decimal of an fDec value.
func (v fval) decimal() decimal {
	if v.x != nil {
		return decimal{big: v.x.(*big.Int), exp: v.e}
	}
	return decimal{c: v.i, exp: v.e}
}

// box is v as the VM has it.
func (v fval) box() any {
	switch v.k {
	case fInt:
		return int(v.i)
	case fBool:
		return v.b
	case fDec:
		return v.decimal()
	}
	return v.x
}

// appendFval writes v as appendAnyJSON writes v.box(), without boxing an int, a bool or a nil.
func appendFval(dst []byte, v fval) ([]byte, error) {
	switch v.k {
	case fNil:
		return append(dst, nullJSON...), nil
	case fInt:
		return strconv.AppendInt(dst, v.i, 10), nil
	case fBool:
		return strconv.AppendBool(dst, v.b), nil
	case fDec:
		return appendDec(dst, v.decimal()), nil
	}
	return appendAnyJSON(dst, v.x)
}

func (v fval) num() bool { return v.k == fInt || v.k == fDec }

// dec is a number as arith's decimal case takes it (number.dec: an int as decInt makes it).
func (v fval) dec() decimal {
	if v.k == fInt {
		return decInt(v.i)
	}
	return v.decimal()
}

// cmpDec is a number as decCmp takes it (an int without normalizing, as numCmp does).
func (v fval) cmpDec() decimal {
	if v.k == fInt {
		return decimal{c: v.i}
	}
	return v.decimal()
}

// fvalOf types a value the VM's functions return (a string kept in the interface it came in,
// a decimal unboxed: decFval).
func fvalOf(v any) fval {
	switch x := v.(type) {
	case nil:
		return fval{}
	case int:
		return fval{k: fInt, i: int64(x)}
	case decimal:
		return decFval(x)
	case string:
		return fval{k: fStr, x: v}
	case bool:
		return fval{k: fBool, b: x}
	}
	return fval{k: fAny, x: v}
}

// fnode evaluates a node on the env's current record; ok false: the VM must evaluate the
// expression.
type fnode func(e *exprEnv) (v fval, ok bool)

// fslot is a member the trees read, decoded once per record: a top-level member, or a member
// path (bid.price: parts), whose text is its name.
type fslot struct {
	name   string
	parts  []string
	parent int    // a path's: its top-level member's index in exprEnv.parents
	gen    uint64 // a path's: its parent's gen when v was decoded (0: never)
	v      fval
}

// slot returns the index of member name's slot; name a.b.c is a member path.
func (e *exprEnv) slot(name string) int {
	for k := range e.slots {
		if e.slots[k].name == name {
			return k
		}
	}
	s := fslot{name: name}
	if strings.Contains(name, ".") {
		s.parts = strings.Split(name, ".")
		s.parent = slices.IndexFunc(e.parents, func(o pathParent) bool { return o.name == s.parts[0] })
		if s.parent < 0 {
			s.parent = len(e.parents)
			e.parents = append(e.parents, pathParent{parentObject: parentObject{name: s.parts[0]}})
		}
	}
	e.slots = append(e.slots, s)
	return len(e.slots) - 1
}

// begin makes r the record the env's programs run on: it decodes the members its trees read,
// or, when the VM must run (an expression without a tree, a record the trees cannot read),
// fills the VM's variables, whose error it returns.
func (e *exprEnv) begin(r *Record) error {
	e.rec, e.filled, e.fast = r, false, false
	if e.slow == 0 && e.decodeSlots(r) {
		e.fast = true
		return nil
	}
	if err := e.fill(r); err != nil {
		return err
	}
	e.filled = true
	return nil
}

// runTyped is run's tree alone: p's result on the record of the last begin as the tree
// computes it, unboxed; false when the VM must evaluate it (run).
func (e *exprEnv) runTyped(p *program) (fval, bool) {
	if !e.fast {
		return fval{}, false
	}
	if v, ok := p.fast(e); ok && (v.k == fBool || !p.wantBool) {
		return v, true
	}
	return fval{}, false
}

// run evaluates p on the record of the last begin (which succeeded).
func (e *exprEnv) run(p *program) (any, error) {
	if e.fast {
		if v, ok := p.fast(e); ok && (v.k == fBool || !p.wantBool) {
			return v.box(), nil
		}
	}
	if !e.filled {
		// decodeSlots read every member fill reads, as fill reads them: this succeeds.
		if err := e.fill(e.rec); err != nil {
			return nil, err
		}
		e.filled = true
	}
	return e.vm.Run(p.vm, e.vars)
}

// decodeSlots reads the slots' members of r as fill reads them (ints, exact decimals,
// unescaped strings); false when fill must (r is not an object, a number out of range).
func (e *exprEnv) decodeSlots(r *Record) bool {
	e.forgetParents()
	idx, err := r.index()
	if err != nil {
		return false
	}
	for k := range e.slots {
		s := &e.slots[k]
		var raw []byte
		var ok bool
		if s.parts == nil {
			raw, ok = memberOf(r.Value, idx, s.name)
		} else if raw, ok = e.pathOf(r, idx, s); !ok {
			return false
		} else if o := &e.parents[s.parent]; s.gen == o.gen {
			continue // the same object as when s was decoded: the same value
		} else {
			s.gen = o.gen
		}
		if raw == nil {
			s.v = fval{}
			continue
		}
		switch c := raw[0]; c {
		case '"':
			end, esc, _ := scanString(raw, 0)
			body := raw[1 : end-1]
			if esc {
				e.dec.strBuf = appendUnescaped(e.dec.strBuf[:0], body)
				body = e.dec.strBuf
			}
			s.v = fval{k: fStr, x: string(body)}
		case 't', 'f':
			s.v = fval{k: fBool, b: c == 't'}
		case 'n':
			s.v = fval{}
		case '{', '[':
			v, _, err := e.dec.value(raw, 0) // as fill decodes it, errors included
			if err != nil {
				s.gen = 0
				return false
			}
			s.v = fval{k: fAny, x: v}
		default:
			end, _ := scanNumber(raw, 0)
			num := raw[:end]
			if isInteger(num) {
				if i, ok := parseInt64(num); ok {
					s.v = fval{k: fInt, i: i}
					continue
				}
			}
			d, err := parseValidDec(num)
			if err != nil {
				s.gen = 0
				return false
			}
			s.v = decFval(d)
		}
	}
	return true
}

// pathParent is the top-level member a path slot reads into: its object's index, made once
// per record, and taken again for a record whose member has the same bytes as the last one
// indexed (the one side of a join that stays while the other side's records pair with it).
type pathParent struct {
	parentObject
	ok  bool   // the member is an object that decodes (decodable) and members index it
	gen uint64 // counts the objects indexed: a slot decoded at this gen may keep its value
}

// pathOf returns the raw JSON of path slot s of r (nil when its last member is missing), as the
// VM reads it: its top-level member an object that decodes whole (fill decodes it whole), each
// part but the last an object; false where the VM must run (a missing or non-object parent, a
// number out of range anywhere in the top-level member).
func (e *exprEnv) pathOf(r *Record, idx []member, s *fslot) ([]byte, bool) {
	o := &e.parents[s.parent]
	if !o.seen {
		o.seen, o.ok, o.raw = true, false, nil
		raw, found := memberOf(r.Value, idx, o.name)
		switch {
		case !found || raw[0] != '{':
		case o.indexed && bytes.Equal(raw, o.last):
			o.raw, o.ok = raw, true // members index it already
		default:
			var err error
			o.gen++
			if e.borrow == nil || !e.borrow(raw, &o.members) {
				o.members, err = indexObject(raw, o.members)
			}
			o.indexed = err == nil && membersDecodable(raw, o.members)
			o.last = o.last[:0]
			if o.indexed {
				o.raw, o.ok = raw, true
				if len(raw) <= maxLastParent {
					o.last = append(o.last, raw...)
				}
			}
		}
	}
	if !o.ok {
		return nil, false
	}
	raw, ok := memberOf(o.raw, o.members, s.parts[1])
	for _, part := range s.parts[2:] {
		if !ok || len(raw) == 0 || raw[0] != '{' {
			return nil, false // a member of a missing member or of a non-object: the VM fails
		}
		raw, ok = findMember(raw, part)
	}
	if !ok {
		return nil, true // a map's missing member is nil
	}
	return raw, true
}

// forgetParents marks the path parents as not looked up for the current record.
func (e *exprEnv) forgetParents() {
	for k := range e.parents {
		e.parents[k].seen = false
	}
}

// parentIndex sets *dst to the index of the object raw when e indexed that very slice for the
// record of its last begin (a path's parent), and reports whether it did.
func (e *exprEnv) parentIndex(raw []byte, dst *[]member) bool {
	for k := range e.parents {
		if o := &e.parents[k]; o.seen && o.ok && sameBytes(o.raw, raw) {
			*dst = append((*dst)[:0], o.members...)
			return true
		}
	}
	return false
}

// sameBytes reports whether a and b are the same slice of memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// membersDecodable reports whether jsonDecoder.value decodes the object o, whose members idx
// indexes, without an error: every number in it an int64 or in the decimal range.
func membersDecodable(o []byte, idx []member) bool {
	for _, m := range idx {
		v := o[m.vs:m.ve]
		switch c := v[0]; {
		case c == '{' || c == '[':
			if !decodable(v) {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if !numberDecodes(v) {
				return false
			}
		}
	}
	return true
}

// numberDecodes reports whether jsonDecoder.value decodes the JSON number num.
func numberDecodes(num []byte) bool {
	if len(num) <= 18 && isInteger(num) {
		return true // an int64
	}
	if isInteger(num) {
		if _, ok := parseInt64(num); ok {
			return true
		}
	}
	_, err := parseValidDec(num)
	return err == nil
}

// decodable reports whether jsonDecoder.value decodes the validated JSON value b without an
// error.
func decodable(b []byte) bool {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			end, _, err := scanString(b, i)
			if err != nil {
				return false
			}
			i = end - 1
		case c == '-' || c >= '0' && c <= '9':
			end, _ := scanNumber(b, i)
			if !numberDecodes(b[i:end]) {
				return false
			}
			i = end - 1
		}
	}
	return true
}

// compileFast compiles n to a tree, nil when some node is of a shape it leaves to the VM.
func (e *exprEnv) compileFast(n ast.Node, src []rune) fnode {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		switch n.Value {
		case "$env":
			return nil
		case "key":
			return func(e *exprEnv) (fval, bool) { return fval{k: fStr, x: string(e.rec.Key)}, true }
		case "ts":
			return func(e *exprEnv) (fval, bool) { return fval{k: fInt, i: e.rec.Time}, true }
		}
		k := e.slot(n.Value)
		return func(e *exprEnv) (fval, bool) { return e.slots[k].v, true }
	case *ast.MemberNode:
		p, ok := memberPath(n)
		if !ok {
			return nil
		}
		k := e.slot(p)
		return func(e *exprEnv) (fval, bool) { return e.slots[k].v, true }
	case *ast.IntegerNode:
		return constant(fval{k: fInt, i: int64(n.Value)})
	case *ast.FloatNode:
		return constant(decFval((&numPatcher{src: src}).literal(n)))
	case *ast.StringNode:
		return constant(fval{k: fStr, x: n.Value})
	case *ast.BoolNode:
		return constant(fval{k: fBool, b: n.Value})
	case *ast.NilNode:
		return constant(fval{})
	case *ast.UnaryNode:
		x := e.compileFast(n.Node, src)
		if x == nil {
			return nil
		}
		switch n.Operator {
		case "!", "not":
			return func(e *exprEnv) (fval, bool) {
				v, ok := x(e)
				return fval{k: fBool, b: !v.b}, ok && v.k == fBool
			}
		case "-":
			return func(e *exprEnv) (fval, bool) {
				v, ok := x(e)
				switch {
				case !ok:
				case v.k == fInt && v.i != math.MinInt64:
					return fval{k: fInt, i: -v.i}, true
				case v.k == fDec:
					return decFval(v.decimal().neg()), true
				}
				return fval{}, false
			}
		}
		return nil
	case *ast.BinaryNode:
		return e.compileBinary(n, src)
	case *ast.ConditionalNode:
		c, a, b := e.compileFast(n.Cond, src), e.compileFast(n.Exp1, src), e.compileFast(n.Exp2, src)
		if c == nil || a == nil || b == nil {
			return nil
		}
		return func(e *exprEnv) (fval, bool) {
			v, ok := c(e)
			if !ok || v.k != fBool {
				return fval{}, false
			}
			if v.b {
				return a(e)
			}
			return b(e)
		}
	case *ast.CallNode:
		if id, ok := n.Callee.(*ast.IdentifierNode); ok && len(n.Arguments) == 1 && caseFuncs[id.Value] != nil {
			return e.compileCase(id.Value, n.Arguments[0], src)
		}
		return e.compileCall(n, src)
	case *ast.BuiltinNode:
		if len(n.Arguments) == 1 && caseFuncs[n.Name] != nil {
			return e.compileCase(n.Name, n.Arguments[0], src)
		}
	}
	return nil
}

func constant(v fval) fnode {
	return func(*exprEnv) (fval, bool) { return v, true }
}

// compileBinary: `in` a literal array of strings or of ints; && || on bools; < <= > >= on numbers; == != on two numbers, two strings, two
// bools, or nil and a value of those; + - * / % ** on numbers (+ - * on ints inline, the rest by arith, as the VM).
func (e *exprEnv) compileBinary(n *ast.BinaryNode, src []rune) fnode {
	if n.Operator == "in" {
		if l := e.compileFast(n.Left, src); l != nil {
			return e.compileIn(l, n.Right)
		}
		return nil
	}
	l, r := e.compileFast(n.Left, src), e.compileFast(n.Right, src)
	if l == nil || r == nil {
		return nil
	}
	switch n.Operator {
	case "&&", "and", "||", "or":
		or := n.Operator == "||" || n.Operator == "or"
		return func(e *exprEnv) (fval, bool) {
			a, ok := l(e)
			if !ok || a.k != fBool {
				return fval{}, false
			}
			if a.b == or {
				return a, true
			}
			b, ok := r(e)
			return b, ok && b.k == fBool
		}
	case "<", "<=", ">", ">=":
		op := slices.Index([]string{"<", "<=", ">", ">="}, n.Operator)
		if c, ok := n.Right.(*ast.IntegerNode); ok { // price < 10000: no call for the literal
			y := int64(c.Value)
			return func(e *exprEnv) (fval, bool) {
				a, ok := l(e)
				switch {
				case !ok:
				case a.k == fInt:
					return fval{k: fBool, b: holds(op, cmp.Compare(a.i, y))}, true
				case a.k == fDec:
					return fval{k: fBool, b: holds(op, decCmp(a.decimal(), decimal{c: y}))}, true
				}
				return fval{}, false
			}
		}
		return func(e *exprEnv) (fval, bool) {
			a, b, ok := numbers2(e, l, r)
			if !ok {
				return fval{}, false
			}
			if a.k == fInt && b.k == fInt {
				return fval{k: fBool, b: holds(op, cmp.Compare(a.i, b.i))}, true
			}
			return fval{k: fBool, b: holds(op, decCmp(a.cmpDec(), b.cmpDec()))}, true
		}
	case "==", "!=":
		ne := n.Operator == "!="
		return func(e *exprEnv) (fval, bool) {
			a, ok := l(e)
			if !ok {
				return fval{}, false
			}
			b, ok := r(e)
			if !ok {
				return fval{}, false
			}
			var eq bool
			switch {
			case a.k == fInt && b.k == fInt:
				eq = a.i == b.i
			case a.num() && b.num():
				eq = decCmp(a.cmpDec(), b.cmpDec()) == 0
			case a.k == fStr && b.k == fStr:
				eq = a.x.(string) == b.x.(string)
			case a.k == fBool && b.k == fBool:
				eq = a.b == b.b
			case a.k == fNil || b.k == fNil: // x == nil, x != nil
				if a.k == fAny || b.k == fAny {
					return fval{}, false
				}
				eq = a.k == b.k
			default:
				return fval{}, false
			}
			return fval{k: fBool, b: eq != ne}, true
		}
	}
	op, ok := map[string]arithOp{"+": opAdd, "-": opSub, "*": opMul, "/": opQuo, "%": opRem, "**": opPow, "^": opPow}[n.Operator]
	if !ok {
		return nil
	}
	return func(e *exprEnv) (fval, bool) {
		a, b, ok := numbers2(e, l, r)
		if !ok {
			return fval{}, false
		}
		if a.k == fInt && b.k == fInt {
			switch op {
			case opAdd:
				if s, ok := add64(a.i, b.i); ok {
					return fval{k: fInt, i: s}, true
				}
			case opSub:
				if s := a.i - b.i; (a.i^b.i)&(a.i^s) >= 0 {
					return fval{k: fInt, i: s}, true
				}
			case opMul:
				if p, ok := mul64(a.i, b.i); ok {
					return fval{k: fInt, i: p}, true
				}
			case opRem:
				if b.i != 0 { // intArith's: Go's %, which is 0 for MinInt64 % -1
					return fval{k: fInt, i: a.i % b.i}, true
				}
			}
		}
		if a.k == fDec || b.k == fDec {
			// arith's decimal case, on the typed operands: neither is boxed to be classified
			// again (q14's filter, 0.908 * price, per bid).
			d, err := decArith(op, a.dec(), b.dec())
			if err != nil {
				return fval{}, false
			}
			return decFval(d), true
		}
		v, err := arith(op, a.box(), b.box())
		if err != nil {
			return fval{}, false
		}
		return fvalOf(v), true
	}
}

// caseFuncs are expr-lang's builtins lower and upper, which take a string.
var caseFuncs = map[string]func(string) string{"lower": strings.ToLower, "upper": strings.ToUpper}

func (e *exprEnv) compileCase(name string, arg ast.Node, src []rune) fnode {
	x, f := e.compileFast(arg, src), caseFuncs[name]
	if x == nil {
		return nil
	}
	return func(e *exprEnv) (fval, bool) {
		v, ok := x(e)
		if !ok || v.k != fStr {
			return fval{}, false
		}
		return fval{k: fStr, x: f(v.x.(string))}, true
	}
}

// compileIn: a string in an array literal of strings, an int in one of ints (numIn's ==).
func (e *exprEnv) compileIn(l fnode, hay ast.Node) fnode {
	arr, ok := hay.(*ast.ArrayNode)
	if !ok {
		return nil
	}
	strs, ints := map[string]bool{}, map[int64]bool{}
	for _, el := range arr.Nodes {
		switch el := el.(type) {
		case *ast.StringNode:
			strs[el.Value] = true
		case *ast.IntegerNode:
			ints[int64(el.Value)] = true
		default:
			return nil
		}
	}
	if len(strs) > 0 && len(ints) > 0 {
		return nil
	}
	return func(e *exprEnv) (fval, bool) {
		v, ok := l(e)
		switch {
		case !ok:
		case v.k == fStr && len(ints) == 0:
			return fval{k: fBool, b: strs[v.x.(string)]}, true
		case v.k == fInt && len(strs) == 0:
			return fval{k: fBool, b: ints[v.i]}, true
		}
		return fval{}, false
	}
}

// numbers2 evaluates l and then r, which must both be numbers (ints or decimals).
func numbers2(e *exprEnv, l, r fnode) (a, b fval, ok bool) {
	if a, ok = l(e); !ok || !a.num() {
		return a, b, false
	}
	b, ok = r(e)
	return a, b, ok && b.num()
}

// holds says whether the order operator op (0 to 3: < <= > >=) holds for a comparison's result
// c.
func holds(op, c int) bool {
	switch op {
	case 0:
		return c < 0
	case 1:
		return c <= 0
	case 2:
		return c > 0
	}
	return c >= 0
}

// compileCall: sluice's functions (with their specializations for literal arguments, as
// funcPatcher makes them) and the exact numeric builtins, called with the VM's argument values.
func (e *exprEnv) compileCall(n *ast.CallNode, src []rune) fnode {
	id, ok := n.Callee.(*ast.IdentifierNode)
	if !ok {
		return nil
	}
	var fn func(args ...any) (any, error)
	var onMs func(int64) any
	var consts []any // sluice's functions: the literal arguments (literalArgs)
	if f, ok := exprFuncs[id.Value]; ok {
		if len(n.Arguments) < f.min || len(n.Arguments) > f.max {
			return nil
		}
		fn = f.fn
		consts = literalArgs(n.Arguments)
		if f.onMs != nil {
			onMs = f.onMs(consts)
		}
		if f.constant != nil {
			sp, err := f.constant(consts)
			if err != nil {
				return nil
			}
			if sp != nil {
				fn = sp
			}
		}
	} else if fn = numBuiltins[id.Value]; fn == nil {
		return nil
	}
	args := make([]fnode, len(n.Arguments))
	for i, a := range n.Arguments {
		if args[i] = e.compileFast(a, src); args[i] == nil {
			return nil
		}
	}
	vals := make([]any, len(args)) // the stage runs on one goroutine
	call := func(e *exprEnv) (v fval, ok bool) {
		defer func() {
			clear(vals)
			if recover() != nil { // expr-lang's runtime panics with its errors, as in the VM
				v, ok = fval{}, false
			}
		}()
		for i, a := range args {
			x, ok := a(e)
			if !ok {
				return fval{}, false
			}
			vals[i] = x.box()
		}
		out, err := fn(vals...)
		if err != nil {
			return fval{}, false
		}
		return fvalOf(out), true
	}
	if id.Value == "int" && exprFuncs["int"].fn == nil && len(args) == 1 {
		return intCall(n.Arguments[0], args[0], call)
	}
	if id.Value == "split_index" && len(args) == 3 && consts != nil {
		return splitIndexCall(consts, args[0], call)
	}
	if onMs == nil {
		return call
	}
	first := args[0]
	return func(e *exprEnv) (fval, bool) {
		if v, ok := first(e); ok && v.k == fInt { // epoch ms, the other arguments literals
			return fvalOf(onMs(v.i)), true
		}
		return call(e)
	}
}

// splitIndexCall is the tree of split_index(s, sep, n) with sep and n literals (consts), call
// the general call: a string is split without boxing the arguments or deferring a recover (q22
// splits each bid's url three times). Anything else (a null, not a string, other arguments) is
// the general call's.
func splitIndexCall(consts []any, arg, call fnode) fnode {
	sep, ok := consts[1].(string)
	n, isInt := consts[2].(int)
	if !ok || !isInt || sep == "" {
		return call
	}
	return func(e *exprEnv) (fval, bool) {
		v, ok := arg(e)
		if !ok || v.k != fStr {
			return call(e)
		}
		if part, ok := splitIndex(v.x.(string), sep, int64(n)); ok {
			return fval{k: fStr, x: part}, true
		}
		return fval{}, true // null: too few parts, or an empty string
	}
}

// intCall is the tree of int(a), a's tree arg, call the general call: an int is itself, and a
// string is read as strconv.Atoi reads it (the VM's builtin.Int) where atoi can, without
// boxing the argument or the result; the key read so needs no string of it. Anything else
// (a decimal, a string atoi leaves) is the general call's.
func intCall(a ast.Node, arg, call fnode) fnode {
	if id, ok := a.(*ast.IdentifierNode); ok && id.Value == "key" {
		return func(e *exprEnv) (fval, bool) {
			if i, ok := atoi(e.rec.Key); ok {
				return fval{k: fInt, i: i}, true
			}
			return call(e)
		}
	}
	return func(e *exprEnv) (fval, bool) {
		v, ok := arg(e)
		if !ok {
			return fval{}, false
		}
		switch v.k {
		case fInt:
			return v, true
		case fStr:
			if s, _ := v.x.(string); s != "" {
				if i, ok := atoi(unsafe.Slice(unsafe.StringData(s), len(s))); ok {
					return fval{k: fInt, i: i}, true
				}
			}
		}
		return call(e)
	}
}

// atoi is strconv.Atoi on bytes where it reads what parseInt64 reads (Atoi also takes a '+'
// sign); false for the rest, which Atoi may still take (more than 19 digits) or refuse.
func atoi(b []byte) (int64, bool) {
	if len(b) > 1 && b[0] == '+' && b[1] != '-' {
		b = b[1:]
	}
	return parseInt64(b)
}
