package operators

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

// mapOut runs a map setting "v" to src over value and returns v's JSON text.
func mapOut(t testing.TB, src, value string) (string, error) {
	t.Helper()
	m, err := NewMap("m", configs.Map{Set: map[string]string{"v": src}})
	if err != nil {
		return "", err
	}
	r := decoded(t, "k", value, 5)
	if _, err := m.Apply(r); err != nil {
		return "", err
	}
	raw, ok, err := r.top("v")
	if !ok || err != nil {
		t.Fatalf("%s: no v in %s (%v)", src, r.Value, err)
	}
	return string(raw), nil
}

// TestNexmarkQ1 is the defect a user found: q1's `price * 0.908` wrote 425593.22000000003 for
// price 468715 (float64); 0.908 × 468715 is 425593.22 exactly. It checks every price of a
// range against big.Rat.
func TestNexmarkQ1(t *testing.T) {
	got, err := mapOut(t, "price * 0.908", `{"auction":1,"price":468715}`)
	if err != nil || got != "425593.22" {
		t.Fatalf("price * 0.908 = %s, %v; want 425593.22", got, err)
	}
	m, err := NewMap("q1", configs.Map{Set: map[string]string{"price": "price * 0.908"}})
	if err != nil {
		t.Fatal(err)
	}
	rate, _ := new(big.Rat).SetString("0.908")
	src := mustSource(t, configs.Source{Topic: "bids"})
	var r Record
	for price := int64(1); price < 1_000_000; price += 997 {
		if err := src.Decode(nil, fmt.Appendf(nil, `{"auction":7,"price":%d}`, price), 0, &r); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Apply(&r); err != nil {
			t.Fatal(err)
		}
		raw, _, _ := r.top("price")
		want := new(big.Rat).Mul(rate, new(big.Rat).SetInt64(price))
		if got, ok := new(big.Rat).SetString(string(raw)); !ok || got.Cmp(want) != 0 {
			t.Fatalf("price %d * 0.908 = %s, want %s", price, raw, want.FloatString(3))
		}
		if strings.HasSuffix(string(raw), "0") && strings.Contains(string(raw), ".") {
			t.Fatalf("price %d: %s has trailing zeros", price, raw)
		}
	}
}

func TestExprNumbers(t *testing.T) {
	const big = `{"x":123456789012345678901234567890,"hi":9223372036854775807,"lo":-9223372036854775808}`
	for _, tc := range []struct {
		expr, value, want string // want: the JSON result, or "error: ..." (a substring)
	}{
		// Exact decimal arithmetic; literals are decimals from their text.
		{"0.1 + 0.2", `{}`, "0.3"},
		{"x + 0.2", `{"x":0.1}`, "0.3"},
		{"x - 0.3", `{"x":0.1}`, "-0.2"},
		{"x * 3", `{"x":0.1}`, "0.3"},
		{"x * 1.0", `{"x":1.50}`, "1.5"},
		{"x", `{"x":1.50}`, "1.5"}, // a decimal member is rewritten shortest
		{"1e-3 + x", `{"x":0}`, "0.001"},
		{"0.1000000000000000000001 - 0.1", `{}`, "1e-22"}, // the literal's text, not its float64
		{"9223372036854775808.0 - 1", `{}`, "9223372036854775807"},
		{"-x", `{"x":0.5}`, "-0.5"},
		{"-0.0", `{}`, "0"},
		{"x * 2", `{"x":-0.0}`, "0"},
		// Ints stay ints; overflow gives the exact decimal.
		{"x + 1", `{"x":41}`, "42"},
		{"hi + 1", big, "9223372036854775808"},
		{"lo - 1", big, "-9223372036854775809"},
		{"-lo", big, "9223372036854775808"},
		{"hi * hi", big, "85070591730234615847396907784232501249"},
		{"x + 1", big, "123456789012345678901234567891"}, // beyond int64: a decimal
		{"x - x", big, "0"},
		{"ts * 1000000000000000000", `{}`, "5000000000000000000"},
		{"ts * 1000000000000000000 * 10", `{}`, "50000000000000000000"},
		// Division: exact when it terminates, else half to even at 18 fractional digits.
		{"x / 2", `{"x":7}`, "3.5"},
		{"x / 4", `{"x":8}`, "2"},
		{"1 / 8", `{}`, "0.125"},
		{"x / 3", `{"x":1}`, "0.333333333333333333"},
		{"x / 3", `{"x":2}`, "0.666666666666666667"},
		{"x / 3", `{"x":-2}`, "-0.666666666666666667"},
		{"x / 7", `{"x":1e-17}`, "1e-18"}, // 1.428...e-18 rounds to 1e-18
		{"x / 3", `{"x":1e-18}`, "0"},     // 0.333e-18 rounds to 0
		{"x / 2", `{"x":1e-30}`, "5e-31"}, // terminates: exact, whatever the scale
		{"1 / 2 ** 70", `{}`, "8.470329472543003390683225006796419620513916015625e-22"},
		{"x / 0", `{"x":1}`, "error: division by zero"},
		{"x / y", `{"x":1,"y":0.0}`, "error: division by zero"},
		// %: integers.
		{"x % 3", `{"x":10}`, "1"},
		{"x % 3", `{"x":-7}`, "-1"},
		{"x % 1000", big, "890"},
		{"-x % 7", big, "0"}, // 123456789012345678901234567890 = 7 × 17636684144620811271604938270
		{"(x + 3) % -7", big, "3"},
		{"(-x - 3) % 7", big, "-3"},
		{"x % 2", `{"x":7.5}`, "error: % takes integers"},
		{"x % 0", `{"x":7}`, "error: division by zero"},
		// Powers.
		{"2 ** 10", `{}`, "1024"},
		{"x ** 100", `{"x":2}`, "1267650600228229401496703205376"},
		{"x ** -2", `{"x":2}`, "0.25"},
		{"x ** 2", `{"x":1.5}`, "2.25"},
		{"x ^ 3", `{"x":-0.1}`, "-0.001"},
		{"x ** 0.5", `{"x":2}`, "error: the exponent must be an integer"},
		{"float(x) ** 0.5", `{"x":4}`, "2"},
		{"x ** 5000", `{"x":3}`, "error: number out of range"},
		// Floats only when asked for; mixing gives floats.
		{"float(0.1) + 0.2", `{}`, "0.30000000000000004"},
		{"float(x) * 3", `{"x":0.1}`, "0.30000000000000004"},
		{"float(x) / 0", `{"x":1}`, "error: result +Inf is not a JSON number"},
		// Builtins.
		{"round(2.5)", `{}`, "3"},
		{"round(-2.5)", `{}`, "-3"},
		{"round(x, 2)", `{"x":1.005}`, "1.01"}, // float64 1.005 is below 1.005: math.Round would give 1
		{"round(x, 2)", `{"x":1.004999}`, "1"},
		{"round(x, -2)", `{"x":1250}`, "1300"},
		{"round(x, 1)", `{"x":7}`, "7"},
		{"round(float(x), 2)", `{"x":2.675}`, "2.68"},
		{"int(x)", `{"x":-7.9}`, "-7"},
		{"int(x)", big, "error: out of the int range"},
		{"int('12')", `{}`, "12"},
		{"float(x)", `{"x":0.1}`, "0.1"},
		{"ceil(x)", `{"x":1.2}`, "2"},
		{"floor(x)", `{"x":-1.2}`, "-2"},
		{"floor(x)", `{"x":7}`, "7"},
		{"abs(x)", `{"x":-0.5}`, "0.5"},
		{"abs(lo)", big, "9223372036854775808"},
		{"max(1, x, 0.5)", `{"x":2.5}`, "2.5"},
		{"min([3, x, 1])", `{"x":0.5}`, "0.5"},
		{"max(x)", `{"x":[1,2.25,-3]}`, "2.25"},
		{"sum(x)", `{"x":[0.1,0.2,3]}`, "3.3"},
		{"sum(x, .p * 2)", `{"x":[{"p":0.1},{"p":0.2}]}`, "0.6"},
		{"sum(x)", `{"x":[]}`, "0"},
		{"mean(x)", `{"x":[1,2]}`, "1.5"},
		{"mean(x)", `{"x":[1,1,2]}`, "1.333333333333333333"},
		{"median(x)", `{"x":[3,1,2.5,10]}`, "2.75"},
		{"sort(x)", `{"x":[3,0.5,1,-2.25]}`, "[-2.25,0.5,1,3]"},
		{"sort(x, 'desc')", `{"x":["b","a","c"]}`, `["c","b","a"]`},
		{"sortBy(x, .p)", `{"x":[{"p":0.3},{"p":0.25}]}`, `[{"p":0.25},{"p":0.3}]`},
		{"type(x)", `{"x":0.5}`, `"decimal"`},
		{"type(x)", `{"x":5}`, `"int"`},
		{"string(x)", `{"x":0.50}`, `"0.5"`},
		{"toJSON(x)", `{"x":[0.50,1]}`, `"[\n  0.5,\n  1\n]"`},
		{"fromJSON('{\"a\": 0.1}').a + 0.2", `{}`, "0.3"},
		{"reduce(x, #acc + #, 0)", `{"x":[0.1,0.2]}`, "0.3"},
		// Composite results hold decimals exactly.
		{"[x + 0.2, 1, 'a']", `{"x":0.1}`, `[0.3,1,"a"]`},
		{"{'a': x * 2}", `{"x":0.15}`, `{"a":0.3}`},
		// Output form: exponent below 1e-6 and from 1e21.
		{"x * 1", `{"x":0.000001}`, "0.000001"},
		{"x * 1", `{"x":0.0000001}`, "1e-7"},
		{"x * 1", `{"x":123456789012345678901.5}`, "123456789012345678901.5"},
		{"x * 10", `{"x":10000000000000000000}`, "100000000000000000000"},
		{"x * 10", `{"x":100000000000000000000}`, "1e+21"},
		{"x * 10", `{"x":100000000000000000001}`, "1000000000000000000010"},
		{"x * 1", `{"x":1.5e21}`, "1500000000000000000000"},
		{"x * 1", `{"x":1e400}`, "1e+400"},
		{"x * 1", `{"x":-1.25e-7}`, "-1.25e-7"},
		// Other types keep expr-lang's behaviour.
		{"'a' + 'b'", `{}`, `"ab"`},
		{"x + 'a'", `{"x":0.5}`, "error: invalid operation: decimal + string"},
		{"x * 2", `{"x":"3"}`, "error: invalid operation: string * int"},
		{"x + 1", `{"x":null}`, "error: invalid operation: <nil> + int"},
		{"x ?? 0.5", `{}`, "0.5"},
		{"x > 1 ? x : 0.5", `{"x":1.5}`, "1.5"},
	} {
		got, err := mapOut(t, tc.expr, tc.value)
		if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s on %s: %s, error %v; want an *Error containing %q", tc.expr, tc.value, got, err, want)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s on %s = %s, %v; want %s", tc.expr, tc.value, got, err, tc.want)
		}
	}
}

func TestExprComparisons(t *testing.T) {
	for _, tc := range []struct {
		expr, value string
		want        bool
	}{
		{"0.1 + 0.2 == 0.3", `{}`, true},
		{"x == 1", `{"x":1.0}`, true},
		{"x == 1.00", `{"x":1}`, true},
		{"x != 0.3", `{"x":0.30000000000000004}`, true},
		{"x < 0.1000000000000000000001", `{"x":0.1}`, true},
		{"x > 9223372036854775807", `{"x":9223372036854775808}`, true},
		{"x < -9223372036854775807 - 1", `{"x":-9223372036854775809}`, true},
		{"x >= 100", `{"x":1e2}`, true},
		{"x <= -0.5", `{"x":-0.5}`, true},
		{"x > 1e-400", `{"x":0}`, false},
		{"x > 0", `{"x":1e-400}`, true},
		{"float(x) == 0.1", `{"x":0.1}`, true}, // mixing with a float compares floats
		{"float(x) == x", `{"x":0.1}`, true},
		{"x in [0.3, 2]", `{"x":0.30}`, true},
		{"x in [1, 2]", `{"x":2.0}`, true},
		{"x in 1..3", `{"x":2.0}`, true},
		{"x not in [0.3]", `{"x":0.31}`, true},
		{"[x, 0.5] == [0.25 * 4, 0.50]", `{"x":1}`, true},
		{"y == {'a': 0.5}", `{"y":{"a":0.50}}`, true},
		{"x == 'a'", `{"x":0.5}`, false},
		{"x == nil", `{"x":0.5}`, false},
		{"n % 2 == 1", `{"n":7}`, true},
		{"key > 'j'", `{}`, true},
		{"count(x, # > 0.15) == 1", `{"x":[0.1,0.2]}`, true},
		{"-x < 0", `{"x":0.5}`, true},
		{"abs(x) == 1.5", `{"x":-1.5}`, true},
	} {
		f, err := NewFilter("f", configs.Filter{Expr: tc.expr})
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		keep, err := f.Apply(decoded(t, "k", tc.value, 5))
		if err != nil || keep != tc.want {
			t.Errorf("%s on %s = %v, %v; want %v", tc.expr, tc.value, keep, err, tc.want)
		}
	}
}

func TestExprCompileErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"x / 0 > 1", ""}, // not constant: an error per record
		{"1 / 0 > 1", "operators: f: expr: division by zero (1:3)"},
		{"1 % 0.5 > 0", "operators: f: expr: invalid operation: % (mismatched types int and float64)"},
		{"round(x, 1, 2) > 0", "invalid number of arguments for round (expected 1 or 2, got 3)"},
		{"max() > 0", "invalid number of arguments for max (expected at least 1, got 0)"},
		{"1.5 + 2.5", "expected bool, but got float64"},
	} {
		_, err := NewFilter("f", configs.Filter{Expr: tc.expr})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.expr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.expr, err, tc.want)
		}
	}
	// Names of builtins are not record members to decode.
	m, err := NewMap("m", configs.Map{Set: map[string]string{"v": "round(max(a, b), 1)"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*mapStage).env.names; strings.Join(got, ",") != "a,b" {
		t.Errorf("decoded members %v, want [a b]", got)
	}
}

// TestExprArithmeticOracle runs random decimals (random digits, scales and spellings, ints
// and big integers among them) through a map computing + - * / and a filter per comparison,
// and checks every result against big.Rat arithmetic done here: + - * exact; / exact when the
// quotient terminates, else rounded half to even to quoScale digits; the text written parses
// back to the same value and is in the shortest form.
func TestExprArithmeticOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m, err := NewMap("m", configs.Map{Set: map[string]string{
		"add": "a + b", "sub": "a - b", "mul": "a * b", "quo": "b == 0 ? nil : a / b", "neg": "-a",
		"round2": "round(a, 2)", "round_1": "round(a, -1)",
	}})
	if err != nil {
		t.Fatal(err)
	}
	cmps := map[string]func(int) bool{
		"a < b": func(c int) bool { return c < 0 }, "a <= b": func(c int) bool { return c <= 0 },
		"a > b": func(c int) bool { return c > 0 }, "a >= b": func(c int) bool { return c >= 0 },
		"a == b": func(c int) bool { return c == 0 }, "a != b": func(c int) bool { return c != 0 },
	}
	filters := map[string]Stage{}
	for e := range cmps {
		if filters[e], err = NewFilter("f", configs.Filter{Expr: e}); err != nil {
			t.Fatal(err)
		}
	}
	src := mustSource(t, configs.Source{Topic: "t"})
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		at, a := randDecimal(rng)
		bt, b := randDecimal(rng)
		if rng.IntN(8) == 0 {
			bt, b = at, a
		}
		value := fmt.Sprintf(`{"a":%s,"b":%s}`, at, bt)
		var r Record
		if err := src.Decode(nil, []byte(value), 0, &r); err != nil {
			t.Fatal(err)
		}
		c := a.Cmp(b)
		for e, f := range filters {
			keep, err := f.Apply(&r)
			if err != nil || keep != cmps[e](c) {
				t.Fatalf("%s on %s = %v, %v; want %v", e, value, keep, err, cmps[e](c))
			}
		}
		if _, err := m.Apply(&r); err != nil {
			t.Fatalf("%s: %v", value, err)
		}
		want := map[string]*big.Rat{
			"add":     new(big.Rat).Add(a, b),
			"sub":     new(big.Rat).Sub(a, b),
			"mul":     new(big.Rat).Mul(a, b),
			"neg":     new(big.Rat).Neg(a),
			"round2":  ratRoundHalfAway(a, 2),
			"round_1": ratRoundHalfAway(a, -1),
		}
		if b.Sign() != 0 {
			want["quo"] = ratQuo(a, b, quoScale)
		}
		for name, w := range want {
			raw, _, _ := r.top(name)
			got, ok := new(big.Rat).SetString(string(raw))
			if !ok || got.Cmp(w) != 0 {
				t.Fatalf("%s on %s = %s, want %s", name, value, raw, w.RatString())
			}
			if err := checkShortest(string(raw), w); err != nil {
				t.Fatalf("%s on %s: %v", name, value, err)
			}
		}
	}
}

// randDecimal returns a random JSON number and its value: ints, decimals of up to 40 digits
// and scales from -12 to 30, spelled with trailing zeros or exponents.
func randDecimal(rng *rand.Rand) (string, *big.Rat) {
	nd := 1 + rng.IntN(18)
	if rng.IntN(5) == 0 {
		nd = 1 + rng.IntN(40)
	}
	digits := make([]byte, nd)
	for i := range digits {
		digits[i] = byte('0' + rng.IntN(10))
	}
	if rng.IntN(3) == 0 { // short coefficients: values that divide evenly, ties
		digits = digits[:1+rng.IntN(min(3, nd))]
	}
	coef, _ := new(big.Int).SetString(string(digits), 10)
	if rng.IntN(2) == 0 {
		coef.Neg(coef)
	}
	scale := rng.IntN(43) - 12 // value = coef × 10^-scale
	v := new(big.Rat).SetInt(coef)
	if scale >= 0 {
		v.Quo(v, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	} else {
		v.Mul(v, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil)))
	}
	switch rng.IntN(3) {
	case 0: // exponent form of the coefficient
		return fmt.Sprintf("%se%d", coef, -scale), v
	case 1: // plain, with trailing zeros
		extra := rng.IntN(3)
		if scale+extra <= 0 {
			return v.FloatString(0), v
		}
		return v.FloatString(scale + extra), v
	}
	return v.FloatString(max(scale, 0)), v
}

// ratQuo is a/b when its decimal expansion terminates, else a/b rounded half to even to scale
// fractional digits.
func ratQuo(a, b *big.Rat, scale int) *big.Rat {
	q := new(big.Rat).Quo(a, b)
	den := new(big.Int).Set(q.Denom())
	for _, p := range []int64{2, 5} {
		for new(big.Int).Rem(den, big.NewInt(p)).Sign() == 0 {
			den.Quo(den, big.NewInt(p))
		}
	}
	if den.Cmp(big.NewInt(1)) == 0 {
		return q
	}
	unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)
	x := new(big.Rat).Mul(new(big.Rat).Abs(q), new(big.Rat).SetInt(unit)) // |q| × 10^scale
	fl, rem := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	twice := new(big.Int).Lsh(rem, 1)
	if c := twice.Cmp(x.Denom()); c > 0 || c == 0 && fl.Bit(0) == 1 {
		fl.Add(fl, big.NewInt(1))
	}
	if q.Sign() < 0 {
		fl.Neg(fl)
	}
	return new(big.Rat).SetFrac(fl, unit)
}

// ratRoundHalfAway rounds v to n fractional digits (n < 0: to 10^-n), half away from zero.
func ratRoundHalfAway(v *big.Rat, n int) *big.Rat {
	unit := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(n, -n))), nil))
	if n < 0 {
		unit.Inv(unit)
	}
	x := new(big.Rat).Mul(new(big.Rat).Abs(v), unit) // |v| in units of 10^-n
	x.Add(x, big.NewRat(1, 2))
	fl := new(big.Int).Quo(x.Num(), x.Denom()) // floor(|v| × 10^n + 1/2)
	if v.Sign() < 0 {
		fl.Neg(fl)
	}
	return new(big.Rat).Quo(new(big.Rat).SetInt(fl), unit)
}

// checkShortest checks that s is v written shortest: the significant digits, plain unless
// that takes more than 20 zeros after them (integers) or 5 after the point; else one digit, a
// point, the other digits and an exponent; no trailing zeros after a point, no leading zeros.
func checkShortest(s string, v *big.Rat) error {
	if v.Sign() == 0 {
		if s != "0" {
			return fmt.Errorf("zero written %q", s)
		}
		return nil
	}
	abs := new(big.Rat).Abs(v)
	plain := abs.Cmp(big.NewRat(1, 1_000_000)) >= 0
	if abs.IsInt() {
		digits := abs.Num().String()
		plain = len(digits)-len(strings.TrimRight(digits, "0")) <= 20
	}
	mant, exp, isExp := strings.Cut(strings.TrimPrefix(s, "-"), "e")
	if isExp == plain {
		return fmt.Errorf("%q: plain form expected %v", s, plain)
	}
	if isExp {
		if len(mant) == 0 || mant[0] < '1' || mant[0] > '9' || len(mant) > 1 && mant[1] != '.' {
			return fmt.Errorf("%q: mantissa not d.ddd", s)
		}
		if _, err := strconv.Atoi(exp); err != nil || exp[0] != '+' && exp[0] != '-' {
			return fmt.Errorf("%q: exponent", s)
		}
	}
	if strings.Contains(mant, ".") && strings.HasSuffix(mant, "0") {
		return fmt.Errorf("%q: trailing zeros", s)
	}
	if len(mant) > 1 && mant[0] == '0' && mant[1] != '.' {
		return fmt.Errorf("%q: leading zeros", s)
	}
	return nil
}

// BenchmarkExprNumbers: a map's per-record cost (decode, apply) for typical numeric
// expressions over decimals and ints, and one over big decimals.
func BenchmarkExprNumbers(b *testing.B) {
	for _, bc := range []struct{ name, expr, value string }{
		{"q1", "price * 0.908", `{"auction":1,"bidder":2,"price":468715,"dateTime":1767225600000}`},
		{"int", "price + 1", `{"auction":1,"bidder":2,"price":468715,"dateTime":1767225600000}`},
		{"quo", "amount / 3", `{"amount":123.45}`},
		{"round", "round(amount * 1.19, 2)", `{"amount":123.45}`},
		{"big", "amount * amount", `{"amount":123456789012345678901234567890.5}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m, err := NewMap("m", configs.Map{Set: map[string]string{"v": bc.expr}})
			if err != nil {
				b.Fatal(err)
			}
			src := mustSource(b, configs.Source{Topic: "t"})
			value := []byte(bc.value)
			var r Record
			b.ReportAllocs()
			for b.Loop() {
				if err := src.Decode(nil, value, 0, &r); err != nil {
					b.Fatal(err)
				}
				if _, err := m.Apply(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
