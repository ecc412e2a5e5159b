package operators

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// ResultsRebuildState reports whether StateOf can rebuild this aggregate's states from its
// results (configs.Aggregate.Changelog output): one input, no window, no retractions, no avg,
// and a state of version 1 (no where, whose own counts the results do not all show, and no
// string min or max).
func (a *Aggregate) ResultsRebuildState() bool {
	if len(a.inputs) > 0 || a.retract || a.windows != nil || a.window != "" || a.version != stateVersion {
		return false
	}
	for k := range a.specs {
		if a.specs[k].kind == aggAvg {
			return false
		}
	}
	return true
}

// OutputChangelog reports whether its results are its changelog (configs.Aggregate.Changelog
// output), which a restore turns back into states with StateOf.
func (a *Aggregate) OutputChangelog() bool { return a.outputLog }

// StateOf appends to dst the state whose result (Render) for key is val: the inverse of Render
// when ResultsRebuildState. Counts give the record count n; without a count field n is 1 (a
// key with a result has at least one record, and nothing rendered reads n then), so the state
// renders the same result and folds later records the same way, though its bytes may differ
// from the original's in n. A val that Render would not have written for key is an error: val
// must render back to itself byte for byte. It allocates only for a sum beyond 128 bits.
func (a *Aggregate) StateOf(key, val, dst []byte) ([]byte, error) {
	if !a.ResultsRebuildState() {
		return dst, errors.New("this aggregate's results cannot rebuild its state (a window, retractions, avg, where, a string min or max, or several inputs)")
	}
	base := len(dst)
	dst = append(dst, make([]byte, a.stateSize)...)
	st := dst[base:]
	a.InitState(st)
	prefix := a.appendKey(nil, key)
	if !bytes.HasPrefix(val, prefix) {
		return dst[:base], fmt.Errorf("the result does not start with its key %s", prefix)
	}
	rest := val[len(prefix):]
	n, counted := uint64(1), false
	for k := range a.specs {
		s := &a.specs[k]
		if !bytes.HasPrefix(rest, s.prefix) {
			return dst[:base], fmt.Errorf("the result has no field %q where this config's layout has it", s.name)
		}
		rest = rest[len(s.prefix):]
		end := bytes.IndexAny(rest, ",}")
		if end < 0 {
			return dst[:base], fmt.Errorf("field %q does not end", s.name)
		}
		tok := rest[:end]
		rest = rest[end:]
		switch s.kind {
		case aggCount:
			c, err := strconv.ParseUint(string(tok), 10, 64)
			if err != nil || c == 0 || counted && c != n {
				return dst[:base], fmt.Errorf("field %q: %q is not the key's record count", s.name, tok)
			}
			n, counted = c, true
		case aggSum:
			sum, err := parseSum(tok)
			if err != nil {
				return dst[:base], fmt.Errorf("field %q: %q: %w", s.name, tok, err)
			}
			storeSum(st[s.off:], sum)
		case aggMin, aggMax:
			d, err := parseDecimal(tok)
			if err != nil {
				return dst[:base], fmt.Errorf("field %q: %q: %w", s.name, tok, err)
			}
			storeDec(st[s.off:], d)
		}
	}
	if string(rest) != "}" {
		return dst[:base], fmt.Errorf("the result has more than this config's fields")
	}
	binary.LittleEndian.PutUint64(st[1:], n)
	if !bytes.Equal(a.Render(key, st, nil), val) {
		return dst[:base], fmt.Errorf("the result is not one this config renders (its numbers are not in sluice's exact form)")
	}
	return dst, nil
}

// parseSum parses a rendered sum: a decimal of at most 9 fractional digits, beyond dec's 128
// bits too (a sum is 192 bits).
func parseSum(tok []byte) (int192, error) {
	if d, err := parseDecimal(tok); err == nil {
		return int192{}.add(d), nil
	} else if !errors.Is(err, errNumberRange) {
		return int192{}, err
	}
	r, ok := new(big.Rat).SetString(string(tok))
	if !ok {
		return int192{}, errNumberSyntax
	}
	r.Mul(r, new(big.Rat).SetInt64(decUnit))
	if !r.IsInt() {
		return int192{}, errNumberSyntax
	}
	u := r.Num()
	neg := u.Sign() < 0
	u.Abs(u)
	if u.BitLen() > 191 {
		return int192{}, errNumberRange
	}
	b := u.FillBytes(make([]byte, 24))
	s := int192{w2: binary.BigEndian.Uint64(b), w1: binary.BigEndian.Uint64(b[8:]), w0: binary.BigEndian.Uint64(b[16:])}
	if neg {
		s = s.negate()
	}
	return s, nil
}
