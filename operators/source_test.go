package operators

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/configs"
)

const ordersValue = `{"order_id":"o-000000001234","customer_id":"c-0000042","amount":123.45,"ts":1767225600000}`

func mustSource(t testing.TB, cfg configs.Source) *Source {
	t.Helper()
	s, err := NewSource("orders", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDecode(t *testing.T) {
	byField := configs.Source{Topic: "orders", Format: "json", Key: "customer_id", Timestamp: "ts"}
	kafkaKey := configs.Source{Topic: "orders"}
	nested := configs.Source{Topic: "orders", Key: "customer.id", Timestamp: "meta.time"}
	for _, tc := range []struct {
		name    string
		cfg     configs.Source
		key     string // "<nil>" = null key
		value   string
		wantKey string
		wantTS  int64
		wantErr string // substring; "" = success
	}{
		{name: "orders", cfg: byField, key: "c-0000042", value: ordersValue, wantKey: "c-0000042", wantTS: 1767225600000},
		{name: "kafka key and time", cfg: kafkaKey, key: "k1", value: ordersValue, wantKey: "k1", wantTS: 7},
		{name: "null kafka key without key field", cfg: kafkaKey, key: "<nil>", value: `{}`, wantKey: "<nil>", wantTS: 7},
		{name: "spaces", cfg: byField, key: "c-1", value: " \n{ \"ts\" : 5 , \"customer_id\" :\t\"c-1\" }\r\n", wantKey: "c-1", wantTS: 5},
		{name: "key differs", cfg: byField, key: "c-2", value: `{"customer_id":"c-1","ts":1}`,
			wantErr: `operators: orders: key field "customer_id"="c-1" differs from record key "c-2" (re-keying needs a repartition topic)`},
		{name: "null kafka key with key field", cfg: byField, key: "<nil>", value: `{"customer_id":"c-1","ts":1}`,
			wantErr: `key field "customer_id"="c-1" but the record has no key`},
		{name: "numeric key", cfg: byField, key: "42", value: `{"customer_id":42,"ts":1}`, wantKey: "42", wantTS: 1},
		{name: "numeric key text", cfg: byField, key: "42", value: `{"customer_id":42.0,"ts":1}`, wantErr: `"customer_id"="42.0" differs`},
		{name: "bool key", cfg: byField, key: "true", value: `{"customer_id":true,"ts":1}`, wantErr: `key field "customer_id" is a boolean, want a string or a number`},
		{name: "escaped key", cfg: byField, key: "c-1\"é", value: `{"customer_id":"c\u002d1\"\u00e9","ts":1}`, wantKey: "c-1\"é", wantTS: 1},
		{name: "surrogate pair key", cfg: byField, key: "😀", value: `{"customer_id":"\ud83d\ude00","ts":1}`, wantKey: "😀", wantTS: 1},
		{name: "escaped member name", cfg: byField, key: "c-1", value: `{"customer\u005fid":"c-1","t\u0073":3}`, wantKey: "c-1", wantTS: 3},
		{name: "duplicate member: last wins", cfg: byField, key: "c-2", value: `{"customer_id":"c-1","customer_id":"c-2","ts":1}`, wantKey: "c-2", wantTS: 1},
		{name: "nested path", cfg: nested, key: "c-9", value: `{"customer":{"name":"x","id":"c-9"},"meta":{"time":"2026-01-01T00:00:00Z"}}`, wantKey: "c-9", wantTS: 1767225600000},
		{name: "nested missing", cfg: nested, key: "c-9", value: `{"customer":{"name":"x"},"meta":{"time":1}}`, wantErr: `key field "customer.id" missing`},
		{name: "nested not object", cfg: nested, key: "c-9", value: `{"customer":"c-9","meta":{"time":1}}`, wantErr: `key field "customer.id" missing`},
		{name: "rfc3339 offset and fraction", cfg: byField, key: "c", value: `{"customer_id":"c","ts":"2026-01-01T01:00:00.123+01:00"}`, wantKey: "c", wantTS: 1767225600123},
		{name: "fractional epoch ms rounds down", cfg: byField, key: "c", value: `{"customer_id":"c","ts":1.9}`, wantKey: "c", wantTS: 1},
		{name: "negative fractional epoch ms", cfg: byField, key: "c", value: `{"customer_id":"c","ts":-1.5}`, wantKey: "c", wantTS: -2},
		{name: "epoch ms exponent", cfg: byField, key: "c", value: `{"customer_id":"c","ts":1.7672256e12}`, wantKey: "c", wantTS: 1767225600000},
		{name: "epoch ms out of range", cfg: byField, key: "c", value: `{"customer_id":"c","ts":1e300}`, wantErr: `timestamp field "ts": epoch milliseconds 1e300 out of range`},
		{name: "bad time string", cfg: byField, key: "c", value: `{"customer_id":"c","ts":"yesterday"}`, wantErr: `timestamp field "ts": not an RFC 3339 time: "yesterday"`},
		{name: "bool time", cfg: byField, key: "c", value: `{"customer_id":"c","ts":false}`, wantErr: `timestamp field "ts": is a boolean`},
		{name: "missing key field", cfg: byField, key: "c", value: `{"ts":1}`, wantErr: `key field "customer_id" missing`},
		{name: "missing ts field", cfg: byField, key: "c", value: `{"customer_id":"c"}`, wantErr: `timestamp field "ts" missing`},
		{name: "not an object", cfg: byField, key: "c", value: `[1,2]`, wantErr: `operators: orders: value is an array, not a JSON object`},
		{name: "string value", cfg: kafkaKey, key: "c", value: `"x"`, wantErr: `value is a string, not a JSON object`},
		{name: "empty value", cfg: kafkaKey, key: "c", value: ``, wantErr: `invalid JSON at byte 0: empty value`},
		{name: "truncated", cfg: byField, key: "c", value: `{"customer_id":"c","ts":1`, wantErr: `invalid JSON at byte 25: unexpected end of input, want ',' or '}'`},
		{name: "trailing data", cfg: byField, key: "c", value: `{"customer_id":"c","ts":1} x`, wantErr: `invalid JSON at byte 27: unexpected 'x', want end of input`},
		{name: "two objects", cfg: kafkaKey, key: "c", value: `{}{}`, wantErr: `invalid JSON at byte 2`},
		{name: "bad nested", cfg: kafkaKey, key: "c", value: `{"a":[1,{"b":tru}]}`, wantErr: `invalid literal, want true`},
		{name: "control char", cfg: kafkaKey, key: "c", value: "{\"a\":\"x\ny\"}", wantErr: `control character byte 0x0a in string`},
		{name: "bad escape", cfg: kafkaKey, key: "c", value: `{"a":"\x"}`, wantErr: `invalid escape 'x'`},
		{name: "bad number", cfg: kafkaKey, key: "c", value: `{"a":01}`, wantErr: `want ',' or '}'`},
		{name: "single quotes", cfg: kafkaKey, key: "c", value: `{'a':1}`, wantErr: `unexpected '\'', want member name`},
		{name: "deep nesting", cfg: kafkaKey, key: "c", value: `{"a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, wantErr: `nesting too deep`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := mustSource(t, tc.cfg)
			var key []byte
			if tc.key != "<nil>" {
				key = []byte(tc.key)
			}
			var r Record
			err := src.Decode(key, []byte(tc.value), 7, &r)
			if tc.wantErr != "" {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Decode error = %v, want *Error containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode error = %q, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if gotKey := string(r.Key); tc.wantKey == "<nil>" && r.Key != nil || tc.wantKey != "<nil>" && gotKey != tc.wantKey {
				t.Errorf("Key = %q (nil=%v), want %q", gotKey, r.Key == nil, tc.wantKey)
			}
			if r.Time != tc.wantTS {
				t.Errorf("Time = %d, want %d", r.Time, tc.wantTS)
			}
			if string(r.Value) != tc.value {
				t.Errorf("Value = %q, want the input", r.Value)
			}
		})
	}
}

func TestNewSourceErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  configs.Source
		want string
	}{
		{configs.Source{Topic: "t", Format: "avro"}, `operators: source s: format avro needs a schema registry (schema_registry.urls)`},
		{configs.Source{Topic: "t", Format: "xml"}, `operators: source s: unsupported format "xml" (allowed: json, avro)`},
		{configs.Source{Topic: "t", KeyFormat: "utf16"}, `operators: source s: unsupported key_format "utf16" (allowed: bytes, string, json)`},
		{configs.Source{Topic: "t", Key: "a..b"}, `operators: source s: key: invalid field path "a..b"`},
		{configs.Source{Topic: "t", Timestamp: ".ts"}, `operators: source s: timestamp: invalid field path ".ts"`},
	} {
		if _, err := NewSource("s", tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("NewSource(%+v) error = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestKeyFormats: how each key_format reads the Kafka record key, alone and against a key
// field.
func TestKeyFormats(t *testing.T) {
	for _, tc := range []struct {
		format, field string
		key, value    string
		want, err     string
	}{
		{format: "string", key: "c-1", value: `{}`, want: "c-1"},
		{format: "string", key: "\xff\xfe", value: `{}`, err: "not valid UTF-8 (key_format: string"},
		{format: "bytes", key: "\xff\xfe", value: `{}`, want: "\xff\xfe"},
		{format: "bytes", key: `"c-1"`, value: `{}`, want: `"c-1"`},
		{format: "json", key: `"c-1"`, value: `{}`, want: "c-1"},
		{format: "json", key: ` "c\u002d1" `, value: `{}`, want: "c-1"},
		{format: "json", key: `42`, value: `{}`, want: "42"},
		{format: "json", key: `-1.5e3`, value: `{}`, want: "-1.5e3"},
		{format: "json", key: `c-1`, value: `{}`, err: "is not JSON"},
		{format: "json", key: `{"id":1}`, value: `{}`, err: "is an object, want a JSON string or number"},
		{format: "json", key: `null`, value: `{}`, err: "want a JSON string or number"},
		{format: "json", key: `"a" "b"`, value: `{}`, err: "more than one JSON value"},
		{format: "json", key: `"abc`, value: `{}`, err: "unterminated string"},
		{format: "json", key: ``, value: `{}`, err: "is not JSON"},
		{format: "json", field: "customer_id", key: `"c-1"`, value: `{"customer_id":"c-1"}`, want: "c-1"},
		{format: "json", field: "customer_id", key: `7`, value: `{"customer_id":7}`, want: "7"},
		{format: "string", field: "customer_id", key: `"c-1"`, value: `{"customer_id":"c-1"}`, err: "differs from record key"},
	} {
		key := tc.key
		src := mustSource(t, configs.Source{Topic: "t", KeyFormat: tc.format, Key: tc.field})
		var r Record
		err := src.Decode([]byte(key), []byte(tc.value), 7, &r)
		if tc.err != "" {
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: err %v, want an *Error with %q", tc.format, key, err, tc.err)
			}
			continue
		}
		if err != nil || string(r.Key) != tc.want {
			t.Errorf("%s %q: key %q, err %v; want %q", tc.format, key, r.Key, err, tc.want)
		}
	}
}

// upper is a ValueDecoder for tests: "ok:<json>" decodes to <json>, "bad" is the record's
// fault, anything else a registry that is down.
type upper struct{}

type badRecord struct{}

func (badRecord) Error() string   { return "bad bytes" }
func (badRecord) BadRecord() bool { return true }

func (upper) AppendJSON(dst, v []byte) ([]byte, error) {
	switch {
	case bytes.HasPrefix(v, []byte("ok:")):
		return append(dst, v[3:]...), nil
	case string(v) == "bad":
		return dst, badRecord{}
	}
	return dst, errors.New("registry down")
}

// TestValueDecoder: a decoded value is the record's JSON; a bad one is an *Error (a dead
// letter); a failure that is not the record's is not an *Error.
func TestValueDecoder(t *testing.T) {
	src, err := NewSourceDecoding("s", configs.Source{Topic: "t", Format: "avro", Key: "k", Timestamp: "ts"}, upper{})
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := src.Decode([]byte("a"), []byte(`ok:{"k":"a","ts":5,"n":1}`), 7, &r); err != nil || string(r.Value) != `{"k":"a","ts":5,"n":1}` || r.Time != 5 || string(r.Key) != "a" {
		t.Fatalf("decoded %s key %s time %d err %v", r.Value, r.Key, r.Time, err)
	}
	var e *Error
	if err := src.Decode([]byte("a"), []byte("bad"), 7, &r); !errors.As(err, &e) || !strings.Contains(err.Error(), "bad bytes") {
		t.Fatalf("bad: %v", err)
	}
	if err := src.Decode([]byte("a"), nil, 7, &r); !errors.As(err, &e) || !strings.Contains(err.Error(), "tombstone") {
		t.Fatalf("tombstone: %v", err)
	}
	if err := src.Decode([]byte("a"), []byte("x"), 7, &r); err == nil || errors.As(err, &e) {
		t.Fatalf("down: %v, want an error that is not an *Error", err)
	}
}

// TestDecodeReusesRecord checks that a reused Record never serves a stale index.
func TestDecodeReusesRecord(t *testing.T) {
	src := mustSource(t, configs.Source{Topic: "t", Key: "k"})
	agg := mustAggregate(t, aggCfg(map[string]map[string]any{"s": {"sum": "v"}}))
	var r Record
	buf := make([]byte, 0, 64)
	var out []byte
	for i, v := range []string{`{"k":"a","v":1}`, `{"v":22,"k":"a"}`, `{"k":"a","v":3}`} {
		buf = append(buf[:0], v...) // same backing array every time
		if err := src.Decode([]byte("a"), buf, 0, &r); err != nil {
			t.Fatal(i, err)
		}
		var err error
		if out, err = agg.Project(&r, out[:0]); err != nil {
			t.Fatal(i, err)
		}
		want := []string{"1", "22", "3"}[i]
		if got := string(appendDecimal(nil, loadDec(out))); got != want {
			t.Errorf("record %d: projected %s, want %s", i, got, want)
		}
	}
}

// TestReleaseDropsInput: after Release a Record keeps nothing of the bytes it was decoded from
// (a task releases it after each batch, so it does not pin the fetch response), and the next
// Decode into it, even of a value at the same address, is indexed afresh.
func TestReleaseDropsInput(t *testing.T) {
	src := mustSource(t, configs.Source{Topic: "t", Key: "k"})
	agg := mustAggregate(t, aggCfg(map[string]map[string]any{"s": {"sum": "v"}}))
	var r Record
	buf := []byte(`{"k":"a","v":1}`)
	if err := src.Decode([]byte("a"), buf, 0, &r); err != nil {
		t.Fatal(err)
	}
	r.Release()
	if r.Key != nil || r.Value != nil || r.idxPtr != nil || r.idxLen != 0 || r.idxErr != nil {
		t.Fatalf("after Release: %+v, want no reference to the input", r)
	}
	copy(buf, `{"k":"a","v":7}`) // same address and length, other bytes
	if err := src.Decode([]byte("a"), buf, 0, &r); err != nil {
		t.Fatal(err)
	}
	out, err := agg.Project(&r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(appendDecimal(nil, loadDec(out))); got != "7" || string(r.Key) != "a" {
		t.Errorf("after Release and Decode: key %q, projected %s; want a, 7", r.Key, got)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		ordersValue, `{}`, `{"customer_id":"c\u002d1","ts":"2026-01-01T00:00:00Z"}`, `{"customer_id":42,"ts":1.5e3}`,
		`{"a":{"b":[1,2,{"c":null}]},"customer_id":"x","customer_id":"y"}`, `[1]`, `{"a":"\ud800"}`, `{"a":1`, "", "{\"customer_id\":\"\xff\"}",
	} {
		f.Add([]byte("c-0000042"), []byte(s))
	}
	f.Add([]byte(`"c-0000042"`), []byte(ordersValue))
	f.Add([]byte(` 42 `), []byte(`{"customer_id":42}`))
	withKey := mustSource(f, configs.Source{Topic: "t", Key: "customer_id"})
	full := mustSource(f, configs.Source{Topic: "t", Key: "customer_id", Timestamp: "ts"})
	plain := mustSource(f, configs.Source{Topic: "t"})
	jsonKey := mustSource(f, configs.Source{Topic: "t", KeyFormat: "json", Key: "customer_id"})
	stringKey := mustSource(f, configs.Source{Topic: "t", KeyFormat: "string"})
	agg := mustAggregate(f, aggCfg(map[string]map[string]any{"s": {"sum": "amount"}, "n": {"count": map[string]any{}}}))
	hop := &Windows{Size: 60_000, Advance: 20_000, Grace: 1000}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		var r Record
		// Never panics; any result is a record or an *Error.
		for _, src := range []*Source{withKey, full, plain, jsonKey, stringKey} {
			if err := src.Decode(key, value, 7, &r); err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Decode error %T %v, want *Error", err, err)
				}
			} else if _, err := agg.Project(&r, nil); err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Project error %T %v, want *Error", err, err)
				}
			}
		}
		// A key read as JSON is the text of a JSON string or number, as encoding/json reads it.
		if jsonKey.Decode(key, value, 7, &r) == nil {
			var v any
			d := json.NewDecoder(bytes.NewReader(key))
			d.UseNumber()
			if err := d.Decode(&v); err != nil {
				t.Fatalf("key_format json accepted %q, which encoding/json refuses: %v", key, err)
			}
			var text string
			switch v := v.(type) {
			case string:
				text = v
			case json.Number:
				text = v.String()
			default:
				t.Fatalf("key_format json accepted %q (%T)", key, v)
			}
			if utf8.Valid(key) && text != string(r.Key) {
				t.Fatalf("key_format json read %q as %q, encoding/json as %q", key, r.Key, text)
			}
		}
		// A decoded event time lies in the years 0000 to 9999, and windows assign it without
		// overflowing (a time near int64's limits used to loop forever in Assign).
		if err := full.Decode(key, value, 7, &r); err == nil {
			if r.Time < MinTime || r.Time > MaxTime {
				t.Fatalf("event time %d out of range", r.Time)
			}
			n := 0
			last := int64(math.MinInt64)
			hop.Assign(r.Time, math.MinInt64, func(start int64) {
				if start <= last || start > r.Time || start+hop.Size <= r.Time {
					t.Fatalf("window start %d (after %d) for time %d", start, last, r.Time)
				}
				last = start
				n++
			})
			if n != int(hop.Size/hop.Advance) {
				t.Fatalf("%d windows for time %d, want %d", n, r.Time, hop.Size/hop.Advance)
			}
		}
		// The scanner agrees with encoding/json on what is a JSON object.
		plainErr := plain.Decode(key, value, 7, &r)
		trimmed := bytes.TrimLeft(value, " \t\r\n")
		isObject := json.Valid(value) && len(trimmed) > 0 && trimmed[0] == '{'
		if strings.Contains(errString(plainErr), "nesting too deep") {
			return
		}
		if isObject != (plainErr == nil) {
			t.Fatalf("Decode(%q) error %v, but encoding/json says object=%v", value, plainErr, isObject)
		}
		if !isObject || !utf8.Valid(value) {
			return
		}
		// The key field agrees with encoding/json (last duplicate wins, escapes decoded).
		var m map[string]any
		if err := json.Unmarshal(value, &m); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		s, ok := m["customer_id"].(string)
		if !ok || strings.ContainsRune(s, utf8.RuneError) {
			return
		}
		if err := withKey.Decode([]byte(s), value, 7, &r); err != nil {
			t.Fatalf("Decode(%q) with key %q: %v", value, s, err)
		}
		if string(r.Key) != s {
			t.Fatalf("Key = %q, want %q", r.Key, s)
		}
		if err := withKey.Decode([]byte(s+"x"), value, 7, &r); err == nil {
			t.Fatalf("Decode(%q) with wrong key succeeded", value)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// processing_time: the record's time is the wall clock when it is decoded, whatever its Kafka
// timestamp; with a timestamp field too, the source is refused.
func TestSourceProcessingTime(t *testing.T) {
	s, err := NewSource("bids", configs.Source{Topic: "bids", ProcessingTime: true})
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	before := time.Now().UnixMilli()
	if err := s.Decode([]byte("k"), []byte(`{"a":1}`), 5, &r); err != nil {
		t.Fatal(err)
	}
	if after := time.Now().UnixMilli(); r.Time < before || r.Time > after {
		t.Errorf("time %d, want the wall clock (%d to %d), not the record timestamp", r.Time, before, after)
	}
	if _, err := NewSource("bids", configs.Source{Topic: "bids", ProcessingTime: true, Timestamp: "ts"}); err == nil {
		t.Error("processing_time with a timestamp field accepted")
	}
}
