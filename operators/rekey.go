package operators

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Rekey reads the new key of a record re-keyed by a keyed operator's group_by: one field path
// (e.g. customers.region), whose string value is the key as its text and a number as its JSON
// text; or several, separated by commas ("bidder, auction"), whose key is a JSON object of the
// fields by path, in the order given ({"bidder":7,"auction":1001}), as Flink's upsert-kafka
// writes a composite key in JSON. A part may be a column an expression computes instead, named
// before a colon (day: date_format(dateTime, 'yyyy-MM-dd')): its value in place of a field's,
// under that name. It is not safe for concurrent use (one per task).
type Rekey struct {
	name  string
	paths []path     // each part's path (empty for an expression's)
	progs []*program // each part's expression (nil for a path's)
	whats []string   // each expression's label in a dead letter's reason: group_by <name>
	names [][]byte   // with several parts: each one's member name in the key, a JSON string and its colon
	buf   []byte
	// By an expression (NewRekeyExpr) instead of paths: its program, evaluated on each record.
	prog *program
	what string  // what prog is, for a dead letter's reason: expr, or the group_by column
	env  exprEnv // the expressions' (prog's, or progs')
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
	k := &Rekey{name: name, prog: p, what: "expr"}
	k.env.addProgram(p)
	return k, nil
}

// NewRekey returns the re-keying of the operator (or topic) name by group_by spec: one field
// path or name: expression part, or several separated by commas (configs.SplitGroupBy).
func NewRekey(name, spec string) (*Rekey, error) {
	k := &Rekey{name: name}
	parts := configs.SplitGroupBy(spec)
	for _, p := range parts {
		if p.Expr != "" {
			prog, err := compile(name, p.Expr, expr.AsAny())
			if err != nil {
				return nil, fmt.Errorf("%w (group_by %s)", err, p.Name)
			}
			k.env.addProgram(prog)
			k.paths, k.progs = append(k.paths, path{text: p.Name}), append(k.progs, prog)
			k.whats = append(k.whats, "group_by "+p.Name)
			continue
		}
		cp, err := checkedPath(p.Text)
		if err != nil {
			return nil, fmt.Errorf("operators: %s: group_by: %w", name, err)
		}
		k.paths, k.progs, k.whats = append(k.paths, cp), append(k.progs, nil), append(k.whats, "")
	}
	if len(parts) > 1 {
		for _, p := range parts {
			k.names = append(k.names, append(jsonstr.AppendString(nil, p.Name), ':'))
		}
	}
	switch {
	case !slices.ContainsFunc(k.progs, func(p *program) bool { return p != nil }):
		k.progs = nil
	case len(parts) == 1: // an expression alone: its value is the key, as rekey.expr's
		k.prog, k.progs, k.what = k.progs[0], nil, k.whats[0]
	}
	return k, nil
}

// Name returns the name given to NewRekey.
func (k *Rekey) Name() string { return k.name }

// Members returns the top-level member each of its field paths starts at, in their order; by
// an expression, the members it reads, or nil when it reads more than members (the event time,
// $env).
func (k *Rekey) Members() []string {
	if k.prog != nil || k.progs != nil {
		if k.env.ts || k.env.all {
			return nil
		}
	}
	if k.prog != nil {
		return slices.Clone(k.env.names)
	}
	var out []string
	for i, p := range k.paths {
		if k.progs == nil || k.progs[i] == nil {
			out = append(out, p.parts[0])
		}
	}
	for _, n := range k.env.names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Key returns r's new key. The result is valid until the next call or until r changes. A
// missing field, or one that is not a string or a number, is an *Error (a dead letter).
func (k *Rekey) Key(r *Record) ([]byte, error) {
	if k.prog != nil {
		return k.exprKey(r)
	}
	if k.progs != nil {
		return k.partsKey(r)
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
	v, err := k.value(k.prog, k.what)
	if err != nil {
		return nil, err
	}
	switch v.k {
	case fInt:
		k.buf = strconv.AppendInt(k.buf[:0], v.i, 10)
	case fStr:
		k.buf = append(k.buf[:0], v.x.(string)...)
	case fDec:
		k.buf = appendDec(k.buf[:0], v.decimal())
	}
	return k.buf, nil
}

// value evaluates p on the record of the env's last begin: a string or a number, else an
// *Error whose reason starts with what (the setting, or the group_by column, p is).
func (k *Rekey) value(p *program, what string) (fval, error) {
	v, ok := k.env.runTyped(p)
	if !ok {
		x, err := k.env.run(p)
		if err != nil {
			return v, &Error{Operator: k.name, Reason: what + ": " + k.env.reason(err)}
		}
		v = fvalOf(x)
	}
	switch v.k {
	case fInt, fStr, fDec:
		return v, nil
	case fNil:
		return v, &Error{Operator: k.name, Reason: what + ": the key is null (a member it reads is missing or null)"}
	}
	return v, &Error{Operator: k.name, Reason: fmt.Sprintf("%s: the key is %s, want a string or a number", what, typeName(v.box()))}
}

// partsKey is Key by a group_by of several parts, some of them expressions: the JSON object of
// each part's value (a string as a JSON string, a number as its text: the same text a field
// holding that value gives).
func (k *Rekey) partsKey(r *Record) ([]byte, error) {
	if err := k.env.begin(r); err != nil {
		return nil, &Error{Operator: k.name, Reason: err.Error()}
	}
	k.buf = append(k.buf[:0], '{')
	for i, p := range k.paths {
		if i > 0 {
			k.buf = append(k.buf, ',')
		}
		k.buf = append(k.buf, k.names[i]...)
		if k.progs[i] == nil {
			raw, err := k.field(r, p)
			if err != nil {
				return nil, err
			}
			k.buf = append(k.buf, raw...)
			continue
		}
		v, err := k.value(k.progs[i], k.whats[i])
		if err != nil {
			return nil, err
		}
		switch v.k {
		case fInt:
			k.buf = strconv.AppendInt(k.buf, v.i, 10)
		case fStr:
			k.buf = jsonstr.AppendString(k.buf, v.x.(string))
		case fDec:
			k.buf = appendDec(k.buf, v.decimal())
		}
	}
	return append(k.buf, '}'), nil
}
