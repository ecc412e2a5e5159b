package avro

import (
	"reflect"
	"strings"
	"testing"

	havro "github.com/hamba/avro/v2"
)

// TestEncodeRoundTrip: every type of the mapping encodes from the JSON the decoder gives and
// decodes back to it.
func TestEncodeRoundTrip(t *testing.T) {
	enc, err := NewEncoder(allTypes, 42)
	if err != nil {
		t.Fatal(err)
	}
	framed, err := enc.AppendValue([]byte("x"), []byte(allTypesJSON))
	if err != nil {
		t.Fatal(err)
	}
	if string(framed[:6]) != "x\x00\x00\x00\x00\x2a" {
		t.Fatalf("header %q", framed[:6])
	}
	n, _ := parse(allTypes)
	got, err := appendJSON(nil, n, framed[6:])
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != allTypesJSON {
		t.Fatalf("round trip:\n got %s\nwant %s", got, allTypesJSON)
	}
	// And hamba/avro reads the bytes as the value its own encoding of it holds (the bytes
	// differ: hamba writes array and map blocks with their sizes).
	s := havro.MustParse(allTypes)
	var mine, theirs any
	if err := havro.Unmarshal(s, framed[6:], &mine); err != nil {
		t.Fatal(err)
	}
	if err := havro.Unmarshal(s, mustEncode(t, allTypes, allTypesValue()), &theirs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mine, theirs) {
		t.Fatalf("hamba/avro reads\n%v\nfrom sluice's encoding, and\n%v\nfrom its own", mine, theirs)
	}
}

func TestEncodeValues(t *testing.T) {
	schema := `{"type":"record","name":"Total","namespace":"out","fields":[
	  {"name":"key","type":"string"},
	  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":2}},
	  {"name":"orders","type":"long"},
	  {"name":"avg","type":["null","double"]},
	  {"name":"window_start","type":["null",{"type":"long","logicalType":"timestamp-millis"}]}]}`
	n, _ := parse(schema)
	enc, err := NewEncoder(schema, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, out, err string }{
		{in: `{"key":"c-1","amount":123.45,"orders":3,"avg":41.15}`, out: `{"key":"c-1","amount":123.45,"orders":3,"avg":41.15,"window_start":null}`},
		{in: `{"key":"c-1","amount":0.125,"orders":1,"avg":null,"window_start":1767225600000}`, out: `{"key":"c-1","amount":0.12,"orders":1,"avg":null,"window_start":1767225600000}`},
		{in: `{"key":"c-1","amount":-0.135,"orders":1}`, out: `{"key":"c-1","amount":-0.14,"orders":1,"avg":null,"window_start":null}`},
		{in: `{"key":"c-1","amount":1,"orders":1.5}`, err: `field "orders": 1.5 is not an long`},
		{in: `{"key":"c-1","orders":1}`, err: `field "amount" missing`},
		{in: `{"key":7,"amount":1,"orders":1}`, err: `field "key": a number, want a string`},
		{in: `[1]`, err: `want an object`},
		{in: `{"key":`, err: `not JSON`},
	} {
		got, err := enc.AppendValue(nil, []byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		back, err := appendJSON(nil, n, got[5:])
		if err != nil || string(back) != tc.out {
			t.Errorf("%s: decoded back to %s (%v), want %s", tc.in, back, err, tc.out)
		}
	}
	if name, err := RecordName(schema); err != nil || name != "out.Total" {
		t.Errorf("RecordName: %q %v", name, err)
	}
}

// TestRegistryEncoder registers a sink schema under each subject name strategy and reads the
// encoded value back through the registry by its id.
func TestRegistryEncoder(t *testing.T) {
	reg, _ := fakeRegistry(t)
	schema := `{"type":"record","name":"Total","namespace":"out","fields":[{"name":"key","type":"string"},{"name":"n","type":"long"}]}`
	for strategy, want := range map[string]string{"topic": "totals-value", "record": "out.Total", "topic_record": "totals-out.Total"} {
		subject, err := Subject(strategy, "totals", schema)
		if err != nil || subject != want {
			t.Fatalf("%s: subject %q %v, want %q", strategy, subject, err, want)
		}
		enc, err := reg.Encoder(subject, schema)
		if err != nil {
			t.Fatal(err)
		}
		v, err := enc.AppendValue(nil, []byte(`{"key":"c-1","n":2}`))
		if err != nil {
			t.Fatal(err)
		}
		back, err := reg.AppendJSON(nil, v)
		if err != nil || string(back) != `{"key":"c-1","n":2}` {
			t.Fatalf("%s: read back %s %v", strategy, back, err)
		}
	}
	if _, err := reg.Encoder("x-value", `"long"`); err == nil || !strings.Contains(err.Error(), "want a record") {
		t.Fatalf("a non-record schema: %v", err)
	}
}
