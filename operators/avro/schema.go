package avro

import (
	"fmt"

	havro "github.com/hamba/avro/v2"

	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// kind is the shape of a compiled schema node.
type kind uint8

const (
	kNull kind = iota
	kBool
	kInt
	kLong
	kFloat
	kDouble
	kString
	kBytes
	kFixed
	kEnum
	kArray
	kMap
	kUnion
	kRecord
	kDecimalBytes // bytes with logical type decimal
	kDecimalFixed // fixed with logical type decimal
	kMicros       // long with logical type timestamp-micros or local-timestamp-micros: epoch ms with 3 fractional digits
)

// node is a writer schema compiled for decoding: a tree (a graph, for recursive records)
// walked once per record. Immutable after compile, so shared by any number of goroutines.
type node struct {
	kind    kind
	size    int      // fixed: its size
	scale   int      // decimal: its scale
	fields  []field  // record
	symbols [][]byte // enum: each symbol as a JSON string
	elem    *node    // array items, map values
	arms    []*node  // union branches
	name    string   // named types: the full name (error messages)
	minSize int      // the fewest bytes an encoded value takes (bounds block counts)
}

type field struct {
	key  []byte // `"name":` as JSON
	node *node
}

// compile turns a parsed schema into nodes. named memoizes named types, so that a recursive
// record compiles to a cycle instead of an endless tree.
func compile(s havro.Schema, named map[string]*node) (*node, error) {
	switch s := s.(type) {
	case *havro.RefSchema:
		return compile(s.Schema(), named)
	case *havro.NullSchema:
		return &node{kind: kNull}, nil
	case *havro.PrimitiveSchema:
		n := &node{}
		switch s.Type() {
		case havro.Boolean:
			n.kind, n.minSize = kBool, 1
		case havro.Int:
			n.kind, n.minSize = kInt, 1
		case havro.Long:
			n.kind, n.minSize = kLong, 1
			if l := s.Logical(); l != nil && (l.Type() == havro.TimestampMicros || l.Type() == havro.LocalTimestampMicros) {
				n.kind = kMicros
			}
		case havro.Float:
			n.kind, n.minSize = kFloat, 4
		case havro.Double:
			n.kind, n.minSize = kDouble, 8
		case havro.String:
			n.kind, n.minSize = kString, 1
		case havro.Bytes:
			n.kind, n.minSize = kBytes, 1
			if d, ok := s.Logical().(*havro.DecimalLogicalSchema); ok {
				n.kind, n.scale = kDecimalBytes, d.Scale()
			}
		case havro.Null:
			n.kind = kNull
		default:
			return nil, fmt.Errorf("unsupported type %q", s.Type())
		}
		return n, nil
	case *havro.FixedSchema:
		if n, ok := named[s.FullName()]; ok {
			return n, nil
		}
		n := &node{kind: kFixed, size: s.Size(), minSize: s.Size(), name: s.FullName()}
		if d, ok := s.Logical().(*havro.DecimalLogicalSchema); ok {
			n.kind, n.scale = kDecimalFixed, d.Scale()
		}
		named[s.FullName()] = n
		return n, nil
	case *havro.EnumSchema:
		if n, ok := named[s.FullName()]; ok {
			return n, nil
		}
		n := &node{kind: kEnum, minSize: 1, name: s.FullName()}
		for _, sym := range s.Symbols() {
			n.symbols = append(n.symbols, jsonstr.AppendString(nil, sym))
		}
		named[s.FullName()] = n
		return n, nil
	case *havro.ArraySchema:
		e, err := compile(s.Items(), named)
		if err != nil {
			return nil, err
		}
		return &node{kind: kArray, elem: e, minSize: 1}, nil
	case *havro.MapSchema:
		e, err := compile(s.Values(), named)
		if err != nil {
			return nil, err
		}
		return &node{kind: kMap, elem: e, minSize: 1}, nil
	case *havro.UnionSchema:
		n := &node{kind: kUnion, minSize: 1}
		for _, t := range s.Types() {
			a, err := compile(t, named)
			if err != nil {
				return nil, err
			}
			n.arms = append(n.arms, a)
		}
		return n, nil
	case *havro.RecordSchema:
		if n, ok := named[s.FullName()]; ok {
			return n, nil
		}
		n := &node{kind: kRecord, name: s.FullName()}
		named[s.FullName()] = n // before the fields: a field may refer back to this record
		for _, f := range s.Fields() {
			fn, err := compile(f.Type(), named)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.FullName(), f.Name(), err)
			}
			key := append(jsonstr.AppendString(nil, f.Name()), ':')
			n.fields = append(n.fields, field{key: key, node: fn})
		}
		for _, f := range n.fields {
			if f.node != n { // a direct self-reference cannot be encoded anyway
				n.minSize += f.node.minSize
			}
		}
		return n, nil
	default:
		return nil, fmt.Errorf("unsupported schema %T", s)
	}
}

// parse parses and compiles a writer schema. Each call has its own name cache: two schema
// ids may define one record name differently (an evolved schema).
func parse(schema string) (*node, error) {
	s, err := havro.ParseWithCache(schema, "", &havro.SchemaCache{})
	if err != nil {
		return nil, err
	}
	return compile(s, map[string]*node{})
}
