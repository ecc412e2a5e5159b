package operators

import (
	"fmt"
	"strings"

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

// Members returns the top-level member each of its field paths starts at, in their order.
func (k *Rekey) Members() []string {
	out := make([]string, len(k.paths))
	for i, p := range k.paths {
		out[i] = p.parts[0]
	}
	return out
}

// Key returns r's new key. The result is valid until the next call or until r changes. A
// missing field, or one that is not a string or a number, is an *Error (a dead letter).
func (k *Rekey) Key(r *Record) ([]byte, error) {
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
