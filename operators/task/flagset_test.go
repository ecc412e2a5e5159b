package task

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFlagSet holds a flagSet to a map over many keys, some of them prefixes of others, with
// resets.
func TestFlagSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s, want := newFlagSet(), map[string]uint64{}
	for i := range 200000 {
		if i%50000 == 49999 {
			s.reset()
			clear(want)
		}
		k := fmt.Sprintf(`{"day":"2015-07-15","bidder":%d}`, rng.IntN(20000))
		if rng.IntN(3) == 0 {
			k = k[:rng.IntN(len(k)+1)]
		}
		if got := s.mask([]byte(k)); got != want[k] {
			t.Fatalf("step %d: mask(%q) = %b, want %b", i, k, got, want[k])
		}
		m := uint64(1) << rng.IntN(4)
		s.add([]byte(k), m)
		want[k] |= m
		if s.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", i, s.len(), len(want))
		}
	}
}

// TestSlotSetFull: a set is full at its writer's limit in keys or at maxSlotSetBytes, whichever
// comes first, and empty again after a reset.
func TestSlotSetFull(t *testing.T) {
	s := newFlagSet()
	key := func(i int) []byte {
		return fmt.Appendf(nil, `{"channel":"channel-%06d","day":"2015-07-15","bidder":%08d}`, i%1000, i)
	}
	n := 0
	for ; !s.full(1 << 30); n++ {
		s.add(key(n), 1)
	}
	per := len(key(0)) + 8 + entryBytes
	if n < maxSlotSetBytes/per || n > maxSlotSetBytes/per+1 {
		t.Errorf("full by bytes after %d keys of %d bytes each, want %d", n, per, maxSlotSetBytes/per)
	}
	s.reset()
	if s.full(1) || s.len() != 0 || s.mask(key(0)) != 0 {
		t.Errorf("after reset: len %d, full(1) %v", s.len(), s.full(1))
	}
	for i := range 10 {
		s.add(key(i), 2)
	}
	if !s.full(10) || s.full(11) {
		t.Errorf("limit in keys: full(10) %v, full(11) %v with 10 keys", s.full(10), s.full(11))
	}
}
