package operators

import (
	"encoding/json"
	"math/big"
	"strconv"
	"testing"
)

func TestParseRenderDecimal(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" = error
		err      error
	}{
		{"0", "0", nil},
		{"-0", "0", nil},
		{"-0.0", "0", nil},
		{"1", "1", nil},
		{"123.45", "123.45", nil},
		{"123.450000", "123.45", nil},
		{"-0.5", "-0.5", nil},
		{"-12.5", "-12.5", nil},
		{"1767225600000", "1767225600000", nil},
		{"1e3", "1000", nil},
		{"1E+3", "1000", nil},
		{"1.5e-3", "0.0015", nil},
		{"-2.5E-1", "-0.25", nil},
		{"0.000000001", "0.000000001", nil},
		{"1e-9", "0.000000001", nil},
		// Rounding half to even at the 10th fractional digit.
		{"0.0000000005", "0", nil},
		{"0.0000000015", "0.000000002", nil},
		{"0.0000000025", "0.000000002", nil},
		{"0.00000000250000000001", "0.000000003", nil},
		{"0.0000000024999", "0.000000002", nil},
		{"-0.0000000015", "-0.000000002", nil},
		{"-0.0000000025", "-0.000000002", nil},
		{"1.9999999999", "2", nil},
		{"0.1234567894", "0.123456789", nil},
		{"0.1234567896", "0.12345679", nil},
		{"5e-10", "0", nil},
		{"6e-10", "0.000000001", nil},
		{"1e-100000000", "0", nil},
		{"0e999999999", "0", nil},
		{"12345678901234567890.123456789", "12345678901234567890.123456789", nil},
		{"170141183460469231731687303715.884105727", "170141183460469231731687303715.884105727", nil}, // (2^127-1)/1e9
		{"-170141183460469231731687303715.884105727", "-170141183460469231731687303715.884105727", nil},
		{"170141183460469231731687303715.884105728", "", errNumberRange},
		{"170141183460469231731687303715.8841057274", "170141183460469231731687303715.884105727", nil},
		{"170141183460469231731687303715.8841057275", "", errNumberRange}, // rounds up past the limit
		{"1e29", "100000000000000000000000000000", nil},
		{"1.7e29", "170000000000000000000000000000", nil},
		{"1.8e29", "", errNumberRange},
		{"-1e30", "", errNumberRange},
		{"1e999999999", "", errNumberRange},
		{"100000000000000000000000000000000000000000000000000", "", errNumberRange},
		{"", "", errNumberSyntax},
		{"-", "", errNumberSyntax},
		{"+1", "", errNumberSyntax},
		{"01", "", errNumberSyntax},
		{"1.", "", errNumberSyntax},
		{".5", "", errNumberSyntax},
		{"1e", "", errNumberSyntax},
		{"1e+", "", errNumberSyntax},
		{"1 ", "", errNumberSyntax},
		{"NaN", "", errNumberSyntax},
		{"0x10", "", errNumberSyntax},
	} {
		d, err := parseDecimal([]byte(tc.in))
		if err != tc.err {
			t.Errorf("parseDecimal(%q) error = %v, want %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if got := string(appendDecimal(nil, d)); got != tc.want {
			t.Errorf("parseDecimal(%q) renders %q, want %q", tc.in, got, tc.want)
		}
	}
}

func sumOf(t *testing.T, nums ...string) int192 {
	t.Helper()
	var s int192
	for _, n := range nums {
		d, err := parseDecimal([]byte(n))
		if err != nil {
			t.Fatalf("parseDecimal(%q): %v", n, err)
		}
		s = s.add(d)
	}
	return s
}

func TestSumAndAvg(t *testing.T) {
	max := "170141183460469231731687303715.884105727"
	for _, tc := range []struct {
		nums     []string
		sum, avg string
	}{
		{[]string{"0.1", "0.2"}, "0.3", "0.15"},
		{[]string{"0.1", "0.2", "-0.3"}, "0", "0"},
		{[]string{"123.45", "1", "99.1"}, "223.55", "74.516666667"},
		{[]string{"-1", "0", "0"}, "-1", "-0.333333333"},
		{[]string{"-2", "0", "0"}, "-2", "-0.666666667"},
		{[]string{"0.000000001", "0"}, "0.000000001", "0"},                         // 0.5 unit -> even 0
		{[]string{"0.000000003", "0"}, "0.000000003", "0.000000002"},               // 1.5 units -> 2
		{[]string{"-0.000000003", "0"}, "-0.000000003", "-0.000000002"},            // symmetric
		{[]string{"0.000000005", "0"}, "0.000000005", "0.000000002"},               // 2.5 units -> 2
		{[]string{"0.000000007", "0"}, "0.000000007", "0.000000004"},               // 3.5 units -> 4
		{[]string{max, max, max}, "510423550381407695195061911147.652317181", max}, // beyond int128
		{[]string{"-" + max, "-" + max}, "-340282366920938463463374607431.768211454", "-" + max},
		{[]string{"1e29", "1e29", "1e29", "1e29", "1e29", "1e29", "1e29", "1e29", "1e29", "1e29"}, "1000000000000000000000000000000", "100000000000000000000000000000"},
	} {
		s := sumOf(t, tc.nums...)
		if got := string(appendInt192(nil, s)); got != tc.sum {
			t.Errorf("sum%v = %s, want %s", tc.nums, got, tc.sum)
		}
		if got := string(appendAvg(nil, s, uint64(len(tc.nums)))); got != tc.avg {
			t.Errorf("avg%v = %s, want %s", tc.nums, got, tc.avg)
		}
	}
}

// oracle computes round_half_even(x * 10^9) for the JSON number s with math/big; ok is false
// when it exceeds 2^127-1 in magnitude.
func oracle(s string) (*big.Int, bool) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("oracle: bad number " + s)
	}
	r.Mul(r, new(big.Rat).SetInt64(decUnit))
	num, den := r.Num(), r.Denom()
	q, m := new(big.Int).QuoRem(num, den, new(big.Int)) // truncated
	m.Abs(m)
	m.Lsh(m, 1)
	if c := m.Cmp(den); c > 0 || c == 0 && q.Bit(0) == 1 {
		if num.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	lim := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	if new(big.Int).Abs(q).Cmp(lim) > 0 {
		return nil, false
	}
	return q, true
}

func decToBig(d dec) *big.Int {
	b := new(big.Int).SetUint64(d.hi)
	b.Lsh(b, 64).Or(b, new(big.Int).SetUint64(d.lo))
	if d.neg() {
		b.Sub(b, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	return b
}

// exponentOf returns the value of the exponent in a syntactically valid JSON number (0 if none),
// saturated.
func exponentOf(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			e, err := strconv.Atoi(s[i+1:])
			if err != nil {
				return 1 << 30
			}
			return e
		}
	}
	return 0
}

// isJSONNumber reports whether s is exactly one JSON number, per encoding/json.
func isJSONNumber(s string) bool {
	if s == "" || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') || !json.Valid([]byte(s)) {
		return false
	}
	c := s[len(s)-1]
	return c >= '0' && c <= '9' // rules out trailing space, which json.Valid accepts
}

func checkDecimal(t *testing.T, s string) {
	d, err := parseDecimal([]byte(s))
	if valid := isJSONNumber(s); valid != (err != errNumberSyntax) {
		t.Fatalf("parseDecimal(%q) error %v, but JSON number syntax valid=%v", s, err, valid)
	}
	if err == errNumberSyntax {
		return
	}
	if e := exponentOf(s); e > -2000 && e < 2000 && len(s) < 2000 {
		want, ok := oracle(s)
		if ok != (err == nil) {
			t.Fatalf("parseDecimal(%q) error %v, oracle in range=%v", s, err, ok)
		}
		if ok && decToBig(d).Cmp(want) != 0 {
			t.Fatalf("parseDecimal(%q) = %v units, want %v", s, decToBig(d), want)
		}
	}
	if err != nil {
		return
	}
	out := appendDecimal(nil, d)
	d2, err := parseDecimal(out)
	if err != nil || d2 != d {
		t.Fatalf("round trip %q -> %q -> %v, %v; want %v", s, out, d2, err, d)
	}
	if out2 := appendDecimal(nil, d2); string(out2) != string(out) {
		t.Fatalf("render not canonical: %q then %q", out, out2)
	}
	if len(out) > 1 && out[len(out)-1] == '0' && containsByte(out, '.') {
		t.Fatalf("render %q has trailing zeros", out)
	}
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

func TestDecimalOracle(t *testing.T) {
	for _, s := range []string{
		"0", "1", "-1", "0.1", "123.45", "1e3", "9.999999999e28", "1.7014118346046923173168730371588410572e29",
		"1.7014118346046923173168730371588410573e29", "0.00000000049999999999999", "0.0000000005000000000001",
		"-170141183460469231731687303715.8841057265", "-170141183460469231731687303715.8841057275", "170141183460469231731687303715.88410572749999",
		"99999999999999999999", "0.0000000000000000000000000000001e22", "123456789012345678901234567890e-10",
	} {
		checkDecimal(t, s)
	}
}

func FuzzDecimal(f *testing.F) {
	for _, s := range []string{"0", "-0.5", "123.45", "1e3", "1.5E-3", "0.0000000025", "1e30", "01", "1.", "-", "9e28", "-170141183460469231731687303715.884105727"} {
		f.Add(s)
	}
	f.Fuzz(checkDecimal)
}
