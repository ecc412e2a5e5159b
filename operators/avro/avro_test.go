package avro

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	havro "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// allTypes is a writer schema with every type of the mapping.
const allTypes = `{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "n", "type": "null"},
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "raw", "type": "bytes"},
    {"name": "fx", "type": {"type": "fixed", "name": "F2", "size": 2}},
    {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "arr", "type": {"type": "array", "items": "long"}},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "opt", "type": ["null", "string"]},
    {"name": "multi", "type": ["null", "long", "string", {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}]},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "big", "type": {"type": "fixed", "name": "D16", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 4}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "inner", "type": "Inner"}
  ]
}`

func allTypesValue() map[string]any {
	return map[string]any{
		"n": nil, "b": true, "i": int32(-7), "l": int64(1) << 40, "f": float32(1.5), "d": 0.1,
		"s": "a \"quoted\"\nline é", "raw": []byte{0, 1, 0xff}, "fx": [2]byte{0xab, 0xcd},
		"e": "GREEN", "arr": []int64{1, -2, 3}, "m": map[string]string{"k": "v"},
		"opt": "x", "multi": map[string]any{"shop.Inner": map[string]any{"x": int32(9)}},
		"amount": big.NewRat(-12345, 100), "big": big.NewRat(123456789012345678, 10000),
		"ts": time.UnixMilli(1767225600123).UTC(), "us": time.UnixMicro(1767225600123456).UTC(),
		"day": time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), "inner": map[string]any{"x": int32(3)},
	}
}

const allTypesJSON = `{"n":null,"b":true,"i":-7,"l":1099511627776,"f":1.5,"d":0.1,` +
	`"s":"a \"quoted\"\nline é","raw":"AAH/","fx":"q80=","e":"GREEN","arr":[1,-2,3],` +
	`"m":{"k":"v"},"opt":"x","multi":{"x":9},"amount":-123.45,"big":12345678901234.5678,` +
	`"ts":1767225600123,"us":1767225600123.456,"day":20455,"inner":{"x":3}}`

// frame is a Confluent-framed value.
func frame(id int, body []byte) []byte {
	return append([]byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, body...)
}

func mustEncode(t testing.TB, schema string, v any) []byte {
	t.Helper()
	s, err := havro.ParseWithCache(schema, "", &havro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := havro.Marshal(s, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeRegistry is srfake with the given schemas registered under subject "t-value"; it
// returns their ids.
func fakeRegistry(t testing.TB, schemas ...string) (*Registry, []int) {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	cl, err := sr.NewClient(sr.URLs(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for i, s := range schemas {
		ss, err := cl.CreateSchema(context.Background(), fmt.Sprintf("t%d-value", i), sr.Schema{Schema: s})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ss.ID)
	}
	return NewRegistry(Options{Fetcher: cl}), ids
}

func TestAllTypes(t *testing.T) {
	reg, ids := fakeRegistry(t, allTypes)
	value := frame(ids[0], mustEncode(t, allTypes, allTypesValue()))
	got, err := reg.AppendJSON([]byte("prefix:"), value)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "prefix:"+allTypesJSON {
		t.Fatalf("got  %s\nwant prefix:%s", got, allTypesJSON)
	}
	if !json.Valid(got[len("prefix:"):]) {
		t.Fatal("not valid JSON")
	}
}

// TestScalars checks each scalar of the mapping on its own, edge values included.
func TestScalars(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		v    any
		want string
	}{
		{`"int"`, int32(math.MinInt32), `-2147483648`},
		{`"long"`, int64(math.MinInt64), `-9223372036854775808`},
		{`"long"`, int64(math.MaxInt64), `9223372036854775807`},
		{`"boolean"`, false, `false`},
		{`"double"`, math.NaN(), `null`},
		{`"double"`, math.Inf(-1), `null`},
		{`"double"`, 1e300, `1e+300`},
		{`"float"`, float32(0.1), `0.1`},
		{`"string"`, "", `""`},
		{`"string"`, "\x00\u2028", `"\u0000\u2028"`}, // escaped as the JSON path writes it
		{`"bytes"`, []byte{}, `""`},
		{`{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}`, big.NewRat(5, 1000), `0.005`},
		{`{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}`, big.NewRat(-5, 1000), `-0.005`},
		{`{"type":"bytes","logicalType":"decimal","precision":9,"scale":0}`, big.NewRat(42, 1), `42`},
		{`{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}`, big.NewRat(0, 1), `0.00`},
		{`{"type":"long","logicalType":"timestamp-micros"}`, time.UnixMicro(-1).UTC(), `-0.001`},
		{`{"type":"int","logicalType":"time-millis"}`, 1500 * time.Millisecond, `1500`},
		{`{"type":"string","logicalType":"uuid"}`, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", `"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`},
		{`["null","long"]`, nil, `null`},
		{`["null","long"]`, int64(5), `5`},
		{`{"type":"array","items":"null"}`, []any{nil, nil}, `[null,null]`},
		{`{"type":"map","values":"long"}`, map[string]int64{}, `{}`},
	} {
		schema := `{"type":"record","name":"R","fields":[{"name":"v","type":` + tc.typ + `}]}`
		reg, ids := fakeRegistry(t, schema)
		got, err := reg.AppendJSON(nil, frame(ids[0], mustEncode(t, schema, map[string]any{"v": tc.v})))
		if err != nil {
			t.Fatalf("%s %v: %v", tc.typ, tc.v, err)
		}
		if want := `{"v":` + tc.want + `}`; string(got) != want {
			t.Errorf("%s %v: got %s, want %s", tc.typ, tc.v, got, want)
		}
	}
}

// TestRecursive decodes a recursive schema (a linked list).
func TestRecursive(t *testing.T) {
	schema := `{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"]}]}`
	reg, ids := fakeRegistry(t, schema)
	v := map[string]any{"v": int64(1), "next": map[string]any{"Node": map[string]any{"v": int64(2), "next": nil}}}
	got, err := reg.AppendJSON(nil, frame(ids[0], mustEncode(t, schema, v)))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"next":{"v":2,"next":null}}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestEvolution decodes two versions of one record name with their own writer schemas.
func TestEvolution(t *testing.T) {
	v1 := `{"type":"record","name":"O","fields":[{"name":"a","type":"long"}]}`
	v2 := `{"type":"record","name":"O","fields":[{"name":"a","type":"long"},{"name":"b","type":"string","default":""}]}`
	reg, ids := fakeRegistry(t, v1, v2)
	got1, err1 := reg.AppendJSON(nil, frame(ids[0], mustEncode(t, v1, map[string]any{"a": int64(1)})))
	got2, err2 := reg.AppendJSON(nil, frame(ids[1], mustEncode(t, v2, map[string]any{"a": int64(2), "b": "x"})))
	if err1 != nil || err2 != nil || string(got1) != `{"a":1}` || string(got2) != `{"a":2,"b":"x"}` {
		t.Fatalf("got %s %v, %s %v", got1, err1, got2, err2)
	}
}

func TestRecordErrors(t *testing.T) {
	schema := `{"type":"record","name":"R","fields":[{"name":"u","type":["null","long"]},{"name":"s","type":"string"}]}`
	mapSchema := `{"type":"record","name":"M","fields":[{"name":"m","type":{"type":"map","values":"string"}}]}`
	reg, ids := fakeRegistry(t, schema, `"long"`, mapSchema)
	good := mustEncode(t, schema, map[string]any{"u": int64(1), "s": "ab"})
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"empty", nil, "too short"},
		{"json", []byte(`{"a":1}`), "magic byte 123"},
		{"magic", append([]byte{1}, frame(ids[0], good)[1:]...), "magic byte 1"},
		{"unknown id", frame(999, good), "schema id 999 not found"},
		{"not a record", frame(ids[1], []byte{2}), "not a record schema"},
		{"truncated", frame(ids[0], good[:len(good)-1]), "length 2 out of range"},
		{"trailing", frame(ids[0], append(good, 0)), "1 bytes left"},
		{"union index", frame(ids[0], []byte{4, 0}), "union index 2 out of range"},
		{"varint", frame(ids[0], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), "varint"},
		{"utf8", frame(ids[0], []byte{0, 2, 0xff}), "string is not valid UTF-8"},
		{"utf8 map key", frame(ids[2], []byte{2, 4, 'k', 0xff, 2, 'v', 0}), "map key is not valid UTF-8"},
		{"utf8 map value", frame(ids[2], []byte{2, 2, 'k', 4, 0xc3, '"', 0}), "string is not valid UTF-8"},
	} {
		got, err := reg.AppendJSON([]byte("x"), tc.value)
		var rerr *RecordError
		if !errors.As(err, &rerr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want a RecordError with %q", tc.name, err, tc.want)
		}
		if string(got) != "x" {
			t.Errorf("%s: dst changed to %q", tc.name, got)
		}
	}
}

// TestStringEscapes: strings and map keys with quotes, backslashes, control characters,
// U+2028/U+2029 and non-ASCII come out as valid JSON that reads back as the Avro value.
func TestStringEscapes(t *testing.T) {
	schema := `{"type":"record","name":"R","fields":[{"name":"s","type":"string"},
  {"name":"m","type":{"type":"map","values":"string"}},{"name":"a","type":{"type":"array","items":["null","string"]}}]}`
	n, err := parse(schema)
	if err != nil {
		t.Fatal(err)
	}
	strs := []string{"", "plain", `q"uo\te/`, "\x00\x01\x1f\x7f\b\f\n\r\t", "a\u2028b\u2029c", "é ü 日本 🙂 <&>"}
	for _, s := range strs {
		m := map[string]string{s: s, "k" + s: "v"}
		a := []any{nil, s}
		out, err := appendJSON(nil, n, mustEncode(t, schema, map[string]any{"s": s, "m": m, "a": []any{nil, map[string]any{"string": s}}}))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if !json.Valid(out) || !utf8.Valid(out) || strings.ContainsAny(string(out), "\u2028\u2029") {
			t.Fatalf("%q: not valid JSON (or a raw line separator): %q", s, out)
		}
		var got struct {
			S string
			M map[string]string
			A []any
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got.S != s || !maps.Equal(got.M, m) || !slices.Equal(got.A, a) {
			t.Errorf("%q: %s reads back as %+v", s, out, got)
		}
	}
}

// TestBlockBounds: a block count no value could hold is refused before any work.
func TestBlockBounds(t *testing.T) {
	n, err := parse(`{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"long"}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	huge := []byte{0xfe, 0xff, 0xff, 0xff, 0x0f} // 2^31-1 items in 5 bytes
	if _, err := appendJSON(nil, n, huge); err == nil || !strings.Contains(err.Error(), "block of") {
		t.Fatalf("err %v", err)
	}
	nulls, _ := parse(`{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"null"}}]}`)
	if _, err := appendJSON(nil, nulls, huge); err == nil || !strings.Contains(err.Error(), "empty type") {
		t.Fatalf("err %v", err)
	}
}

// flaky fails its first calls as an unreachable registry would.
type flaky struct {
	Fetcher
	fails atomic.Int32
	calls atomic.Int32
	code  int
}

func (f *flaky) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	if f.calls.Add(1) <= f.fails.Load() {
		if f.code != 0 {
			return sr.Schema{}, &sr.ResponseError{StatusCode: f.code, Message: "down"}
		}
		return sr.Schema{}, errors.New("connection refused")
	}
	return f.Fetcher.SchemaByID(ctx, id)
}

// static is a Fetcher of fixed schemas, for tests inside a synctest bubble (no network).
type static map[int]string

func (s static) SchemaByID(_ context.Context, id int) (sr.Schema, error) {
	if sch, ok := s[id]; ok {
		return sr.Schema{Schema: sch}, nil
	}
	return sr.Schema{}, &sr.ResponseError{StatusCode: http.StatusNotFound, Message: "schema not found"}
}

func (s static) RegisterSchema(context.Context, string, sr.Schema, int, int) (int, error) {
	return 0, errors.New("static: read only")
}

func (s static) SchemaByVersion(context.Context, string, int) (sr.SubjectSchema, error) {
	return sr.SubjectSchema{}, &sr.ResponseError{StatusCode: http.StatusNotFound, Message: "subject not found"}
}

// TestUnavailable: a registry that is briefly down costs time, not records; one that stays
// down past the retry timeout gives ErrUnavailable (not a RecordError), and the next record
// asks again.
func TestUnavailable(t *testing.T) {
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	value := frame(1, mustEncode(t, schema, map[string]any{"a": int64(3)}))
	synctest.Test(t, func(t *testing.T) {
		for _, code := range []int{0, http.StatusServiceUnavailable, http.StatusUnauthorized} {
			f := &flaky{Fetcher: static{1: schema}, code: code}
			f.fails.Store(3)
			reg := NewRegistry(Options{Fetcher: f, RetryTimeout: time.Minute})
			start := time.Now()
			got, err := reg.AppendJSON(nil, value)
			if err != nil || string(got) != `{"a":3}` {
				t.Fatalf("code %d: got %s %v", code, got, err)
			}
			if d := time.Since(start); d != 700*time.Millisecond { // 100 + 200 + 400 ms of backoff
				t.Errorf("code %d: waited %v", code, d)
			}

			f = &flaky{Fetcher: static{1: schema}, code: code}
			f.fails.Store(1000)
			reg = NewRegistry(Options{Fetcher: f, RetryTimeout: 30 * time.Second})
			start = time.Now()
			_, err = reg.AppendJSON(nil, value)
			var rerr *RecordError
			if !errors.Is(err, ErrUnavailable) || errors.As(err, &rerr) {
				t.Fatalf("code %d: err %v, want ErrUnavailable", code, err)
			}
			if d := time.Since(start); d != 30*time.Second {
				t.Errorf("code %d: gave up after %v", code, d)
			}
			f.fails.Store(0)
			if got, err := reg.AppendJSON(nil, value); err != nil || string(got) != `{"a":3}` {
				t.Fatalf("code %d: after recovery: %s %v", code, got, err)
			}
		}
	})
}

// TestCacheAndNegative: one fetch per id; an unknown id is asked again after negativeTTL.
func TestCacheAndNegative(t *testing.T) {
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	fake := srfake.New()
	defer fake.Close()
	cl, _ := sr.NewClient(sr.URLs(fake.URL()))
	ss, err := cl.CreateSchema(context.Background(), "x-value", sr.Schema{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	f := &flaky{Fetcher: cl}
	reg := NewRegistry(Options{Fetcher: f, Now: func() time.Time { return now }})
	value := frame(ss.ID, mustEncode(t, schema, map[string]any{"a": int64(3)}))
	for range 3 {
		if _, err := reg.AppendJSON(nil, value); err != nil {
			t.Fatal(err)
		}
	}
	unknown := frame(ss.ID+100, value[5:])
	for range 3 {
		if _, err := reg.AppendJSON(nil, unknown); err == nil {
			t.Fatal("no error for an unknown id")
		}
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	now = now.Add(negativeTTL)
	if _, err := reg.AppendJSON(nil, unknown); err == nil || f.calls.Load() != 3 {
		t.Fatalf("err %v, %d fetches, want 3", err, f.calls.Load())
	}
}

// BenchmarkAppendJSON decodes the orders workload's record (about 50 bytes of Avro) to JSON.
func BenchmarkAppendJSON(b *testing.B) {
	schema := `{"type":"record","name":"Order","fields":[
  {"name":"order_id","type":"string"},{"name":"customer_id","type":"string"},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`
	reg := NewRegistry(Options{Fetcher: static{1: schema}})
	value := frame(1, mustEncode(b, schema, map[string]any{"order_id": "o-000000000042", "customer_id": "c-0000042",
		"amount": big.NewRat(12345, 100), "ts": time.UnixMilli(1767225600000).UTC()}))
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		var err error
		if dst, err = reg.AppendJSON(dst[:0], value); err != nil {
			b.Fatal(err)
		}
	}
}
