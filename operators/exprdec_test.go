package operators

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

func TestParseDec(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" = error
		err      error
	}{
		{"0", "0", nil},
		{"-0", "0", nil},
		{"-0.000", "0", nil},
		{"0e99999999999999999999", "0", nil},
		{"1", "1", nil},
		{"123.4500", "123.45", nil},
		{"-0.5", "-0.5", nil},
		{"1e3", "1000", nil},
		{"1E+3", "1000", nil},
		{"1.5e-3", "0.0015", nil},
		{"100e-2", "1", nil},
		{"0.000001", "0.000001", nil},
		{"0.0000001", "1e-7", nil},
		{"12345678901234567890.123456789", "12345678901234567890.123456789", nil},
		{"-9223372036854775808", "-9223372036854775808", nil},
		{"9223372036854775808", "9223372036854775808", nil},
		{"100000000000000000000", "100000000000000000000", nil},
		{"1000000000000000000000", "1e+21", nil},
		{"1e10000", "1e+10000", nil},
		{"1e-10000", "1e-10000", nil},
		{"123e-10000", "1.23e-9998", nil}, // the bound is on the exponent of the coefficient 123
		{"123e-10001", "", errDecRange},
		{"1e10001", "", errDecRange},
		{"0.1e-9999", "1e-10000", nil},
		{strings.Repeat("9", 1000), strings.Repeat("9", 1000), nil},
		{strings.Repeat("9", 1000) + "000", strings.Repeat("9", 1000) + "000", nil},
		{strings.Repeat("9", 1001), "", errDecRange},
		{"0." + strings.Repeat("0", 9000) + "1", "1e-9001", nil},
		{"", "", errDecSyntax},
		{"-", "", errDecSyntax},
		{"+1", "", errDecSyntax},
		{"01", "", errDecSyntax},
		{"1.", "", errDecSyntax},
		{".5", "", errDecSyntax},
		{"1e", "", errDecSyntax},
		{"1 ", "", errDecSyntax},
		{"NaN", "", errDecSyntax},
	} {
		d, err := parseDec([]byte(tc.in))
		if err != tc.err {
			t.Errorf("parseDec(%.40q) error = %v, want %v", tc.in, err, tc.err)
			continue
		}
		if err == nil {
			if got := d.String(); got != tc.want {
				t.Errorf("parseDec(%.40q) = %.60s, want %.60s", tc.in, got, tc.want)
			}
		}
	}
}

func TestDecRound(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		mode roundMode
		want string
	}{
		{"2.5", 0, roundHalfEven, "2"},
		{"3.5", 0, roundHalfEven, "4"},
		{"2.5", 0, roundHalfAway, "3"},
		{"-2.5", 0, roundHalfAway, "-3"},
		{"-2.5", 0, roundHalfEven, "-2"},
		{"2.4999999999999999999999", 0, roundHalfAway, "2"},
		{"-1.2", 0, roundFloor, "-2"},
		{"-1.2", 0, roundCeil, "-1"},
		{"-1.2", 0, roundDown, "-1"},
		{"1.2", 0, roundCeil, "2"},
		{"1.005", 2, roundHalfAway, "1.01"},
		{"1250", -2, roundHalfAway, "1300"},
		{"1250", -2, roundHalfEven, "1200"},
		{"9.99", 1, roundHalfAway, "10"},
		{"1e-5000", 0, roundCeil, "1"},
		{"1e-5000", 0, roundHalfAway, "0"},
		{"-1e-5000", 2, roundFloor, "-0.01"},
		{"123456789012345678901234567890.5", 0, roundHalfEven, "123456789012345678901234567890"},
		{"123456789012345678901234567891.5", 0, roundHalfEven, "123456789012345678901234567892"},
		{"-9223372036854775807.5", 0, roundHalfAway, "-9223372036854775808"},
		{"9223372036854775807.5", 0, roundHalfAway, "9223372036854775808"},
	} {
		d, err := parseDec([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := decRound(d, tc.n, tc.mode)
		if err != nil || got.String() != tc.want {
			t.Errorf("decRound(%s, %d, %d) = %s, %v; want %s", tc.in, tc.n, tc.mode, got, err, tc.want)
		}
	}
}

// TestDecLimits: results beyond the range are errors, found without building huge numbers.
func TestDecLimits(t *testing.T) {
	huge, _ := parseDec([]byte("1e10000"))
	tiny, _ := parseDec([]byte("1e-10000"))
	if _, err := decAdd(huge, tiny); err != errDecRange {
		t.Errorf("1e10000 + 1e-10000: %v, want %v", err, errDecRange)
	}
	if _, err := decMul(huge, huge); err != errDecRange {
		t.Errorf("1e10000 * 1e10000: %v", err)
	}
	if d, err := decMul(huge, tiny); err != nil || d.String() != "1" {
		t.Errorf("1e10000 * 1e-10000 = %v, %v", d, err)
	}
	if _, err := decQuo(huge, decInt(3)); err != errDecRange {
		t.Errorf("1e10000 / 3: %v", err)
	}
	if d, err := decQuo(tiny, decInt(3)); err != nil || !d.isZero() {
		t.Errorf("1e-10000 / 3 = %v, %v; want 0", d, err)
	}
	if _, err := decPow(decInt(3), math.MaxInt64); err != errDecRange {
		t.Errorf("3 ** MaxInt64: %v", err)
	}
	if d, err := decPow(decInt(-1), math.MaxInt64); err != nil || d.String() != "-1" {
		t.Errorf("-1 ** MaxInt64 = %v, %v", d, err)
	}
	if d, err := decPow(huge, 1); err != nil || d.String() != "1e+10000" {
		t.Errorf("1e10000 ** 1 = %v, %v", d, err)
	}
	if _, err := decPow(huge, 2); err != errDecRange {
		t.Errorf("1e10000 ** 2: %v", err)
	}
}

// FuzzExprDecimal checks the expressions' decimals against big.Rat: parseDec accepts exactly
// the JSON number grammar and reads the exact value; the text appendDec writes is canonical
// and reads back to the same decimal; float() is strconv.ParseFloat of the text; + - * / and
// comparisons of two numbers are exact (/ rounded half to even to quoScale digits when it does
// not terminate).
func FuzzExprDecimal(f *testing.F) {
	for _, s := range [][2]string{
		{"0", "1"}, {"468715", "0.908"}, {"-0.5", "3"}, {"1e-7", "1e21"}, {"2", "3"}, {"1", "1024"},
		{"9223372036854775807", "9223372036854775807"}, {"-9223372036854775808", "-1"},
		{"123456789012345678901234567890.5", "-7e-30"}, {"1e10000", "1e-10000"}, {"01", "1."},
		{"0.1", "0.2"}, {"1e400", "7"}, {"5e-324", "1.7976931348623157e308"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		x, xr, ok := checkDec(t, a)
		if !ok {
			return
		}
		y, yr, ok := checkDec(t, b)
		if !ok {
			return
		}
		if got, want := decCmp(x, y), xr.Cmp(yr); got != want {
			t.Fatalf("decCmp(%s, %s) = %d, want %d", a, b, got, want)
		}
		check := func(op string, d decimal, err error, want *big.Rat) {
			if err == errDecRange {
				return // the oracle may be beyond the range
			}
			if err != nil {
				t.Fatalf("%s %s %s: %v", a, op, b, err)
			}
			if got := decRat(d); got.Cmp(want) != 0 {
				t.Fatalf("%s %s %s = %s, want %s", a, op, b, d, want.RatString())
			}
		}
		if len(a)+len(b) > 200 && xr.Denom().BitLen()+yr.Denom().BitLen()+xr.Num().BitLen()+yr.Num().BitLen() > 20000 {
			return // keep the oracle cheap
		}
		d, err := decAdd(x, y)
		check("+", d, err, new(big.Rat).Add(xr, yr))
		d, err = decSub(x, y)
		check("-", d, err, new(big.Rat).Sub(xr, yr))
		d, err = decMul(x, y)
		check("*", d, err, new(big.Rat).Mul(xr, yr))
		if yr.Sign() != 0 {
			d, err = decQuo(x, y)
			check("/", d, err, ratQuo(xr, yr, quoScale))
		} else if _, err := decQuo(x, y); err != errDivByZero {
			t.Fatalf("%s / 0: %v", a, err)
		}
	})
}

// checkDec parses s and checks it against the grammar, big.Rat and strconv; ok is false when
// s is not a number in range.
func checkDec(t *testing.T, s string) (decimal, *big.Rat, bool) {
	d, err := parseDec([]byte(s))
	if valid := isJSONNumber(s); valid != (err != errDecSyntax) {
		t.Fatalf("parseDec(%q) error %v, but JSON number syntax valid=%v", s, err, valid)
	}
	if err != nil {
		return decimal{}, nil, false
	}
	out := appendDec(nil, d)
	d2, err := parseDec(out)
	if err != nil || d2.c != d.c || d2.exp != d.exp || (d.big == nil) != (d2.big == nil) || d.big != nil && d.big.Cmp(d2.big) != 0 {
		t.Fatalf("round trip %q -> %q -> %+v, %v; want %+v", s, out, d2, err, d)
	}
	want := decRat(d)
	if e := exponentOf(s); e > -2000 && e < 2000 && len(s) < 2000 {
		r, ok := new(big.Rat).SetString(s)
		if !ok || r.Cmp(want) != 0 {
			t.Fatalf("parseDec(%q) = %s", s, out)
		}
	}
	if err := checkShortest(string(out), want); err != nil {
		t.Fatal(err)
	}
	f, _ := strconv.ParseFloat(s, 64)
	if g := d.float(); g != f {
		t.Fatalf("float(%q) = %v, want %v", s, g, f)
	}
	return d, want, true
}

// decRat is d as a big.Rat, from its representation (not its text).
func decRat(d decimal) *big.Rat {
	c := big.NewInt(d.c)
	if d.big != nil {
		c = d.big
	}
	r := new(big.Rat).SetInt(c)
	p := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(d.exp, -d.exp))), nil))
	if d.exp >= 0 {
		return r.Mul(r, p)
	}
	return r.Quo(r, p)
}
