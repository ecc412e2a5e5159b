package operators

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"

	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Rekey reads the new key of a record re-keyed by a keyed operator's group_by: one field path
// (e.g. customers.region), whose string value is the key as its text and a number as its JSON
// text; or several, separated by commas ("bidder, auction"), whose key is a JSON object of the
// fields by path, in the order given ({"bidder":7,"auction":1001}), as Flink's upsert-kafka
// writes a composite key in JSON. It is not safe for concurrent use (one per task).
type Rekey struct {
	name  string
	paths []path
	names [][]byte // with several paths: each path's member name in the key, a JSON string and its colon
	buf   []byte
	// By an expression (NewRekeyExpr) instead of paths: its program, evaluated on each record.
	prog *program
	env  exprEnv
}

// NewRekeyExpr returns the re-keying of the operator name by the expression src (rekey.expr):
// a record's key is the expression's value, a string as it is and a number as its text.
func NewRekeyExpr(name, src string) (*Rekey, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("operators: %s: expr: empty expression", name)
	}
	p, err := compile(name, src, expr.AsAny())
	if err != nil {
		return nil, err
	}
	k := &Rekey{name: name, prog: p}
	k.env.addProgram(p)
	return k, nil
}

// NewRekey returns the re-keying of the operator (or topic) name by group_by spec: one field
// path, or several separated by commas.
func NewRekey(name, spec string) (*Rekey, error) {
	k := &Rekey{name: name}
	for _, p := range SplitGroupBy(spec) {
		cp, err := checkedPath(p)
		if err != nil {
			return nil, fmt.Errorf("operators: %s: group_by: %w", name, err)
		}
		k.paths = append(k.paths, cp)
	}
	if len(k.paths) == 0 {
		return nil, fmt.Errorf("operators: %s: group_by: no field path", name)
	}
	if len(k.paths) > 1 {
		for _, p := range k.paths {
			k.names = append(k.names, append(jsonstr.AppendString(nil, p.text), ':'))
		}
	}
	return k, nil
}

// SplitGroupBy splits a group_by spec into its field paths (trimmed; empty parts kept, for the
// caller to refuse).
func SplitGroupBy(spec string) []string {
	parts := strings.Split(spec, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// Name returns the name given to NewRekey.
func (k *Rekey) Name() string { return k.name }

// Members returns the top-level member each of its field paths starts at, in their order; by
// an expression, the members it reads, or nil when it reads more than members (the event time,
// $env).
func (k *Rekey) Members() []string {
	if k.prog != nil {
		if k.env.ts || k.env.all {
			return nil
		}
		return slices.Clone(k.env.names)
	}
	out := make([]string, len(k.paths))
	for i, p := range k.paths {
		out[i] = p.parts[0]
	}
	return out
}

// Key returns r's new key. The result is valid until the next call or until r changes. A
// missing field, or one that is not a string or a number, is an *Error (a dead letter).
func (k *Rekey) Key(r *Record) ([]byte, error) {
	if k.prog != nil {
		return k.exprKey(r)
	}
	if len(k.paths) == 1 {
		raw, err := k.field(r, k.paths[0])
		if err != nil || raw[0] != '"' {
			return raw, err
		}
		body, esc := stringBody(raw)
		if esc {
			k.buf = appendUnescaped(k.buf[:0], body)
			return k.buf, nil
		}
		return body, nil
	}
	k.buf = append(k.buf[:0], '{')
	for i, p := range k.paths {
		raw, err := k.field(r, p)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			k.buf = append(k.buf, ',')
		}
		k.buf = append(append(k.buf, k.names[i]...), raw...)
	}
	return append(k.buf, '}'), nil
}

// field returns the raw JSON of r's field at p: a string (quoted, as written) or a number.
func (k *Rekey) field(r *Record, p path) ([]byte, error) {
	raw, ok, err := r.lookup(p)
	if err != nil {
		return nil, &Error{Operator: k.name, Reason: err.Error()}
	}
	if !ok {
		return nil, &Error{Operator: k.name, Reason: fmt.Sprintf("group_by field %q missing", p.text)}
	}
	if c := raw[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
		return nil, &Error{Operator: k.name, Reason: fmt.Sprintf("group_by field %q is %s, want a string or a number", p.text, kindOf(c))}
	}
	return raw, nil
}

// exprKey is Key by an expression: its value, a string as it is, an int's digits, an exact
// decimal's shortest form; anything else (null, a bool, a float, an object) is an *Error.
func (k *Rekey) exprKey(r *Record) ([]byte, error) {
	if err := k.env.begin(r); err != nil {
		return nil, &Error{Operator: k.name, Reason: err.Error()}
	}
	v, ok := k.env.runTyped(k.prog)
	if !ok {
		x, err := k.env.run(k.prog)
		if err != nil {
			return nil, &Error{Operator: k.name, Reason: "expr: " + k.env.reason(err)}
		}
		v = fvalOf(x)
	}
	switch v.k {
	case fInt:
		k.buf = strconv.AppendInt(k.buf[:0], v.i, 10)
	case fStr:
		k.buf = append(k.buf[:0], v.x.(string)...)
	case fDec:
		k.buf = appendDec(k.buf[:0], v.decimal())
	case fNil:
		return nil, &Error{Operator: k.name, Reason: "expr: the key is null (a member it reads is missing or null)"}
	default:
		return nil, &Error{Operator: k.name, Reason: fmt.Sprintf("expr: the key is %s, want a string or a number", typeName(v.box()))}
	}
	return k.buf, nil
}
