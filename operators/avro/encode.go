package avro

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	havro "github.com/hamba/avro/v2"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Encoder writes JSON objects (sluice's output values) as Confluent-framed Avro with one
// schema, registered under one id. It is immutable and safe for concurrent use.
//
// The mapping is the decoder's, read backwards: a record from an object (a missing field is
// null if its type allows null, otherwise an error), int and long from integral numbers, float
// and double from numbers, string and enum from strings, bytes and fixed from base64 strings,
// decimal from a number rounded half-to-even to the schema's scale, timestamp-millis from epoch
// milliseconds, timestamp-micros from epoch milliseconds (fractions kept to the microsecond),
// array and map from arrays and objects, a union by the first branch the value fits (null:
// the null branch).
type Encoder struct {
	n        *node
	id       int
	fullName string
	parsers  *fastjson.ParserPool
}

// NewEncoder compiles schema (an Avro schema whose top level is a record) for values framed
// with schema id id.
func NewEncoder(schema string, id int) (*Encoder, error) {
	s, err := havro.ParseWithCache(schema, "", &havro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("avro: schema: %w", err)
	}
	rs, ok := s.(*havro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("avro: schema: the top level is %s, want a record", s.Type())
	}
	n, err := compile(s, map[string]*node{})
	if err != nil {
		return nil, fmt.Errorf("avro: schema: %w", err)
	}
	return &Encoder{n: n, id: id, fullName: rs.FullName(), parsers: &fastjson.ParserPool{}}, nil
}

// RecordName returns the full name of the schema's top-level record (for the record and
// topic-record subject name strategies).
func RecordName(schema string) (string, error) {
	s, err := havro.ParseWithCache(schema, "", &havro.SchemaCache{})
	if err != nil {
		return "", fmt.Errorf("avro: schema: %w", err)
	}
	rs, ok := s.(*havro.RecordSchema)
	if !ok {
		return "", fmt.Errorf("avro: schema: the top level is %s, want a record", s.Type())
	}
	return rs.FullName(), nil
}

// AppendValue appends the Confluent-framed Avro encoding of the JSON object value to dst.
func (e *Encoder) AppendValue(dst, value []byte) ([]byte, error) {
	p := e.parsers.Get()
	defer e.parsers.Put(p)
	v, err := p.ParseBytes(value)
	if err != nil {
		return dst, fmt.Errorf("avro: the value is not JSON: %w", err)
	}
	start := len(dst)
	dst = append(dst, 0, byte(e.id>>24), byte(e.id>>16), byte(e.id>>8), byte(e.id))
	dst, err = encodeValue(dst, e.n, v, "", 0)
	if err != nil {
		return dst[:start], fmt.Errorf("avro: %s: %w", e.fullName, err)
	}
	return dst, nil
}

func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func encodeValue(dst []byte, n *node, v *fastjson.Value, at string, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, fmt.Errorf("%s: nested more than %d deep", at, maxDepth)
	}
	want := func(what string) error {
		return fmt.Errorf("field %q: %s, want %s", at, kindName(v), what)
	}
	switch n.kind {
	case kNull:
		if v.Type() != fastjson.TypeNull {
			return dst, want("null")
		}
		return dst, nil
	case kBool:
		switch v.Type() {
		case fastjson.TypeTrue:
			return append(dst, 1), nil
		case fastjson.TypeFalse:
			return append(dst, 0), nil
		}
		return dst, want("a boolean")
	case kInt, kLong:
		if v.Type() != fastjson.TypeNumber {
			return dst, want("an integer")
		}
		i, err := v.Int64()
		if err != nil || (n.kind == kInt && (i < math.MinInt32 || i > math.MaxInt32)) {
			return dst, fmt.Errorf("field %q: %s is not an %s", at, v, map[kind]string{kInt: "int", kLong: "long"}[n.kind])
		}
		return appendLong(dst, i), nil
	case kMicros:
		r, err := ratOf(v, at)
		if err != nil {
			return dst, err
		}
		us := roundHalfEven(r.Mul(r, big.NewRat(1000, 1)))
		if !us.IsInt64() {
			return dst, fmt.Errorf("field %q: %s out of range", at, v)
		}
		return appendLong(dst, us.Int64()), nil
	case kFloat, kDouble:
		if v.Type() != fastjson.TypeNumber {
			return dst, want("a number")
		}
		f, err := v.Float64()
		if err != nil {
			return dst, fmt.Errorf("field %q: %w", at, err)
		}
		if n.kind == kFloat {
			return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), nil
	case kString:
		s, err := v.StringBytes()
		if err != nil {
			return dst, want("a string")
		}
		return append(appendLong(dst, int64(len(s))), s...), nil
	case kEnum:
		s, err := v.StringBytes()
		if err != nil {
			return dst, want("a symbol of " + n.name)
		}
		q := jsonstr.AppendBytes(nil, s)
		for i, sym := range n.symbols {
			if string(sym) == string(q) {
				return appendLong(dst, int64(i)), nil
			}
		}
		return dst, fmt.Errorf("field %q: %q is not a symbol of %s", at, s, n.name)
	case kBytes, kFixed:
		s, err := v.StringBytes()
		if err != nil {
			return dst, want("a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(string(s))
		if err != nil {
			return dst, fmt.Errorf("field %q: not base64: %w", at, err)
		}
		if n.kind == kFixed {
			if len(b) != n.size {
				return dst, fmt.Errorf("field %q: %d bytes, want %d (fixed %s)", at, len(b), n.size, n.name)
			}
			return append(dst, b...), nil
		}
		return append(appendLong(dst, int64(len(b))), b...), nil
	case kDecimalBytes, kDecimalFixed:
		r, err := ratOf(v, at)
		if err != nil {
			return dst, err
		}
		u := roundHalfEven(r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.scale)), nil))))
		b := twosComplementBytes(u)
		if n.kind == kDecimalBytes {
			return append(appendLong(dst, int64(len(b))), b...), nil
		}
		if len(b) > n.size {
			return dst, fmt.Errorf("field %q: %s does not fit %d bytes", at, v, n.size)
		}
		pad := byte(0)
		if u.Sign() < 0 {
			pad = 0xff
		}
		for range n.size - len(b) {
			dst = append(dst, pad)
		}
		return append(dst, b...), nil
	case kArray:
		a, err := v.Array()
		if err != nil {
			return dst, want("an array")
		}
		if len(a) > 0 {
			dst = appendLong(dst, int64(len(a)))
			for i, item := range a {
				if dst, err = encodeValue(dst, n.elem, item, fmt.Sprintf("%s[%d]", at, i), depth+1); err != nil {
					return dst, err
				}
			}
		}
		return append(dst, 0), nil
	case kMap:
		o, err := v.Object()
		if err != nil {
			return dst, want("an object")
		}
		if o.Len() > 0 {
			dst = appendLong(dst, int64(o.Len()))
			o.Visit(func(k []byte, item *fastjson.Value) {
				if err != nil {
					return
				}
				dst = append(appendLong(dst, int64(len(k))), k...)
				dst, err = encodeValue(dst, n.elem, item, at+"."+string(k), depth+1)
			})
			if err != nil {
				return dst, err
			}
		}
		return append(dst, 0), nil
	case kUnion:
		var firstErr error
		for i, arm := range n.arms {
			if (arm.kind == kNull) != (v.Type() == fastjson.TypeNull) {
				continue
			}
			out, err := encodeValue(appendLong(dst, int64(i)), arm, v, at, depth+1)
			if err == nil {
				return out, nil
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("field %q: %s fits no branch of the union", at, kindName(v))
		}
		return dst, firstErr
	case kRecord:
		o, err := v.Object()
		if err != nil {
			return dst, want("an object")
		}
		for _, f := range n.fields {
			name := string(f.key[1 : len(f.key)-2]) // `"name":` (field names need no escapes)
			path := name
			if at != "" {
				path = at + "." + name
			}
			fv := o.Get(name)
			if fv == nil {
				fv = fastjson.MustParse("null")
			}
			if dst, err = encodeValue(dst, f.node, fv, path, depth+1); err != nil {
				if o.Get(name) == nil {
					return dst, fmt.Errorf("field %q missing (and not nullable)", path)
				}
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("unsupported schema node %d", n.kind)
}

func kindName(v *fastjson.Value) string {
	switch v.Type() {
	case fastjson.TypeNull:
		return "null"
	case fastjson.TypeTrue, fastjson.TypeFalse:
		return "a boolean"
	case fastjson.TypeNumber:
		return "a number"
	case fastjson.TypeString:
		return "a string"
	case fastjson.TypeArray:
		return "an array"
	}
	return "an object"
}

// ratOf reads a JSON number (or a string holding one) exactly.
func ratOf(v *fastjson.Value, at string) (*big.Rat, error) {
	var text string
	switch v.Type() {
	case fastjson.TypeNumber:
		text = v.String()
	case fastjson.TypeString:
		text = string(v.GetStringBytes())
	default:
		return nil, fmt.Errorf("field %q: %s, want a number", at, kindName(v))
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, fmt.Errorf("field %q: %q is not a number", at, text)
	}
	return r, nil
}

// roundHalfEven rounds r to an integer, ties to even.
func roundHalfEven(r *big.Rat) *big.Int {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	// r = q + m/d with |m| < d and m of r's sign (truncation).
	twice := new(big.Int).Mul(new(big.Int).Abs(m), big.NewInt(2))
	switch c := twice.Cmp(r.Denom()); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		if r.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

// twosComplementBytes is the shortest big-endian two's complement encoding of v.
func twosComplementBytes(v *big.Int) []byte {
	if v.Sign() >= 0 {
		b := v.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -v - 1 in ones' complement.
	m := new(big.Int).Neg(v)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	for i := range b {
		b[i] = ^b[i]
	}
	if len(b) == 0 || b[0]&0x80 == 0 {
		b = append([]byte{0xff}, b...)
	}
	return b
}
