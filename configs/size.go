package configs

import (
	"fmt"
	"math/big"
	"strings"
)

// Size is a number of bytes. In configuration it is written with a unit, "256MiB", "1GiB",
// "512KiB", "100MB", or as a plain number of bytes ("1024"). Binary units (KiB, MiB, GiB, TiB)
// are powers of 1024, decimal units (KB, MB, GB, TB) powers of 1000; units are case-insensitive
// and a decimal fraction is allowed when the result is a whole number of bytes ("1.5GiB").
//
// Size is a plain value: safe for concurrent use as long as nobody writes it.
type Size int64

// Common sizes.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
)

// sizeUnits lists the accepted units, longest suffixes first where one is a suffix of another.
var sizeUnits = []struct {
	name string
	mult int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

const sizeHelp = `a size like 256MiB, 1GiB, 512KiB, 100MB or a plain number of bytes`

// UnmarshalText parses a size. On error s is unchanged.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := parseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText returns String().
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// String prints the size with the largest unit that represents it exactly, binary units
// first: "256MiB", "100MB", "1023B". UnmarshalText parses every String() result back to the
// same value.
func (s Size) String() string {
	if s < 0 {
		return fmt.Sprintf("%dB", int64(s))
	}
	if s == 0 {
		return "0B"
	}
	for _, units := range [][]int{{3, 2, 1, 0}, {7, 6, 5, 4}} { // binary, then decimal
		for _, i := range units {
			u := sizeUnits[i]
			if int64(s)%u.mult == 0 {
				return fmt.Sprintf("%d%s", int64(s)/u.mult, u.name)
			}
		}
	}
	return fmt.Sprintf("%dB", int64(s))
}

func parseSize(text string) (Size, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return 0, fmt.Errorf("empty size (want %s)", sizeHelp)
	}
	// Split into the number and the unit: the number is digits with at most one dot.
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if !validDecimal(num) {
		return 0, fmt.Errorf("invalid size %q (want %s)", text, sizeHelp)
	}
	mult := int64(1)
	if unit != "" {
		found := false
		for _, u := range sizeUnits {
			if strings.EqualFold(unit, u.name) {
				mult, found = u.mult, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("invalid size %q: unknown unit %q (allowed: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", text, unit)
		}
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q (want %s)", text, sizeHelp)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", text)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large", text)
	}
	return Size(n.Int64()), nil
}

// validDecimal reports whether s is digits, optionally followed by a dot and more digits.
func validDecimal(s string) bool {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || !allDigits(intPart) {
		return false
	}
	if hasDot && (frac == "" || !allDigits(frac)) {
		return false
	}
	// Bound the work big.Rat does on absurd inputs; no real size has this many digits.
	return len(s) <= 40
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
