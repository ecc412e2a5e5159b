package avro

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	havro "github.com/hamba/avro/v2"
)

// fuzzSchemas are the writer schemas FuzzAppendJSON decodes with: every type of the mapping,
// a recursive record, and nested arrays and maps of zero-size items.
var fuzzSchemas = []string{
	allTypes,
	`{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"]}]}`,
	`{"type":"record","name":"N","fields":[{"name":"a","type":{"type":"array","items":{"type":"map","values":["null",{"type":"array","items":"null"}]}}}]}`,
}

// FuzzAppendJSON decodes any bytes with each schema: no panic, and a value that decodes is
// valid JSON (an object, all valid UTF-8) that hamba/avro also accepts, so sluice accepts
// nothing the reference decoder refuses.
func FuzzAppendJSON(f *testing.F) {
	nodes := make([]*node, len(fuzzSchemas))
	parsed := make([]havro.Schema, len(fuzzSchemas))
	for i, s := range fuzzSchemas {
		var err error
		if nodes[i], err = parse(s); err != nil {
			f.Fatal(err)
		}
		parsed[i] = havro.MustParse(s)
	}
	f.Add(uint8(0), mustEncode(f, allTypes, allTypesValue()))
	f.Add(uint8(1), []byte{2, 2, 4, 0})
	f.Add(uint8(2), []byte{2, 2, 2, 'k', 2, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		i := int(which) % len(nodes)
		out, err := appendJSON(nil, nodes[i], data)
		if err != nil {
			return
		}
		// encoding/json reads invalid UTF-8 in a string as U+FFFD; JSON must be UTF-8.
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("schema %d: decoded %x to invalid JSON %q", i, data, out)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("schema %d: decoded %x to invalid JSON %s: %v", i, data, out, err)
		}
		var ref any
		if err := havro.Unmarshal(parsed[i], data, &ref); err != nil {
			t.Fatalf("schema %d: decoded %x to %s, but hamba/avro refuses it: %v", i, data, out, err)
		}
	})
}
