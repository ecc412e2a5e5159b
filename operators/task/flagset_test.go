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
