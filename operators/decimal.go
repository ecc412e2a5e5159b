package operators

import (
	"errors"
	"math/bits"
)

// Exact fixed-point decimals.
//
// Aggregates must give identical state bytes whatever order a key's records are folded in
// ("one answer, two modes"), so numbers are never summed as float64. A JSON number is parsed
// from its text into a signed 128-bit integer counting units of 10^-decScale (9 fractional
// digits); extra fractional digits are rounded half-to-even at parse time, which is
// deterministic per record. Sums are kept in 192 bits (int192), which cannot overflow for fewer
// than 2^63 records of at most 2^127-1 units each, so addition is exact and associative.

// decScale is the number of fractional decimal digits kept.
const decScale = 9

// decUnit is 10^decScale.
const decUnit = 1_000_000_000

var (
	errNumberSyntax = errors.New("operators: invalid number")
	errNumberRange  = errors.New("operators: number out of range")
)

// dec is a signed 128-bit two's complement integer counting 10^-9 units. Valid values lie in
// [-(2^127-1), 2^127-1] so that negation never overflows.
type dec struct {
	hi uint64
	lo uint64
}

func (d dec) neg() bool { return int64(d.hi) < 0 }

func (d dec) negate() dec {
	lo, borrow := bits.Sub64(0, d.lo, 0)
	hi, _ := bits.Sub64(0, d.hi, borrow)
	return dec{hi, lo}
}

// cmp compares two decs as signed integers.
func (d dec) cmp(e dec) int {
	if d.hi != e.hi {
		if int64(d.hi) < int64(e.hi) {
			return -1
		}
		return 1
	}
	if d.lo != e.lo {
		if d.lo < e.lo {
			return -1
		}
		return 1
	}
	return 0
}

// pow10 holds 10^0 .. 10^19.
var pow10 = [20]uint64{
	1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
	1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
}

// mul128 multiplies the unsigned 128-bit (hi, lo) by m; ok is false on overflow past 2^128.
func mul128(hi, lo, m uint64) (rhi, rlo uint64, ok bool) {
	h1, l1 := bits.Mul64(lo, m)
	h2, l2 := bits.Mul64(hi, m)
	if h2 != 0 {
		return 0, 0, false
	}
	rhi, c := bits.Add64(h1, l2, 0)
	if c != 0 {
		return 0, 0, false
	}
	return rhi, l1, true
}

// parseDecimal parses a JSON number (RFC 8259 grammar, nothing else: no spaces, no '+', no
// leading zeros) into a dec. Digits beyond the 9th fractional digit are rounded half-to-even.
// Magnitudes above (2^127-1)*10^-9 (about 1.7e29) give errNumberRange.
func parseDecimal(b []byte) (dec, error) {
	i := 0
	n := len(b)
	neg := false
	if i < n && b[i] == '-' {
		neg = true
		i++
	}
	// Integer part.
	intStart := i
	if i >= n {
		return dec{}, errNumberSyntax
	}
	if b[i] == '0' {
		i++
	} else if b[i] >= '1' && b[i] <= '9' {
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	} else {
		return dec{}, errNumberSyntax
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < n && b[i] == '.' {
		i++
		fracStart = i
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return dec{}, errNumberSyntax
		}
	}
	exp := 0
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < n && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		es := i
		for i < n && b[i] >= '0' && b[i] <= '9' {
			if exp < 100000 { // saturate: anything this large is out of range or rounds to 0
				exp = exp*10 + int(b[i]-'0')
			}
			i++
		}
		if i == es {
			return dec{}, errNumberSyntax
		}
		if eneg {
			exp = -exp
		}
	}
	if i != n {
		return dec{}, errNumberSyntax
	}

	nInt := intEnd - intStart
	nFrac := fracEnd - fracStart
	nDig := nInt + nFrac
	// digit(k) is the k-th digit of the concatenated integer and fraction digits.
	digit := func(k int) byte {
		if k < nInt {
			return b[intStart+k] - '0'
		}
		return b[fracStart+k-nInt] - '0'
	}
	// point is how many leading digits form the integer count of 10^-9 units.
	point := nInt + exp + decScale

	// Fast path: few digits, no rounding (e.g. "123.45", "1767225600000").
	if point >= nDig && nDig <= 19 {
		var v uint64
		for k := 0; k < nDig; k++ {
			v = v*10 + uint64(digit(k))
		}
		if v == 0 {
			return dec{}, nil
		}
		hi, lo, ok := scale10(0, v, point-nDig)
		if !ok {
			return dec{}, errNumberRange
		}
		return finishDec(hi, lo, neg)
	}

	// General path: accumulate the kept digits, round on the rest.
	var hi, lo uint64
	kept := min(point, nDig)
	for k := 0; k < kept; k++ {
		var ok bool
		hi, lo, ok = mul128(hi, lo, 10)
		if !ok {
			return dec{}, errNumberRange
		}
		var c uint64
		lo, c = bits.Add64(lo, uint64(digit(k)), 0)
		hi, c = bits.Add64(hi, 0, c)
		if c != 0 {
			return dec{}, errNumberRange
		}
	}
	if point > nDig {
		if hi|lo != 0 {
			var ok bool
			if hi, lo, ok = scale10(hi, lo, point-nDig); !ok {
				return dec{}, errNumberRange
			}
		}
	} else if point >= 0 && point < nDig {
		// Round half to even on digit[point] and the digits after it.
		rd := digit(point)
		up := false
		switch {
		case rd > 5:
			up = true
		case rd == 5:
			for k := point + 1; k < nDig; k++ {
				if digit(k) != 0 {
					up = true
					break
				}
			}
			if !up {
				up = lo&1 == 1
			}
		}
		if up {
			var c uint64
			lo, c = bits.Add64(lo, 1, 0)
			hi, c = bits.Add64(hi, 0, c)
			if c != 0 {
				return dec{}, errNumberRange
			}
		}
	}
	// point < 0: every digit lies below half a unit; the value rounds to zero.
	return finishDec(hi, lo, neg)
}

// finishDec range-checks an unsigned magnitude and applies the sign.
func finishDec(hi, lo uint64, neg bool) (dec, error) {
	if hi>>63 != 0 { // magnitude >= 2^127
		return dec{}, errNumberRange
	}
	d := dec{hi, lo}
	if neg {
		d = d.negate()
	}
	return d, nil
}

// appendDecimal appends d as a JSON number without trailing fractional zeros: "123.45", "1",
// "-0.5", "0".
func appendDecimal(dst []byte, d dec) []byte {
	neg := d.neg()
	if neg {
		d = d.negate()
	}
	return appendUnits(dst, neg, 0, d.hi, d.lo)
}

// appendUnits appends the unsigned 192-bit count of 10^-9 units (w2, w1, w0) with a sign.
func appendUnits(dst []byte, neg bool, w2, w1, w0 uint64) []byte {
	// Split off the fraction: divide by 10^9.
	var frac uint64
	w2, frac = bits.Div64(0, w2, decUnit)
	w1, frac = bits.Div64(frac, w1, decUnit)
	w0, frac = bits.Div64(frac, w0, decUnit)
	if neg && (w2|w1|w0 != 0 || frac != 0) {
		dst = append(dst, '-')
	}
	dst = appendUint192(dst, w2, w1, w0)
	if frac != 0 {
		var buf [decScale]byte
		for k := decScale - 1; k >= 0; k-- {
			buf[k] = byte('0' + frac%10)
			frac /= 10
		}
		end := decScale
		for buf[end-1] == '0' {
			end--
		}
		dst = append(dst, '.')
		dst = append(dst, buf[:end]...)
	}
	return dst
}

// appendUint192 appends the decimal digits of the unsigned 192-bit integer (w2, w1, w0).
func appendUint192(dst []byte, w2, w1, w0 uint64) []byte {
	if w2 == 0 && w1 == 0 {
		return appendUint64(dst, w0)
	}
	// Peel off 19-digit groups, least significant first. 2^192 < 10^58: at most 4 groups.
	var groups [4]uint64
	ng := 0
	for w2|w1 != 0 {
		var r uint64
		w2, r = bits.Div64(0, w2, pow10[19])
		w1, r = bits.Div64(r, w1, pow10[19])
		w0, r = bits.Div64(r, w0, pow10[19])
		groups[ng] = r
		ng++
	}
	dst = appendUint64(dst, w0)
	for g := ng - 1; g >= 0; g-- {
		var buf [19]byte
		v := groups[g]
		for k := 18; k >= 0; k-- {
			buf[k] = byte('0' + v%10)
			v /= 10
		}
		dst = append(dst, buf[:]...)
	}
	return dst
}

func appendUint64(dst []byte, v uint64) []byte {
	var buf [20]byte
	k := len(buf)
	for {
		k--
		buf[k] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(dst, buf[k:]...)
}

// int192 is a signed 192-bit two's complement accumulator for exact sums.
type int192 struct{ w2, w1, w0 uint64 }

// add adds a sign-extended dec.
func (s int192) add(d dec) int192 {
	ext := uint64(int64(d.hi) >> 63) // 0 or all ones
	var c uint64
	s.w0, c = bits.Add64(s.w0, d.lo, 0)
	s.w1, c = bits.Add64(s.w1, d.hi, c)
	s.w2, _ = bits.Add64(s.w2, ext, c)
	return s
}

// plus adds another int192 (two's complement, wrapping like add).
func (s int192) plus(o int192) int192 {
	var c uint64
	s.w0, c = bits.Add64(s.w0, o.w0, 0)
	s.w1, c = bits.Add64(s.w1, o.w1, c)
	s.w2, _ = bits.Add64(s.w2, o.w2, c)
	return s
}

func (s int192) neg() bool { return int64(s.w2) < 0 }

func (s int192) negate() int192 {
	var b uint64
	s.w0, b = bits.Sub64(0, s.w0, 0)
	s.w1, b = bits.Sub64(0, s.w1, b)
	s.w2, _ = bits.Sub64(0, s.w2, b)
	return s
}

// appendInt192 appends the sum as a decimal JSON number.
func appendInt192(dst []byte, s int192) []byte {
	neg := s.neg()
	if neg {
		s = s.negate()
	}
	return appendUnits(dst, neg, s.w2, s.w1, s.w0)
}

// appendAvg appends sum/n rounded half-to-even to 9 fractional digits. n must be > 0.
// The quotient is exact integer division of units, so it is independent of fold order.
func appendAvg(dst []byte, s int192, n uint64) []byte {
	neg := s.neg()
	if neg {
		s = s.negate()
	}
	var r uint64
	s.w2, r = bits.Div64(0, s.w2, n)
	s.w1, r = bits.Div64(r, s.w1, n)
	s.w0, r = bits.Div64(r, s.w0, n)
	// Round half to even: compare 2r with n (2r may exceed 64 bits).
	hi2, lo2 := r>>63, r<<1
	up := false
	if hi2 != 0 || lo2 > n {
		up = true
	} else if lo2 == n {
		up = s.w0&1 == 1
	}
	if up {
		var c uint64
		s.w0, c = bits.Add64(s.w0, 1, 0)
		s.w1, c = bits.Add64(s.w1, 0, c)
		s.w2, _ = bits.Add64(s.w2, 0, c)
	}
	return appendUnits(dst, neg, s.w2, s.w1, s.w0)
}

// scale10 multiplies the unsigned 128-bit value hi:lo by 10^shift (shift >= 0); ok is false on
// overflow.
func scale10(hi, lo uint64, shift int) (uint64, uint64, bool) {
	if shift > 38 {
		return 0, 0, false
	}
	for shift > 0 {
		s := min(shift, 19)
		var ok bool
		if hi, lo, ok = mul128(hi, lo, pow10[s]); !ok {
			return 0, 0, false
		}
		shift -= s
	}
	return hi, lo, true
}
