package operators

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm/runtime"
)

// Numbers in expressions (the semantics are stated in expr.go, in the comment on expressions).
//
// expr-lang computes in int and float64. numPatcher rewrites a compiled expression's tree so
// that every arithmetic operator, comparison, `in` and unary minus calls one of the functions
// below, which compute exactly on ints and decimals and fall back to expr-lang's own runtime
// (vm/runtime) for everything that is not a number, with its messages. Float literals become
// decimal constants read from the source text. The numeric builtins are replaced by
// decimal-aware functions of the same names.

// number is an operand classified: an int, a decimal or a float64.
type number struct {
	kind numKind
	i    int64
	d    decimal
	f    float64
}

type numKind uint8

const (
	notNum numKind = iota
	intNum
	decNum
	floatNum
)

func numberOf(v any) number {
	switch x := v.(type) {
	case int:
		return number{kind: intNum, i: int64(x)}
	case decimal:
		return number{kind: decNum, d: x}
	case float64:
		return number{kind: floatNum, f: x}
	case int64:
		return number{kind: intNum, i: x}
	case int32:
		return number{kind: intNum, i: int64(x)}
	case int16:
		return number{kind: intNum, i: int64(x)}
	case int8:
		return number{kind: intNum, i: int64(x)}
	case uint:
		return numberOf(uint64(x))
	case uint64:
		if x > math.MaxInt64 {
			d, _ := newDecU(x, false, 0)
			return number{kind: decNum, d: d}
		}
		return number{kind: intNum, i: int64(x)}
	case uint32:
		return number{kind: intNum, i: int64(x)}
	case uint16:
		return number{kind: intNum, i: int64(x)}
	case uint8:
		return number{kind: intNum, i: int64(x)}
	case float32:
		return number{kind: floatNum, f: float64(x)}
	}
	return number{}
}

func (n number) dec() decimal {
	if n.kind == intNum {
		return decInt(n.i)
	}
	return n.d
}

func (n number) float() float64 {
	switch n.kind {
	case intNum:
		return float64(n.i)
	case decNum:
		return n.d.float()
	}
	return n.f
}

func (n number) value() any {
	switch n.kind {
	case intNum:
		return int(n.i)
	case decNum:
		return n.d
	}
	return n.f
}

// typeName names a value's type in messages as expr-lang does (%T), decimals as "decimal".
func typeName(v any) string {
	if _, ok := v.(decimal); ok {
		return "decimal"
	}
	return fmt.Sprintf("%T", v)
}

// numCmp compares two numbers; ok is false when a float NaN makes them unordered.
func numCmp(x, y number) (c int, ok bool) {
	switch {
	case x.kind == intNum && y.kind == intNum:
		return cmp.Compare(x.i, y.i), true
	case x.kind == floatNum || y.kind == floatNum:
		a, b := x.float(), y.float()
		if math.IsNaN(a) || math.IsNaN(b) {
			return 0, false
		}
		return cmp.Compare(a, b), true
	}
	return decCmp(x.cmpDec(), y.cmpDec()), true
}

// cmpDec is dec without normalizing an int: decCmp takes any representation.
func (n number) cmpDec() decimal {
	if n.kind == intNum {
		return decimal{c: n.i}
	}
	return n.d
}

type arithOp uint8

const (
	opAdd arithOp = iota
	opSub
	opMul
	opQuo
	opRem
	opPow
)

var arithSym = [...]string{"+", "-", "*", "/", "%", "**"}

// arith applies op to any two operands.
func arith(op arithOp, a, b any) (any, error) {
	if x, ok := a.(int); ok {
		if y, ok := b.(int); ok {
			return intArith(op, int64(x), int64(y))
		}
	}
	x, y := numberOf(a), numberOf(b)
	switch {
	case x.kind == notNum || y.kind == notNum:
		if x.kind == decNum || y.kind == decNum {
			return nil, fmt.Errorf("invalid operation: %s %s %s", typeName(a), arithSym[op], typeName(b))
		}
		return runtimeArith(op, a, b), nil // panics with expr-lang's message when invalid
	case x.kind == floatNum || y.kind == floatNum:
		f, g := x.float(), y.float()
		switch op {
		case opAdd:
			return f + g, nil
		case opSub:
			return f - g, nil
		case opMul:
			return f * g, nil
		case opQuo:
			return f / g, nil
		case opPow:
			return math.Pow(f, g), nil
		}
		return nil, fmt.Errorf("invalid operation: %s %% %s", typeName(a), typeName(b))
	case x.kind == intNum && y.kind == intNum:
		return intArith(op, x.i, y.i)
	}
	d, err := decArith(op, x.dec(), y.dec())
	if err != nil {
		if op == opRem && err != errDivByZero {
			return nil, fmt.Errorf("invalid operation: %s %% %s (%% takes integers, got %s and %s)", typeName(a), typeName(b), x.value(), y.value())
		}
		return nil, err
	}
	return d, nil
}

func runtimeArith(op arithOp, a, b any) any {
	switch op {
	case opAdd:
		return runtime.Add(a, b)
	case opSub:
		return runtime.Subtract(a, b)
	case opMul:
		return runtime.Multiply(a, b)
	case opQuo:
		return runtime.Divide(a, b)
	case opRem:
		return runtime.Modulo(a, b)
	}
	return runtime.Exponent(a, b)
}

// intArith: int results where they are integers and fit, else exact decimals.
func intArith(op arithOp, x, y int64) (any, error) {
	switch op {
	case opAdd:
		if s, ok := add64(x, y); ok {
			return int(s), nil
		}
	case opSub:
		if s := x - y; (x^y)&(x^s) >= 0 {
			return int(s), nil
		}
	case opMul:
		if p, ok := mul64(x, y); ok {
			return int(p), nil
		}
	case opRem:
		if y == 0 {
			return nil, errDivByZero
		}
		return int(x % y), nil
	case opPow:
		if y >= 0 {
			p, err := decPow(decInt(x), y)
			if err != nil {
				return nil, err
			}
			if i, ok := p.int64(); ok {
				return int(i), nil
			}
			return p, nil
		}
	}
	d, err := decArith(op, decInt(x), decInt(y))
	if err != nil {
		return nil, err
	}
	return d, nil
}

func decArith(op arithOp, x, y decimal) (decimal, error) {
	switch op {
	case opAdd:
		return decAdd(x, y)
	case opSub:
		return decSub(x, y)
	case opMul:
		return decMul(x, y)
	case opQuo:
		return decQuo(x, y)
	case opRem:
		return decRem(x, y)
	}
	n, ok := y.int64()
	if !ok {
		if y.isInt() {
			return decimal{}, errDecRange
		}
		return decimal{}, fmt.Errorf("invalid operation: %s ** %s: the exponent must be an integer (float(x) ** y is a float power)", x, y)
	}
	if n >= 0 {
		return decPow(x, n)
	}
	p, err := decPow(x, -(n + 1)) // x^-n = x^-(n+1) × x without overflowing -n
	if err == nil {
		p, err = decMul(p, x)
	}
	if err != nil {
		return decimal{}, err
	}
	return decQuo(decInt(1), p)
}

// orderFunc is a comparison operator: want says which results of the comparison make it true;
// other is expr-lang's runtime for operands that are not both numbers.
func orderFunc(sym string, want func(int) bool, other func(a, b any) bool) func(a, b any) (bool, error) {
	return func(a, b any) (bool, error) {
		// Fast paths: ints and decimals, without classifying.
		switch x := a.(type) {
		case int:
			switch y := b.(type) {
			case int:
				return want(cmp.Compare(x, y)), nil
			case decimal:
				return want(decCmp(decimal{c: int64(x)}, y)), nil
			}
		case decimal:
			switch y := b.(type) {
			case int:
				return want(decCmp(x, decimal{c: int64(y)})), nil
			case decimal:
				return want(decCmp(x, y)), nil
			}
		}
		x, y := numberOf(a), numberOf(b)
		if x.kind == notNum || y.kind == notNum {
			if x.kind == decNum || y.kind == decNum {
				return false, fmt.Errorf("invalid operation: %s %s %s", typeName(a), sym, typeName(b))
			}
			return other(a, b), nil
		}
		c, ok := numCmp(x, y)
		return ok && want(c), nil
	}
}

// numEqual is == : numbers compare by value (1 == 1.0, 0.1 + 0.2 == 0.3), arrays and objects
// element by element, anything else as expr-lang compares it.
func numEqual(a, b any) bool {
	x, y := numberOf(a), numberOf(b)
	if x.kind != notNum && y.kind != notNum {
		c, ok := numCmp(x, y)
		return ok && c == 0
	}
	switch a := a.(type) {
	case []any:
		if b, ok := b.([]any); ok {
			return slices.EqualFunc(a, b, numEqual)
		}
	case map[string]any:
		if b, ok := b.(map[string]any); ok {
			if len(a) != len(b) {
				return false
			}
			for k, v := range a {
				w, ok := b[k]
				if !ok || !numEqual(v, w) {
					return false
				}
			}
			return true
		}
	}
	if x.kind == decNum || y.kind == decNum {
		return false
	}
	return runtime.Equal(a, b)
}

// numIn is `in`: membership in an array compares as ==.
func numIn(needle, hay any) bool {
	switch h := hay.(type) {
	case []any:
		return slices.ContainsFunc(h, func(v any) bool { return numEqual(v, needle) })
	}
	if numberOf(needle).kind != notNum {
		if v := reflect.ValueOf(hay); v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
			for i := range v.Len() {
				if numEqual(v.Index(i).Interface(), needle) {
					return true
				}
			}
			return false
		}
	}
	return runtime.In(needle, hay)
}

func numNeg(v any) (any, error) {
	switch x := numberOf(v); x.kind {
	case intNum:
		if x.i == math.MinInt64 {
			return decInt(x.i).neg(), nil
		}
		return int(-x.i), nil
	case decNum:
		return x.d.neg(), nil
	case floatNum:
		return -x.f, nil
	}
	return runtime.Negate(v), nil // panics with expr-lang's message
}

// Builtins.

func numAbs(v any) (any, error) {
	switch x := numberOf(v); x.kind {
	case intNum:
		if x.i < 0 {
			return numNeg(v)
		}
		return int(x.i), nil
	case decNum:
		return x.d.abs(), nil
	case floatNum:
		return math.Abs(x.f), nil
	}
	return nil, fmt.Errorf("invalid argument for abs (type %s)", typeName(v))
}

// numRound rounds v to n fractional digits (n < 0: to tens, hundreds, ...). Ints stay ints
// when the result fits; floats stay floats, rounded as their shortest decimal representation.
func numRound(name string, v any, n int, mode roundMode) (any, error) {
	if n < -decMaxExp || n > decMaxExp {
		return nil, fmt.Errorf("%s: %d digits is out of range", name, n)
	}
	x := numberOf(v)
	switch x.kind {
	case intNum:
		if n >= 0 {
			return int(x.i), nil
		}
		d, err := decRound(decInt(x.i), n, mode)
		if err != nil {
			return nil, err
		}
		if i, ok := d.int64(); ok {
			return int(i), nil
		}
		return d, nil
	case decNum:
		return decRound(x.d, n, mode)
	case floatNum:
		if n == 0 {
			switch mode {
			case roundHalfAway:
				return math.Round(x.f), nil
			case roundFloor:
				return math.Floor(x.f), nil
			case roundCeil:
				return math.Ceil(x.f), nil
			}
		}
		d, ok := decFromFloat(x.f)
		if !ok {
			return x.f, nil // NaN, ±Inf
		}
		d, err := decRound(d, n, mode)
		if err != nil {
			return nil, err
		}
		return d.float(), nil
	}
	return nil, fmt.Errorf("invalid argument for %s (type %s)", name, typeName(v))
}

func numInt(v any) (any, error) {
	switch x := numberOf(v); x.kind {
	case intNum:
		return int(x.i), nil
	case decNum:
		d, _ := decRound(x.d, 0, roundDown)
		if i, ok := d.int64(); ok {
			return int(i), nil
		}
		return nil, fmt.Errorf("int(%s): out of the int range", x.d)
	case floatNum:
		if t := math.Trunc(x.f); t >= -(1<<63) && t < 1<<63 {
			return int(t), nil
		}
		return nil, fmt.Errorf("int(%v): out of the int range", x.f)
	}
	return builtin.Int(v), nil // strings; panics with expr-lang's message otherwise
}

func numFloat(v any) (any, error) {
	if x := numberOf(v); x.kind != notNum {
		return x.float(), nil
	}
	return builtin.Float(v), nil
}

// numbers flattens arguments (numbers and arrays of them, nested) for max, min, mean, median
// and sum.
func numbers(name string, dst []number, args []any, depth int) ([]number, error) {
	if depth > 100 {
		return nil, fmt.Errorf("%s: arrays nested too deep", name)
	}
	for _, a := range args {
		if x := numberOf(a); x.kind != notNum {
			dst = append(dst, x)
			continue
		}
		var err error
		switch arr := a.(type) {
		case []any:
			dst, err = numbers(name, dst, arr, depth+1)
		case []int:
			for _, v := range arr {
				dst = append(dst, number{kind: intNum, i: int64(v)})
			}
		case []float64:
			for _, v := range arr {
				dst = append(dst, number{kind: floatNum, f: v})
			}
		default:
			v := reflect.ValueOf(a)
			if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
				return nil, fmt.Errorf("invalid argument for %s (type %s)", name, typeName(a))
			}
			elems := make([]any, v.Len())
			for i := range elems {
				elems[i] = v.Index(i).Interface()
			}
			dst, err = numbers(name, dst, elems, depth+1)
		}
		if err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func numMinMax(name string, sign int) func(...any) (any, error) {
	return func(args ...any) (any, error) {
		xs, err := numbers(name, nil, args, 0)
		if err != nil || len(xs) == 0 {
			return nil, err
		}
		best := xs[0]
		for _, x := range xs[1:] {
			if c, ok := numCmp(x, best); ok && c == sign {
				best = x
			}
		}
		return best.value(), nil
	}
}

func numSum(args ...any) (any, error) {
	xs, err := numbers("sum", nil, args, 0)
	if err != nil {
		return nil, err
	}
	return numSumOf(xs)
}

func numSumOf(xs []number) (any, error) {
	var acc any = 0
	for _, x := range xs {
		var err error
		if acc, err = arith(opAdd, acc, x.value()); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

func numMean(args ...any) (any, error) {
	xs, err := numbers("mean", nil, args, 0)
	if err != nil || len(xs) == 0 {
		return 0, err
	}
	s, err := numSumOf(xs)
	if err != nil {
		return nil, err
	}
	return arith(opQuo, s, len(xs))
}

func numMedian(args ...any) (any, error) {
	xs, err := numbers("median", nil, args, 0)
	if err != nil || len(xs) == 0 {
		return 0, err
	}
	slices.SortStableFunc(xs, func(a, b number) int { c, _ := numCmp(a, b); return c })
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2].value(), nil
	}
	s, err := arith(opAdd, xs[n/2-1].value(), xs[n/2].value())
	if err != nil {
		return nil, err
	}
	return arith(opQuo, s, 2)
}

// anyCmp orders two values for sort and sortBy: numbers by value, strings as strings.
func anyCmp(a, b any) (int, error) {
	x, y := numberOf(a), numberOf(b)
	if x.kind != notNum && y.kind != notNum {
		c, _ := numCmp(x, y)
		return c, nil
	}
	if s, ok := a.(string); ok {
		if t, ok := b.(string); ok {
			return strings.Compare(s, t), nil
		}
	}
	return 0, fmt.Errorf("cannot sort %s and %s together", typeName(a), typeName(b))
}

// sortValues sorts vals (stable) by keys, a permutation applied to both.
func sortValues(vals, keys []any, order any) ([]any, error) {
	desc := false
	if order != nil {
		switch order {
		case "asc":
		case "desc":
			desc = true
		default:
			return nil, fmt.Errorf("invalid order %v, expected asc or desc", order)
		}
	}
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	var err error
	slices.SortStableFunc(idx, func(i, j int) int {
		c, e := anyCmp(keys[i], keys[j])
		if e != nil && err == nil {
			err = e
		}
		if desc {
			return -c
		}
		return c
	})
	if err != nil {
		return nil, err
	}
	out := make([]any, len(vals))
	for k, i := range idx {
		out[k] = vals[i]
	}
	return out, nil
}

// toArray copies an array value into []any.
func toArray(name string, v any) ([]any, error) {
	if a, ok := v.([]any); ok {
		return a, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, fmt.Errorf("invalid argument for %s (type %s)", name, typeName(v))
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, nil
}

func numSort(args ...any) (any, error) {
	a, err := toArray("sort", args[0])
	if err != nil {
		return nil, err
	}
	var order any
	if len(args) == 2 {
		order = args[1]
	}
	return sortValues(a, a, order)
}

// numSortBy(array, keys, order) is sortBy(array, predicate[, order]) with the keys computed
// by map(array, predicate); order is nil when not given.
func numSortBy(array, keys, order any) (any, error) {
	a, err := toArray("sortBy", array)
	if err != nil {
		return nil, err
	}
	k, err := toArray("sortBy", keys)
	if err != nil {
		return nil, err
	}
	return sortValues(a, k, order)
}

// numFromJSON is fromJSON with the record's number decoding: ints and exact decimals.
func numFromJSON(args ...any) (any, error) {
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("invalid argument for fromJSON (type %s)", typeName(args[0]))
	}
	b := []byte(s)
	if !json.Valid(b) {
		var v any
		return nil, json.Unmarshal(b, &v) // its error says where
	}
	var d jsonDecoder
	v, _, err := d.value(b, skipSpace(b, 0))
	return v, err
}

// numOp is what numPatcher puts in place of an operator: eval computes it (and folds literal
// operands at compile time); fn is the function the program calls, typed so that expr-lang
// calls it without building an argument slice (OpCallTyped). As expr-lang's own runtime does,
// fn panics with its error, which vm.Run returns as the expression's error.
type numOp struct {
	eval func(args ...any) (any, error)
	fn   any
}

func binaryOp(f func(a, b any) (any, error)) numOp {
	return numOp{
		eval: func(p ...any) (any, error) { return f(p[0], p[1]) },
		fn: func(a, b any) any {
			v, err := f(a, b)
			if err != nil {
				panic(err)
			}
			return v
		},
	}
}

func predicateOp(f func(a, b any) (bool, error)) numOp {
	return numOp{
		eval: func(p ...any) (any, error) { return f(p[0], p[1]) },
		fn: func(a, b any) bool {
			v, err := f(a, b)
			if err != nil {
				panic(err)
			}
			return v
		},
	}
}

func arithOpOf(op arithOp) numOp {
	return binaryOp(func(a, b any) (any, error) { return arith(op, a, b) })
}

// numOps maps expr-lang's operators (and "neg", unary minus) to their exact versions.
var numOps = map[string]numOp{
	"+": arithOpOf(opAdd), "-": arithOpOf(opSub), "*": arithOpOf(opMul), "/": arithOpOf(opQuo),
	"%": arithOpOf(opRem), "**": arithOpOf(opPow), "^": arithOpOf(opPow),
	"<":  predicateOp(orderFunc("<", func(c int) bool { return c < 0 }, runtime.Less)),
	"<=": predicateOp(orderFunc("<=", func(c int) bool { return c <= 0 }, runtime.LessOrEqual)),
	">":  predicateOp(orderFunc(">", func(c int) bool { return c > 0 }, runtime.More)),
	">=": predicateOp(orderFunc(">=", func(c int) bool { return c >= 0 }, runtime.MoreOrEqual)),
	"==": predicateOp(func(a, b any) (bool, error) { return numEqual(a, b), nil }),
	"!=": predicateOp(func(a, b any) (bool, error) { return !numEqual(a, b), nil }),
	"in": predicateOp(func(a, b any) (bool, error) { return numIn(a, b), nil }),
	"neg": {
		eval: func(p ...any) (any, error) { return numNeg(p[0]) },
		fn: func(a any) any {
			v, err := numNeg(a)
			if err != nil {
				panic(err)
			}
			return v
		},
	},
}

// numSumFn and numSortByFn are what numPatcher calls for the predicate builtins sum and sortBy
// (panicking with their errors, as numOp.fn).
var (
	numSumFn = func(a any) any {
		v, err := numSum(a)
		if err != nil {
			panic(err)
		}
		return v
	}
	numSortByFn = func(a, k, o any) any {
		v, err := numSortBy(a, k, o)
		if err != nil {
			panic(err)
		}
		return v
	}
)

// numBuiltins replace expr-lang's numeric builtins of the same names.
var numBuiltins = map[string]func(...any) (any, error){
	"abs":   func(p ...any) (any, error) { return numAbs(p[0]) },
	"ceil":  func(p ...any) (any, error) { return numRound("ceil", p[0], 0, roundCeil) },
	"floor": func(p ...any) (any, error) { return numRound("floor", p[0], 0, roundFloor) },
	"round": func(p ...any) (any, error) {
		n := 0
		if len(p) == 2 {
			x := numberOf(p[1])
			if x.kind != intNum {
				return nil, fmt.Errorf("round: the number of digits must be an int, got %s", typeName(p[1]))
			}
			n = int(max(min(x.i, math.MaxInt32), math.MinInt32))
		}
		return numRound("round", p[0], n, roundHalfAway)
	},
	"int":   func(p ...any) (any, error) { return numInt(p[0]) },
	"float": func(p ...any) (any, error) { return numFloat(p[0]) },
	"type": func(p ...any) (any, error) {
		if _, ok := p[0].(decimal); ok {
			return "decimal", nil
		}
		return builtin.Type(p[0]), nil
	},
	"max":      numMinMax("max", 1),
	"min":      numMinMax("min", -1),
	"mean":     numMean,
	"median":   numMedian,
	"sort":     numSort,
	"fromJSON": numFromJSON,
}

var (
	anyType    = reflect.TypeFor[any]()
	boolType   = reflect.TypeFor[bool]()
	intType    = reflect.TypeFor[int]()
	floatType  = reflect.TypeFor[float64]()
	stringType = reflect.TypeFor[string]()
)

// numBuiltinTypes gives each builtin's argument count (min, max; -1 unbounded) and result
// type for the type checker.
var numBuiltinTypes = map[string]struct {
	min, max int
	out      reflect.Type
}{
	"abs": {1, 1, anyType}, "ceil": {1, 1, anyType}, "floor": {1, 1, anyType},
	"round": {1, 2, anyType}, "int": {1, 1, intType}, "float": {1, 1, floatType},
	"type": {1, 1, stringType}, "max": {1, -1, anyType}, "min": {1, -1, anyType},
	"mean": {1, -1, anyType}, "median": {1, -1, anyType},
	"sort": {1, 2, reflect.TypeFor[[]any]()}, "fromJSON": {1, 1, anyType},
}

// numOptions registers numBuiltins with expr-lang.
func numOptions() expr.Option {
	return func(c *conf.Config) {
		for name, fn := range numBuiltins {
			t := numBuiltinTypes[name]
			c.Functions[name] = &builtin.Function{
				Name: name,
				Func: fn,
				Validate: func(args []reflect.Type) (reflect.Type, error) {
					if len(args) < t.min || t.max >= 0 && len(args) > t.max {
						return anyType, fmt.Errorf("invalid number of arguments for %s (expected %s, got %d)", name, arity(t.min, t.max), len(args))
					}
					return t.out, nil
				},
			}
		}
	}
}

func arity(lo, hi int) string {
	switch {
	case hi < 0:
		return "at least " + strconv.Itoa(lo)
	case lo == hi:
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d or %d", lo, hi)
}

// numPatcher is an expr-lang patcher (expr.Patch): it turns float literals into exact
// decimals read from the source text, operators into calls of numOps and the predicate
// builtins sum and sortBy into calls of numSum and numSortBy. Calls whose operands are all number literals are folded at compile
// time; err keeps the first failure (1 / 0).
type numPatcher struct {
	src []rune
	err error
}

func (p *numPatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.FloatNode:
		ast.Patch(node, &ast.ConstantNode{Value: p.literal(n)})
	case *ast.UnaryNode:
		if n.Operator == "-" {
			p.fold(node, numOps["neg"], n.Node)
		}
	case *ast.BinaryNode:
		op, ok := numOps[n.Operator]
		if !ok || isString(n.Left) && isString(n.Right) {
			return
		}
		p.fold(node, op, n.Left, n.Right)
	case *ast.BuiltinNode:
		switch n.Name {
		case "sum":
			arg := n.Arguments[0]
			if len(n.Arguments) == 2 {
				arg = &ast.BuiltinNode{Name: "map", Arguments: n.Arguments}
				arg.SetLocation(n.Location())
			}
			patchCall(node, numSumFn, arg)
		case "sortBy":
			keys := &ast.BuiltinNode{Name: "map", Arguments: n.Arguments[:2]}
			keys.SetLocation(n.Location())
			var order ast.Node = &ast.NilNode{}
			if len(n.Arguments) == 3 {
				order = n.Arguments[2]
			}
			patchCall(node, numSortByFn, n.Arguments[0], keys, order)
		}
	}
}

func isString(n ast.Node) bool {
	t := n.Type()
	return t != nil && t.Kind() == reflect.String
}

// fold replaces node by a call of op, or by its value when every argument is a number
// literal.
func (p *numPatcher) fold(node *ast.Node, op numOp, args ...ast.Node) {
	if vals, ok := literals(args); ok {
		v, err := op.eval(vals...)
		if err != nil {
			if p.err == nil {
				loc := (*node).Location()
				p.err = (&file.Error{Location: loc, Message: err.Error()}).Bind(file.NewSource(string(p.src)))
			}
		} else if lit := literalNode(v); lit != nil {
			ast.Patch(node, lit)
			return
		}
	}
	patchCall(node, op.fn, args...)
}

// patchCall replaces node by a call of the function fn (a constant, not a name: nothing a user
// can write or shadow).
func patchCall(node *ast.Node, fn any, args ...ast.Node) {
	callee := &ast.ConstantNode{Value: fn}
	callee.SetLocation((*node).Location())
	ast.Patch(node, &ast.CallNode{Callee: callee, Arguments: args})
}

// literals returns the values of number literals.
func literals(args []ast.Node) ([]any, bool) {
	vals := make([]any, len(args))
	for i, a := range args {
		switch n := a.(type) {
		case *ast.IntegerNode:
			vals[i] = n.Value
		case *ast.ConstantNode:
			if _, ok := n.Value.(decimal); !ok {
				return nil, false
			}
			vals[i] = n.Value
		default:
			return nil, false
		}
	}
	return vals, true
}

func literalNode(v any) ast.Node {
	switch x := v.(type) {
	case int:
		return &ast.IntegerNode{Value: x}
	case decimal:
		return &ast.ConstantNode{Value: x}
	case bool:
		return &ast.BoolNode{Value: x}
	}
	return nil
}

// literal returns a float literal's exact value: its source text when that is reachable and
// reads as the same float64, else the float64's shortest representation.
func (p *numPatcher) literal(n *ast.FloatNode) decimal {
	if loc := n.Location(); 0 <= loc.From && loc.From < loc.To && loc.To <= len(p.src) {
		text := strings.ReplaceAll(string(p.src[loc.From:loc.To]), "_", "")
		if f, err := strconv.ParseFloat(text, 64); err == nil && f == n.Value {
			if d, err := parseDec([]byte(jsonNumberText(text))); err == nil {
				return d
			}
		}
	}
	d, _ := decFromFloat(n.Value) // the parser accepts finite literals only
	return d
}

// jsonNumberText rewrites an expr-lang float literal ("1.", ".5", "007.5e3") in JSON's number
// grammar ("1", "0.5", "7.5e3"); other text comes back unchanged (and fails to parse).
func jsonNumberText(s string) string {
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i:]
	}
	ip, fp, _ := strings.Cut(mant, ".")
	ip = strings.TrimLeft(ip, "0")
	if ip == "" {
		ip = "0"
	}
	if fp != "" {
		ip += "." + fp
	}
	return ip + exp
}
