package operators

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

// TestHostileInput runs each class of hostile input through a record's whole path in the
// runtime (Source.Decode, a filter, a map, Aggregate.Project) and checks the outcome the README
// documents: a per-record *Error (the runtime's dead letter) whose reason names the problem, or
// a record that is processed as it is. Nothing panics, whatever the input.
func TestHostileInput(t *testing.T) {
	const nullKey = "\x00<nil>" // the Kafka key is null
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	big := `{"customer_id":"c-1","amount":1,"ts":5,"blob":"` + strings.Repeat("x", 5<<20) + `"}`
	for _, tc := range []struct {
		name, key, value string
		kafkaTS          int64  // the record timestamp (0: 5)
		noTS             bool   // the source reads the record timestamp, not "ts"
		want             string // substring of the *Error; "" = processed
		at               string // "" any stage; "source", "filter", "map" or "totals": the stage that fails
	}{
		// Malformed JSON.
		{name: "truncated object", key: "c-1", value: `{"customer_id":"c-1","amount":`, want: "invalid JSON at byte 30: unexpected end of input", at: "source"},
		{name: "not JSON", key: "c-1", value: `customer_id=c-1`, want: "invalid JSON at byte 0", at: "source"},
		{name: "array value", key: "c-1", value: `[1,2]`, want: "value is an array, not a JSON object", at: "source"},
		{name: "trailing garbage", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":5}}`, want: "want end of input", at: "source"},
		{name: "single quotes", key: "c-1", value: `{'customer_id':'c-1'}`, want: "want member name", at: "source"},
		// Wrong types.
		{name: "amount is a string", key: "c-1", value: `{"customer_id":"c-1","amount":"12.5","ts":5}`, want: "expr: invalid operation: string >= int", at: "filter"},
		{name: "amount is an object", key: "c-1", value: `{"customer_id":"c-1","amount":{"v":1},"ts":5}`, want: "expr:", at: "filter"},
		{name: "key field is a bool", key: "true", value: `{"customer_id":true,"amount":1,"ts":5}`, want: `key field "customer_id" is a boolean`, at: "source"},
		{name: "key field is an object", key: "c-1", value: `{"customer_id":{"id":"c-1"},"amount":1,"ts":5}`, want: `key field "customer_id" is an object`, at: "source"},
		{name: "ts is a bool", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":true}`, want: `timestamp field "ts": is a boolean`, at: "source"},
		{name: "ts is not a time", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":"noon"}`, want: `not an RFC 3339 time`, at: "source"},
		// Missing key or timestamp; null keys; tombstones.
		{name: "missing key field", key: "c-1", value: `{"amount":1,"ts":5}`, want: `key field "customer_id" missing`, at: "source"},
		{name: "missing ts field", key: "c-1", value: `{"customer_id":"c-1","amount":1}`, want: `timestamp field "ts" missing`, at: "source"},
		{name: "missing amount", key: "c-1", value: `{"customer_id":"c-1","ts":5}`, want: "expr:", at: "filter"},
		{name: "null key with key field", key: nullKey, value: `{"customer_id":"c-1","amount":1,"ts":5}`, want: "but the record has no key", at: "source"},
		{name: "null key field", key: "c-1", value: `{"customer_id":null,"amount":1,"ts":5}`, want: `key field "customer_id" is null`, at: "source"},
		{name: "tombstone", key: "c-1", value: nullKey, want: "invalid JSON at byte 0: empty value", at: "source"},
		{name: "empty value", key: "c-1", value: "", want: "invalid JSON at byte 0: empty value", at: "source"},
		// Size and depth.
		{name: "5 MiB value", key: "c-1", value: big},
		{name: "5 MiB malformed value", key: "c-1", value: big[:len(big)-2], want: "unterminated string", at: "source"},
		{name: "5 MiB key", key: strings.Repeat("k", 5<<20), value: `{"customer_id":"c-1","amount":1,"ts":5}`, want: "differs from record key", at: "source"},
		{name: "10k nested arrays", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":5,"x":` + deep(10000) + `}`, want: "nesting too deep", at: "source"},
		{name: "10k nested objects", key: "c-1", value: deepObj(10000), want: "nesting too deep", at: "source"},
		{name: "10k nested top-level array", key: "c-1", value: deep(10000), want: "nesting too deep", at: "source"},
		{name: "500 nested arrays", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":5,"x":` + deep(500) + `}`},
		// Non-UTF-8 bytes: inside strings they are data (keys compare as bytes); outside, not JSON.
		{name: "non-UTF-8 in a string", key: "c-1", value: "{\"customer_id\":\"c-1\",\"amount\":1,\"ts\":5,\"note\":\"\xff\xfe\"}"},
		{name: "non-UTF-8 key", key: "c-\xff", value: "{\"customer_id\":\"c-\xff\",\"amount\":1,\"ts\":5}"},
		{name: "non-UTF-8 outside strings", key: "c-1", value: "{\"customer_id\":\"c-1\",\xff:1}", want: "unexpected byte 0xff, want member name", at: "source"},
		{name: "UTF-16 value", key: "c-1", value: "\xff\xfe{\x00}\x00", want: "unexpected byte 0xff, want value", at: "source"},
		// Numbers beyond the 128-bit decimal; NaN and Infinity.
		{name: "amount 1e30", key: "c-1", value: `{"customer_id":"c-1","amount":1e30,"ts":5}`, want: `field "amount": 1e30: number out of range`, at: "totals"},
		{name: "amount 2^127 units", key: "c-1", value: `{"customer_id":"c-1","amount":170141183460469231731687303715.884105728,"ts":5}`, want: "number out of range", at: "totals"},
		// Expressions compute on them exactly (the map writes 2e+400); the aggregate refuses them.
		{name: "amount 1e400", key: "c-1", value: `{"customer_id":"c-1","amount":1e400,"ts":5}`, want: `field "amount": 1e400: number out of range`, at: "totals"},
		{name: "amount 400 digits", key: "c-1", value: `{"customer_id":"c-1","amount":` + strings.Repeat("9", 400) + `,"ts":5}`, want: "number out of range", at: "totals"},
		// Beyond the expressions' decimals (1000 digits, exponents within ±10000).
		{name: "amount 1e20000", key: "c-1", value: `{"customer_id":"c-1","amount":1e20000,"ts":5}`, want: `expr: field "amount": 1e20000: number out of range`, at: "filter"},
		{name: "amount 2000 digits", key: "c-1", value: `{"customer_id":"c-1","amount":` + strings.Repeat("7", 2000) + `,"ts":5}`, want: "7...: number out of range", at: "filter"},
		{name: "amount 1e-400 rounds to 0", key: "c-1", value: `{"customer_id":"c-1","amount":1e-400,"ts":5}`, want: "", at: ""},
		{name: "amount NaN", key: "c-1", value: `{"customer_id":"c-1","amount":NaN,"ts":5}`, want: "unexpected 'N', want value", at: "source"},
		{name: "amount Infinity", key: "c-1", value: `{"customer_id":"c-1","amount":Infinity,"ts":5}`, want: "unexpected 'I', want value", at: "source"},
		{name: "amount -Infinity", key: "c-1", value: `{"customer_id":"c-1","amount":-Infinity,"ts":5}`, want: "want digit", at: "source"},
		{name: "amount \"NaN\"", key: "c-1", value: `{"customer_id":"c-1","amount":"NaN","ts":5}`, want: "expr:", at: "filter"},
		{name: "ts NaN", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":NaN}`, want: "unexpected 'N', want value", at: "source"},
		// Timestamps far in the past or the future.
		{name: "ts year 9999", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":253402300799999}`},
		{name: "ts year 0000", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":"0000-01-01T00:00:00Z"}`},
		{name: "ts beyond year 9999", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":253402300800000}`, want: "out of range (years 0000 to 9999)", at: "source"},
		{name: "ts before year 0000", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":-62167219200001}`, want: "out of range (years 0000 to 9999)", at: "source"},
		{name: "ts max int64", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":9223372036854775807}`, want: "out of range", at: "source"},
		{name: "ts min int64", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":-9223372036854775808}`, want: "out of range", at: "source"},
		{name: "ts 1e300", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":1e300}`, want: "out of range", at: "source"},
		{name: "ts in nanoseconds", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":1767225600000000000}`, want: "out of range", at: "source"},
		{name: "ts year 10000 text", key: "c-1", value: `{"customer_id":"c-1","amount":1,"ts":"10000-01-01T00:00:00Z"}`, want: "not an RFC 3339 time", at: "source"},
		{name: "record timestamp max int64", key: "c-1", value: `{"customer_id":"c-1","amount":1}`, noTS: true, kafkaTS: 1<<63 - 1, want: "record timestamp 9223372036854775807 ms out of range", at: "source"},
		{name: "record timestamp min int64", key: "c-1", value: `{"customer_id":"c-1","amount":1}`, noTS: true, kafkaTS: -1 << 63, want: "out of range", at: "source"},
		{name: "record timestamp -1", key: "c-1", value: `{"customer_id":"c-1","amount":1}`, noTS: true, kafkaTS: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := configs.Source{Topic: "orders", Key: "customer_id", Timestamp: "ts"}
			if tc.noTS {
				src.Timestamp = ""
			}
			p := newHostilePipeline(t, src)
			key, value := []byte(tc.key), []byte(tc.value)
			if tc.key == nullKey {
				key = nil
			}
			if tc.value == nullKey {
				value = nil
			}
			ts := tc.kafkaTS
			if ts == 0 {
				ts = 5
			}
			at, err := p.run(key, value, ts)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%s failed: %v; want the record processed", at, err)
				}
				return
			}
			var oe *Error
			if !errors.As(err, &oe) {
				t.Fatalf("error %T %v, want an *Error containing %q", err, err, tc.want)
			}
			if !strings.Contains(oe.Reason, tc.want) {
				t.Errorf("%s: reason %.300q, want it to contain %q", at, oe.Reason, tc.want)
			}
			if tc.at != "" && at != tc.at {
				t.Errorf("failed at %s, want at %s (%.200v)", at, tc.at, err)
			}
		})
	}
}

// hostilePipeline is a source, a filter, a map and an aggregate, as the runtime chains them.
type hostilePipeline struct {
	src    *Source
	stages []Stage
	agg    *Aggregate
}

func newHostilePipeline(t *testing.T, cfg configs.Source) *hostilePipeline {
	t.Helper()
	p := &hostilePipeline{src: mustSource(t, cfg), agg: mustAggregate(t, aggCfg(map[string]map[string]any{
		"amount": {"sum": "amount"}, "lo": {"min": "amount"}, "n": {"count": map[string]any{}},
	}))}
	f, err := NewFilter("filter", configs.Filter{Expr: "amount >= 0"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMap("map", configs.Map{Set: map[string]string{"double": "amount * 2"}})
	if err != nil {
		t.Fatal(err)
	}
	p.stages = []Stage{f, m}
	return p
}

// run processes one record and returns where it failed ("source", a stage's name, "totals").
func (p *hostilePipeline) run(key, value []byte, ts int64) (string, error) {
	var r Record
	if err := p.src.Decode(key, value, ts, &r); err != nil {
		return "source", err
	}
	for _, st := range p.stages {
		keep, err := st.Apply(&r)
		if err != nil {
			return st.Name(), err
		}
		if !keep {
			return st.Name(), nil
		}
	}
	state := make([]byte, p.agg.StateSize())
	p.agg.InitState(state)
	in, err := p.agg.Project(&r, nil)
	if err != nil {
		return p.agg.Name(), err
	}
	p.agg.Fold(state, in)
	_ = p.agg.Render(r.Key, state, nil)
	return "", nil
}
