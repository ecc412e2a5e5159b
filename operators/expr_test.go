package operators

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

func decoded(t testing.TB, key, value string, ts int64) *Record {
	t.Helper()
	src := mustSource(t, configs.Source{Topic: "t"})
	r := &Record{}
	if err := src.Decode([]byte(key), []byte(value), ts, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"syntax", second(NewFilter("big", configs.Filter{Expr: "amount >"})), "operators: big: expr: unexpected token EOF"},
		{"not bool", second(NewFilter("big", configs.Filter{Expr: "1 + 2"})), "operators: big: expr: expected bool, but got int"},
		{"empty", second(NewFilter("big", configs.Filter{Expr: "  "})), "operators: big: expr: empty expression"},
		{"now disabled", second(NewFilter("big", configs.Filter{Expr: "now() > 0"})), "operators: big: expr: unknown function now()"},
		{"unknown function", second(NewFilter("big", configs.Filter{Expr: "foo(amount)"})), "operators: big: expr: unknown function foo()"},
		{"key is a string", second(NewFilter("big", configs.Filter{Expr: "key > 1"})), "operators: big: expr: invalid operation: > (mismatched types string and int)"},
		{"map syntax", second(NewMap("eur", configs.Map{Set: map[string]string{"x": "amount *"}})), "operators: eur: expr: unexpected token EOF"},
		{"map empty", second(NewMap("eur", configs.Map{})), "operators: eur: map sets no fields"},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want prefix %q", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		expr, value string
		keep        bool
		wantErr     string
	}{
		{"amount > 100", ordersValue, true, ""},
		{"amount > 200", ordersValue, false, ""},
		{"amount > 100 && key == 'c-0000042' && ts == 5", ordersValue, true, ""},
		{"ts == 5", `{"ts":1767225600000}`, true, ""}, // ts is the event time, not the member
		{"customer.tier == 'gold' && len(items) == 2 && items[1].qty > 1", `{"customer":{"tier":"gold"},"items":[{"qty":1},{"qty":2}]}`, true, ""},
		{"name == 'a\"b'", `{"name":"a\u0022b"}`, true, ""},
		{"n % 2 == 1", `{"n":7}`, true, ""}, // integers are ints
		{"n == 7.5", `{"n":7.5}`, true, ""}, // other numbers exact decimals
		{"flag && x == nil", `{"flag":true,"x":null}`, true, ""},
		{"missing == nil", `{}`, true, ""},
		{`$env["order-id"] == "o-1"`, `{"order-id":"o-1"}`, true, ""},
		{"amount > 100", `{"amount":"lots"}`, false, "operators: big: expr: invalid operation: string > int (1:8)"},
		{"amount > 100", `{"other":1}`, false, "(missing fields: amount)"},
		{"amount + 1", `{"amount":1}`, false, "operators: big: expr: "},
	} {
		f, err := NewFilter("big", configs.Filter{Input: "orders", Expr: tc.expr})
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if f.Name() != "big" {
			t.Errorf("Name = %q", f.Name())
		}
		keep, err := f.Apply(decoded(t, "c-0000042", tc.value, 5))
		if tc.wantErr != "" {
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s on %s: error = %v, want *Error containing %q", tc.expr, tc.value, err, tc.wantErr)
			}
			continue
		}
		if err != nil || keep != tc.keep {
			t.Errorf("%s on %s = %v, %v; want %v", tc.expr, tc.value, keep, err, tc.keep)
		}
	}
}

func TestMap(t *testing.T) {
	for _, tc := range []struct {
		set     map[string]string
		value   string
		want    string
		wantErr string
	}{
		{map[string]string{"amount_eur": "amount * 0.5"}, ordersValue,
			`{"order_id":"o-000000001234","customer_id":"c-0000042","amount":123.45,"ts":1767225600000,"amount_eur":61.725}`, ""},
		{map[string]string{"amount": "amount * 2", "big": "amount > 100"}, ` { "amount" : 60 , "x" : [1, 2] } `,
			`{"amount":120,"x":[1, 2],"big":false}`, ""}, // simultaneous: big sees the input amount
		{map[string]string{"a": "'é\"\\n' + key", "b": "nil", "c": "[1, 'x']", "d": "{'k': 1}", "e": "ts"}, `{}`,
			`{"a":"é\"\nk1","b":null,"c":[1,"x"],"d":{"k":1},"e":5}`, ""},
		{map[string]string{"a": "2"}, `{"a":1,"b":2,"a":3}`, `{"b":2,"a":2}`, ""}, // duplicates collapse to the last
		{map[string]string{"a": "a"}, `{"\u0061":1}`, `{"\u0061":1}`, ""},         // escaped names match
		// Exact decimals, written as encoding/json writes floats (exponent form below 1e-6 and from
		// 1e21); 0.1 + 0.2 was 0.30000000000000004 in float64.
		{map[string]string{"f": "1e-7 * 1.0", "g": "1e21 * 1.0", "h": "0.1 + 0.2"}, `{}`, `{"f":1e-7,"g":1e+21,"h":0.3}`, ""},
		{map[string]string{"z": "x / 0"}, `{"x":1.0}`, "", "set z: expr: division by zero (1:3)"},
		{map[string]string{"z": "float(x) / 0"}, `{"x":1.0}`, "", "set z: result +Inf is not a JSON number"},
		{map[string]string{"z": "x.y"}, `{"x":1}`, "", "operators: eur: set z: expr: "},
	} {
		m, err := NewMap("eur", configs.Map{Input: "orders", Set: tc.set})
		if err != nil {
			t.Fatalf("%v: %v", tc.set, err)
		}
		r := decoded(t, "k1", tc.value, 5)
		keep, err := m.Apply(r)
		if tc.wantErr != "" {
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error = %v, want *Error containing %q", tc.set, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !keep {
			t.Fatalf("%v: Apply = %v, %v", tc.set, keep, err)
		}
		if string(r.Value) != tc.want {
			t.Errorf("%v:\n got %s\nwant %s", tc.set, r.Value, tc.want)
		}
		if string(r.Key) != "k1" || r.Time != 5 {
			t.Errorf("map changed Key/Time to %q/%d", r.Key, r.Time)
		}
	}
}

// TestChain runs decode -> map -> map -> filter -> project, checking the index follows Value.
func TestChain(t *testing.T) {
	src := mustSource(t, configs.Source{Topic: "orders", Key: "customer_id", Timestamp: "ts"})
	m1, err := NewMap("m1", configs.Map{Set: map[string]string{"amount": "amount * 2"}})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewMap("m2", configs.Map{Set: map[string]string{"amount": "amount + 0.5", "tag": "'x'"}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFilter("f", configs.Filter{Expr: "amount > 200 && tag == 'x'"})
	if err != nil {
		t.Fatal(err)
	}
	a := mustAggregate(t, ordersAgg())
	var r Record
	var in []byte
	state := make([]byte, a.StateSize())
	a.InitState(state)
	for i := range 3 { // reuse the Record: the map buffers alternate
		if err := src.Decode([]byte("c-0000042"), []byte(ordersValue), 0, &r); err != nil {
			t.Fatal(err)
		}
		for _, s := range []Stage{m1, m2, f} {
			keep, err := s.Apply(&r)
			if err != nil || !keep {
				t.Fatalf("round %d: %s: %v, %v", i, s.Name(), keep, err)
			}
		}
		if in, err = a.Project(&r, in[:0]); err != nil {
			t.Fatal(err)
		}
		a.Fold(state, in)
	}
	want := `{"key":"c-0000042","amount":742.2,"avg_amount":247.4,"max_amount":247.4,"min_amount":247.4,"orders":3}`
	if got := string(a.Render(r.Key, state, nil)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestMapCopiesWhole checks that a map whose set only adds members, copying a compact value
// whole, writes the bytes and the index the member-by-member copy writes: random objects
// (compact or spaced, duplicate and escaped names, nested values, empty), setting fields
// they have or not; the index must also be the one a parse of the new value gives.
func TestMapCopiesWhole(t *testing.T) {
	defer func(old bool) { mapCopiesWhole = old }(mapCopiesWhole)
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"a", "b", "price", `x\"y`, `\u0061`, "dateTime"}
	values := []string{"1", "-2.5", `"s"`, `"e\"sc\n"`, "null", "true", `{"k":[1,{"z":2}]}`, "[]"}
	for i := range 3000 {
		var b strings.Builder
		sp := func() {
			if rng.IntN(4) == 0 {
				b.WriteString([]string{" ", "\n", "\t "}[rng.IntN(3)])
			}
		}
		spaced := rng.IntN(2) == 0
		b.WriteString("{")
		for j := range rng.IntN(6) {
			if j > 0 {
				b.WriteString(",")
			}
			if spaced {
				sp()
			}
			b.WriteString(`"` + names[rng.IntN(len(names))] + `"`)
			if spaced {
				sp()
			}
			b.WriteString(":")
			if spaced {
				sp()
			}
			b.WriteString(values[rng.IntN(len(values))])
			if spaced {
				sp()
			}
		}
		b.WriteString("}")
		set := map[string]string{}
		for range 1 + rng.IntN(2) {
			set[[]string{"window_start", "a", "price", "w2"}[rng.IntN(4)]] = []string{"ts - ts % 10", "1.5", "'x'", "nil"}[rng.IntN(4)]
		}
		var outs [2]string
		var idxs [2][]member
		for w, whole := range []bool{false, true} {
			mapCopiesWhole = whole
			m, err := NewMap("m", configs.Map{Input: "in", Set: set})
			if err != nil {
				t.Fatal(err)
			}
			r := decoded(t, "k", b.String(), 12345)
			if keep, err := m.Apply(r); err != nil || !keep {
				t.Fatalf("%d: %s with %v: %v, %v", i, b.String(), set, keep, err)
			}
			idx, err := r.index()
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := indexObject(r.Value, nil)
			if err != nil || !slices.Equal(parsed, idx) {
				t.Fatalf("%d: %s with %v (whole %v): index %v, a parse of %s gives %v (%v)", i, b.String(), set, whole, idx, r.Value, parsed, err)
			}
			outs[w], idxs[w] = string(r.Value), slices.Clone(idx)
			// Independently: the input's members (the last of duplicates) with the set ones
			// replaced or added, as encoding/json reads both.
			want := decodeJSONMap(t, b.String())
			for f, e := range set {
				want[f] = map[string]any{"ts - ts % 10": json.Number("12340"), "1.5": json.Number("1.5"), "'x'": "x", "nil": nil}[e]
			}
			if got := decodeJSONMap(t, string(r.Value)); !reflect.DeepEqual(got, want) {
				t.Fatalf("%d: %s with %v (whole %v): %s reads as %v, want %v", i, b.String(), set, whole, r.Value, got, want)
			}
		}
		if outs[0] != outs[1] || !slices.Equal(idxs[0], idxs[1]) {
			t.Fatalf("%d: %s with %v: member by member %s %v, whole %s %v", i, b.String(), set, outs[0], idxs[0], outs[1], idxs[1])
		}
	}
}

// decodeJSONMap reads a JSON object with encoding/json, numbers as their text.
func decodeJSONMap(t *testing.T, s string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	m := map[string]any{}
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return m
}
