package operators

import "fmt"

// Rekey reads the new key of a record re-keyed by an aggregate's group_by (a field path, e.g.
// customers.region): a string field as its text, a number as its JSON text. It is not safe for
// concurrent use (one per task).
type Rekey struct {
	name string
	p    path
	buf  []byte
}

// NewRekey returns the re-keying of the operator (or topic) name by field path p.
func NewRekey(name, p string) (*Rekey, error) {
	cp, err := checkedPath(p)
	if err != nil {
		return nil, fmt.Errorf("operators: %s: group_by: %w", name, err)
	}
	return &Rekey{name: name, p: cp}, nil
}

// Name returns the name given to NewRekey.
func (k *Rekey) Name() string { return k.name }

// Key returns r's new key. The result is valid until the next call or until r changes. A
// missing field, or one that is not a string or a number, is an *Error (a dead letter).
func (k *Rekey) Key(r *Record) ([]byte, error) {
	raw, ok, err := r.lookup(k.p)
	if err != nil {
		return nil, &Error{Operator: k.name, Reason: err.Error()}
	}
	if !ok {
		return nil, &Error{Operator: k.name, Reason: fmt.Sprintf("group_by field %q missing", k.p.text)}
	}
	switch c := raw[0]; {
	case c == '"':
		body, esc := stringBody(raw)
		if esc {
			k.buf = appendUnescaped(k.buf[:0], body)
			return k.buf, nil
		}
		return body, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return raw, nil
	default:
		return nil, &Error{Operator: k.name, Reason: fmt.Sprintf("group_by field %q is %s, want a string or a number", k.p.text, kindOf(c))}
	}
}
