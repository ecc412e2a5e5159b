package operators

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
)

// Exact decimals for expressions (filter, map).
//
// A decimal is coefficient × 10^exponent, an exact value of arbitrary (bounded) size: JSON
// numbers are parsed into it from their text, never through float64, and + - * are exact. A
// quotient is exact when it terminates (its reduced denominator has no prime factors but 2
// and 5) and otherwise rounded half to even to quoScale fractional digits. Values are kept
// normalized (no trailing zero digits in the coefficient, zero is 0e0), so equal values have
// equal representations; a coefficient that does not fit an int64 lives in a big.Int.
//
// This is not the aggregates' fixed-point dec (decimal.go): aggregates need a fixed state
// width; expressions need exact results whatever the scale.

const (
	// quoScale is the number of fractional digits a quotient that does not terminate is
	// rounded to, half to even (such a quotient never lies exactly halfway, so this is
	// rounding to the nearest).
	quoScale = 18
	// decMaxDigits bounds the significant digits of a decimal's coefficient.
	decMaxDigits = 1000
	// decMaxExp bounds the exponent of a normalized decimal: |exponent| <= decMaxExp.
	decMaxExp = 10000
)

var (
	errDivByZero = errors.New("division by zero")
	errDecRange  = fmt.Errorf("number out of range (more than %d significant digits, or an exponent beyond ±%d)", decMaxDigits, decMaxExp)
	errDecSyntax = errors.New("invalid number")
)

// decimal is an exact decimal number, coefficient × 10^exp. The zero value is 0. Values are
// immutable: big is never modified once a decimal holds it, so decimals may be copied and
// shared freely (also across goroutines).
type decimal struct {
	c   int64    // the coefficient, when big is nil
	big *big.Int // the coefficient, when it does not fit an int64 (else nil)
	exp int32
}

var (
	bigTen  = big.NewInt(10)
	bigFive = big.NewInt(5)
	// bigPow10s holds 10^0 .. 10^63, read-only.
	bigPow10s = func() (t [64]*big.Int) {
		for i := range t {
			t[i] = new(big.Int).Exp(bigTen, big.NewInt(int64(i)), nil)
		}
		return t
	}()
	// bigMaxCoef is 10^decMaxDigits, the bound (exclusive) of a coefficient's magnitude.
	bigMaxCoef  = new(big.Int).Exp(bigTen, big.NewInt(decMaxDigits), nil)
	bigPow10e19 = bigPow10s[19]
)

// bigPow10 returns 10^n (n >= 0). The result is read-only.
func bigPow10(n int) *big.Int {
	if n < len(bigPow10s) {
		return bigPow10s[n]
	}
	return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil)
}

func uabs(x int64) uint64 {
	if x < 0 {
		return uint64(-x) // -MinInt64 wraps to MinInt64, whose uint64 is 2^63
	}
	return uint64(x)
}

// mul64 multiplies with overflow detection.
func mul64(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uabs(a), uabs(b))
	return signed64(hi, lo, (a < 0) != (b < 0))
}

// signed64 gives the int64 of the magnitude hi:lo with a sign, if it fits.
func signed64(hi, lo uint64, neg bool) (int64, bool) {
	if hi != 0 {
		return 0, false
	}
	if neg {
		if lo > 1<<63 {
			return 0, false
		}
		return int64(-lo), true
	}
	if lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// add64 adds with overflow detection.
func add64(a, b int64) (int64, bool) {
	s := a + b
	return s, (a^s)&(b^s) >= 0
}

// digits64 is the number of decimal digits of u.
func digits64(u uint64) int {
	n := 1
	for n < len(pow10) && u >= pow10[n] {
		n++
	}
	return n
}

// decInt is the decimal of an integer.
func decInt(i int64) decimal {
	d, _ := newDec(i, 0) // cannot fail: 19 digits, exponent at most 18
	return d
}

// newDec normalizes c × 10^exp and checks its range.
func newDec(c int64, exp int) (decimal, error) {
	if c == 0 {
		return decimal{}, nil
	}
	for c%10 == 0 {
		c /= 10
		exp++
	}
	if exp < -decMaxExp || exp > decMaxExp {
		return decimal{}, errDecRange
	}
	return decimal{c: c, exp: int32(exp)}, nil
}

// newDecU is newDec of a magnitude and a sign.
func newDecU(u uint64, neg bool, exp int) (decimal, error) {
	if c, ok := signed64(0, u, neg); ok {
		return newDec(c, exp)
	}
	b := new(big.Int).SetUint64(u)
	if neg {
		b.Neg(b)
	}
	return newBigDec(b, exp)
}

// newBigDec normalizes b × 10^exp and checks its range. It takes b (it may modify it).
func newBigDec(b *big.Int, exp int) (decimal, error) {
	if b.IsInt64() {
		return newDec(b.Int64(), exp)
	}
	// Strip trailing zeros (callers bound b: at most about 2·decMaxExp+decMaxDigits digits).
	var q, r big.Int
	for {
		q.QuoRem(b, bigPow10e19, &r)
		if r.Sign() != 0 {
			break
		}
		b.Set(&q)
		exp += 19
	}
	if low := r.Abs(&r).Uint64(); low%10 == 0 { // |r| < 10^19 fits a uint64
		n := 0
		for low%10 == 0 {
			low /= 10
			n++
		}
		b.Quo(b, bigPow10(n))
		exp += n
	}
	if b.IsInt64() {
		return newDec(b.Int64(), exp)
	}
	if b.CmpAbs(bigMaxCoef) >= 0 || exp < -decMaxExp || exp > decMaxExp {
		return decimal{}, errDecRange
	}
	return decimal{big: b, exp: int32(exp)}, nil
}

func (d decimal) sign() int {
	if d.big != nil {
		return d.big.Sign()
	}
	switch {
	case d.c < 0:
		return -1
	case d.c > 0:
		return 1
	}
	return 0
}

func (d decimal) isZero() bool { return d.big == nil && d.c == 0 }

// isInt reports whether d is an integer.
func (d decimal) isInt() bool { return d.exp >= 0 }

// coef returns the coefficient as a big.Int; the result is read-only.
func (d decimal) coef() *big.Int {
	if d.big != nil {
		return d.big
	}
	return big.NewInt(d.c)
}

// int64 returns d as an int64 if it is an integer in range.
func (d decimal) int64() (int64, bool) {
	if d.exp < 0 || d.big != nil {
		return 0, false
	}
	if d.exp > 18 {
		return 0, d.c == 0
	}
	return mul64(d.c, int64(pow10[d.exp]))
}

func (d decimal) neg() decimal {
	if d.big != nil {
		if d.big.Sign() > 0 && d.big.BitLen() == 64 && d.big.TrailingZeroBits() == 63 {
			return decimal{c: math.MinInt64, exp: d.exp} // -(2^63)
		}
		return decimal{big: new(big.Int).Neg(d.big), exp: d.exp}
	}
	if d.c == math.MinInt64 {
		return decimal{big: new(big.Int).Neg(big.NewInt(d.c)), exp: d.exp}
	}
	return decimal{c: -d.c, exp: d.exp}
}

func (d decimal) abs() decimal {
	if d.sign() < 0 {
		return d.neg()
	}
	return d
}

// decAdd returns a + b.
func decAdd(a, b decimal) (decimal, error) {
	if a.isZero() {
		return b, nil
	}
	if b.isZero() {
		return a, nil
	}
	if a.big == nil && b.big == nil {
		ca, cb, ea, eb := a.c, b.c, int(a.exp), int(b.exp)
		ok := true
		switch {
		case ea > eb && ea-eb <= 18:
			ca, ok = mul64(ca, int64(pow10[ea-eb]))
			ea = eb
		case eb > ea && eb-ea <= 18:
			cb, ok = mul64(cb, int64(pow10[eb-ea]))
			eb = ea
		}
		if ok && ea == eb {
			if s, ok := add64(ca, cb); ok {
				return newDec(s, ea)
			}
		}
	}
	e := min(a.exp, b.exp)
	x := new(big.Int).Mul(a.coef(), bigPow10(int(a.exp-e)))
	y := new(big.Int).Mul(b.coef(), bigPow10(int(b.exp-e)))
	return newBigDec(x.Add(x, y), int(e))
}

// decSub returns a - b.
func decSub(a, b decimal) (decimal, error) { return decAdd(a, b.neg()) }

// decMul returns a × b.
func decMul(a, b decimal) (decimal, error) {
	exp := int(a.exp) + int(b.exp)
	if a.big == nil && b.big == nil {
		if a.c == 0 || b.c == 0 {
			return decimal{}, nil
		}
		if p, ok := mul64(a.c, b.c); ok {
			return newDec(p, exp)
		}
	}
	return newBigDec(new(big.Int).Mul(a.coef(), b.coef()), exp)
}

// decQuo returns a / b: exact when the quotient terminates, else rounded half to even to
// quoScale fractional digits.
func decQuo(a, b decimal) (decimal, error) {
	if b.isZero() {
		return decimal{}, errDivByZero
	}
	if a.isZero() {
		return decimal{}, nil
	}
	exp := int(a.exp) - int(b.exp)
	neg := (a.sign() < 0) != (b.sign() < 0)
	if a.big == nil && b.big == nil {
		if d, ok, err := quo64(uabs(a.c), uabs(b.c), neg, exp); ok {
			return d, err
		}
	}
	n := new(big.Int).Abs(a.coef())
	m := new(big.Int).Abs(b.coef())
	g := new(big.Int).GCD(nil, nil, n, m)
	n.Quo(n, g)
	m.Quo(m, g)
	// m = 2^twos × 5^fives × rest: the quotient terminates iff rest = 1.
	twos := int(m.TrailingZeroBits())
	rest := new(big.Int).Rsh(m, uint(twos))
	fives := 0
	var q, r big.Int
	for {
		q.QuoRem(rest, bigFive, &r)
		if r.Sign() != 0 {
			break
		}
		rest.Set(&q)
		fives++
	}
	if rest.IsInt64() && rest.Int64() == 1 {
		k := max(twos, fives)
		n.Lsh(n, uint(k-twos))
		n.Mul(n, new(big.Int).Exp(bigFive, big.NewInt(int64(k-fives)), nil))
		if neg {
			n.Neg(n)
		}
		return newBigDec(n, exp-k)
	}
	s := exp + quoScale // a/b × 10^quoScale = n/m × 10^s
	if s >= 0 {
		n.Mul(n, bigPow10(s))
	} else {
		m.Mul(m, bigPow10(-s))
	}
	q.QuoRem(n, m, &r)
	r.Lsh(&r, 1)
	if c := r.Cmp(m); c > 0 || c == 0 && q.Bit(0) == 1 {
		q.Add(&q, big.NewInt(1))
	}
	if neg {
		q.Neg(&q)
	}
	return newBigDec(&q, -quoScale)
}

// quo64 is decQuo of two int64 magnitudes when the result needs no big arithmetic; ok false
// means it does.
func quo64(n, m uint64, neg bool, exp int) (d decimal, ok bool, err error) {
	g := gcd64(n, m)
	n, m = n/g, m/g
	twos := bits.TrailingZeros64(m)
	rest := m >> twos
	fives := 0
	for rest%5 == 0 {
		rest /= 5
		fives++
	}
	if rest == 1 {
		k := max(twos, fives)
		// n × 2^(k-twos) × 5^(k-fives); 5^27 < 2^63.
		if k-fives > 27 || k-twos > 63 {
			return decimal{}, false, nil
		}
		hi, lo := bits.Mul64(n, pow5(k-fives))
		if hi != 0 {
			return decimal{}, false, nil
		}
		hi, lo = bits.Mul64(lo, 1<<(k-twos))
		if hi != 0 {
			return decimal{}, false, nil
		}
		d, err := newDecU(lo, neg, exp-k)
		return d, true, err
	}
	s := exp + quoScale
	if s < 0 || s > 19 {
		return decimal{}, false, nil
	}
	hi, lo := bits.Mul64(n, pow10[s])
	if hi >= m {
		return decimal{}, false, nil // the quotient exceeds 64 bits
	}
	q, r := bits.Div64(hi, lo, m)
	if r > m-r || r == m-r && q&1 == 1 {
		q++
		if q == 0 {
			return decimal{}, false, nil
		}
	}
	d, err = newDecU(q, neg, -quoScale)
	return d, true, err
}

func gcd64(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func pow5(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 5
	}
	return p
}

// decRem returns the remainder of the integers a and b, truncated (the sign of a), as Go's %.
func decRem(a, b decimal) (decimal, error) {
	if !a.isInt() || !b.isInt() {
		return decimal{}, errors.New("not an integer")
	}
	if b.isZero() {
		return decimal{}, errDivByZero
	}
	if x, ok := a.int64(); ok {
		if y, ok := b.int64(); ok {
			if y == -1 {
				return decimal{}, nil
			}
			return decInt(x % y), nil
		}
	}
	x := new(big.Int).Mul(a.coef(), bigPow10(int(a.exp)))
	y := new(big.Int).Mul(b.coef(), bigPow10(int(b.exp)))
	return newBigDec(x.Rem(x, y), 0)
}

// decCmp compares a and b: -1, 0 or +1.
func decCmp(a, b decimal) int {
	sa, sb := a.sign(), b.sign()
	if sa != sb {
		return cmp.Compare(sa, sb)
	}
	if sa == 0 {
		return 0
	}
	if a.big == nil && b.big == nil {
		ca, cb, ea, eb := a.c, b.c, int(a.exp), int(b.exp)
		if ea != eb {
			// Align the larger exponent down; if that overflows, its magnitude is the larger.
			if ea > eb {
				if ea-eb > 18 {
					return sa
				}
				var ok bool
				if ca, ok = mul64(ca, int64(pow10[ea-eb])); !ok {
					return sa
				}
			} else {
				if eb-ea > 18 {
					return -sa
				}
				var ok bool
				if cb, ok = mul64(cb, int64(pow10[eb-ea])); !ok {
					return -sa
				}
			}
		}
		return cmp.Compare(ca, cb)
	}
	// Compare the positions of the leading digits first, then the aligned coefficients.
	if la, lb := a.leading(), b.leading(); la != lb {
		if la > lb {
			return sa
		}
		return -sa
	}
	e := min(a.exp, b.exp)
	x := new(big.Int).Mul(a.coef(), bigPow10(int(a.exp-e)))
	y := new(big.Int).Mul(b.coef(), bigPow10(int(b.exp-e)))
	return x.Cmp(y)
}

// leading is the exponent of d's leading digit (d != 0): d's magnitude is in
// [10^leading, 10^(leading+1)).
func (d decimal) leading() int {
	if d.big == nil {
		return digits64(uabs(d.c)) - 1 + int(d.exp)
	}
	return len(d.big.Text(10)) - 1 - boolInt(d.big.Sign() < 0) + int(d.exp)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// roundMode says how decRound rounds.
type roundMode uint8

const (
	roundHalfEven roundMode = iota
	roundHalfAway           // half away from zero, as SQL's ROUND and math.Round
	roundDown               // toward zero
	roundFloor              // toward -Inf
	roundCeil               // toward +Inf
)

// decRound rounds d to n fractional digits (n < 0: to a multiple of 10^-n).
func decRound(d decimal, n int, mode roundMode) (decimal, error) {
	drop := -int(d.exp) - n // digits to drop
	if d.isZero() || drop <= 0 {
		return d, nil
	}
	neg := d.sign() < 0
	if d.big == nil && drop < len(pow10) {
		u, div := uabs(d.c), pow10[drop]
		q, r := u/div, u%div
		if roundsUp(mode, neg, q&1 == 1, r != 0, cmpUint(r, div-r)) {
			q++
		}
		return newDecU(q, neg, -n)
	}
	m := new(big.Int).Abs(d.coef())
	if drop > decMaxDigits+1 {
		// |d| < 10^(decMaxDigits) × 10^exp <= 10^-n / 10: less than half a unit.
		if roundsUp(mode, neg, false, true, -1) {
			return newDecU(1, neg, -n)
		}
		return decimal{}, nil
	}
	div := bigPow10(drop)
	var q, r, half big.Int
	q.QuoRem(m, div, &r)
	half.Sub(div, &r)
	if roundsUp(mode, neg, q.Bit(0) == 1, r.Sign() != 0, r.Cmp(&half)) {
		q.Add(&q, big.NewInt(1))
	}
	if neg {
		q.Neg(&q)
	}
	return newBigDec(&q, -n)
}

// roundsUp says whether a magnitude rounds away from zero: odd is the parity of the kept
// digits, inexact whether anything was dropped, half the comparison of the dropped part with
// the rest of the unit (-1: below half, 0: exactly half, +1: above).
func roundsUp(mode roundMode, neg, odd, inexact bool, half int) bool {
	if !inexact {
		return false
	}
	switch mode {
	case roundHalfEven:
		return half > 0 || half == 0 && odd
	case roundHalfAway:
		return half >= 0
	case roundFloor:
		return neg
	case roundCeil:
		return !neg
	}
	return false
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// decPow returns d^n for n >= 0, exactly.
func decPow(d decimal, n int64) (decimal, error) {
	if n == 0 {
		return decInt(1), nil
	}
	if d.isZero() {
		return d, nil
	}
	m := d.coef()
	// Refuse before computing what cannot fit: |coef|^n >= 2^((bitlen-1)·n).
	if bl := int64(m.BitLen()); bl > 1 && (bl-1) > (4*decMaxDigits)/n {
		return decimal{}, errDecRange
	}
	if e := int64(d.exp); e != 0 && (n > decMaxExp || e*n > decMaxExp || e*n < -decMaxExp) {
		return decimal{}, errDecRange
	}
	return newBigDec(new(big.Int).Exp(m, big.NewInt(n), nil), int(int64(d.exp)*n))
}

// float returns the float64 nearest d (±Inf beyond the float64 range).
func (d decimal) float() float64 {
	if d.big == nil && uabs(d.c) <= 1<<53 && d.exp >= -22 && d.exp <= 22 {
		// Both operands are exact float64s: one correctly rounded operation.
		f := float64(d.c)
		if d.exp >= 0 {
			return f * float64pow10[d.exp]
		}
		return f / float64pow10[-d.exp]
	}
	f, _ := strconv.ParseFloat(d.String(), 64)
	return f
}

var float64pow10 = [...]float64{
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
	1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
}

// decFromFloat returns the decimal of f's shortest representation (the digits
// strconv.FormatFloat(f, 'g', -1, 64) prints); false for NaN and infinities.
func decFromFloat(f float64) (decimal, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return decimal{}, false
	}
	var buf [32]byte
	d, err := parseDec(strconv.AppendFloat(buf[:0], f, 'g', -1, 64))
	return d, err == nil
}

// parseDec parses a JSON number (RFC 8259 grammar: no '+', no leading zeros, no '.5') into
// an exact decimal. Numbers beyond the range (decMaxDigits, decMaxExp) give errDecRange.
func parseDec(b []byte) (decimal, error) {
	if end, err := scanNumber(b, 0); err != nil || end != len(b) {
		return decimal{}, errDecSyntax
	}
	return parseValidDec(b)
}

// parseValidDec is parseDec of a valid JSON number.
func parseValidDec(b []byte) (decimal, error) {
	// Fast path: a plain number of at most 18 digits ("123.45", "-0.5").
	var c int64
	n, dot := 0, -1
	i := 0
	if b[0] == '-' {
		i++
	}
	for ; i < len(b) && n <= 18; i++ {
		switch ch := b[i]; {
		case ch >= '0' && ch <= '9':
			c = c*10 + int64(ch-'0')
			n++
		case ch == '.':
			dot = n
		default:
			n = 19 // an exponent: the general path
		}
	}
	if n <= 18 {
		if b[0] == '-' {
			c = -c
		}
		if dot < 0 {
			return newDec(c, 0)
		}
		return newDec(c, dot-n)
	}
	i = 0
	neg := b[0] == '-'
	if neg {
		i++
	}
	intStart := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(b) && b[i] == '.' {
		fracStart = i + 1
		for i = fracStart; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
		fracEnd = i
	}
	exp := 0
	if i < len(b) { // 'e' or 'E'
		i++
		eneg := b[i] == '-'
		if b[i] == '+' || b[i] == '-' {
			i++
		}
		for ; i < len(b); i++ {
			if exp < 1e9 { // saturate: anything this large is out of range (or zero)
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	// The digits, integer part then fraction, as positions in b.
	nInt, nFrac := intEnd-intStart, fracEnd-fracStart
	pos := func(k int) int {
		if k < nInt {
			return intStart + k
		}
		return fracStart + k - nInt
	}
	first, last := 0, nInt+nFrac-1
	for first <= last && b[pos(first)] == '0' {
		first++
	}
	if first > last {
		return decimal{}, nil
	}
	for b[pos(last)] == '0' {
		last--
	}
	// value = digits[first..last] × 10^(exp - nFrac + trailing zeros)
	exp += (nInt + nFrac - 1 - last) - nFrac
	n = last - first + 1
	if n > decMaxDigits || exp < -decMaxExp || exp > decMaxExp {
		return decimal{}, errDecRange
	}
	if n <= 18 {
		c = 0
		for k := first; k <= last; k++ {
			c = c*10 + int64(b[pos(k)]-'0')
		}
		if neg {
			c = -c
		}
		return decimal{c: c, exp: int32(exp)}, nil
	}
	digits := make([]byte, 0, n+1)
	if neg {
		digits = append(digits, '-')
	}
	for k := first; k <= last; k++ {
		digits = append(digits, b[pos(k)])
	}
	bc, _ := new(big.Int).SetString(string(digits), 10)
	return newBigDec(bc, exp)
}

// appendDec appends d as the shortest JSON number that is exactly d: its significant digits,
// plain ("425593.22", "-0.5", "1000", an integer of any length as an integer) unless that
// takes more than 20 zeros after the digits or 5 zeros after the point, then in exponent form
// ("1e+21", "1.5e-7"). Below 1e21 and above 1e-6, and for short coefficients, that is how
// encoding/json writes float64s.
func appendDec(dst []byte, d decimal) []byte {
	if d.isZero() {
		return append(dst, '0')
	}
	var digits []byte
	var buf [20]byte
	if d.big == nil {
		if d.c < 0 {
			dst = append(dst, '-')
		}
		digits = strconv.AppendUint(buf[:0], uabs(d.c), 10)
	} else {
		if d.big.Sign() < 0 {
			dst = append(dst, '-')
		}
		digits = new(big.Int).Abs(d.big).Append(nil, 10)
	}
	n, exp := len(digits), int(d.exp)
	lead := n - 1 + exp
	switch {
	case exp > 20 || lead < -6:
		dst = append(dst, digits[0])
		if n > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if lead < 0 {
			dst = append(dst, '-')
			lead = -lead
		} else {
			dst = append(dst, '+')
		}
		return strconv.AppendInt(dst, int64(lead), 10)
	case exp >= 0:
		dst = append(dst, digits...)
		for range exp {
			dst = append(dst, '0')
		}
		return dst
	case lead >= 0:
		dst = append(dst, digits[:n+exp]...)
		dst = append(dst, '.')
		return append(dst, digits[n+exp:]...)
	}
	dst = append(dst, '0', '.')
	for range -lead - 1 {
		dst = append(dst, '0')
	}
	return append(dst, digits...)
}

// String returns d as appendDec writes it; string(x) and fmt's %v in expressions use it.
func (d decimal) String() string { return string(appendDec(nil, d)) }

// MarshalJSON writes d as appendDec does (a map result holding decimals in arrays or objects,
// toJSON).
func (d decimal) MarshalJSON() ([]byte, error) { return appendDec(nil, d), nil }
