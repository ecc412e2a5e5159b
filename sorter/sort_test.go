package sorter

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// deepKey returns keys that tie on their first 8 bytes (and often on many more) by the
// thousand: composite keys as a group_by of several fields writes them, long keys over a
// two-letter alphabet whose lengths end on and around the prefix windows, and keys that are
// prefixes of each other.
func deepKey(rng *rand.Rand) []byte {
	switch rng.IntN(4) {
	case 0:
		ch := []string{"Apple", "Google", "Baidu", "channel-1", "channel-10", "channel-100"}[rng.IntN(6)]
		return fmt.Appendf(nil, `{"channel":%q,"day":"2015-07-%02d","bidder":%d}`, ch, 15+rng.IntN(3), rng.IntN(3000))
	case 1:
		k := []byte("shared-prefix-of-24-byte")
		for range rng.IntN(24) {
			k = append(k, byte(rng.IntN(2)))
		}
		return k
	case 2:
		return bytes.Repeat([]byte{'a'}, rng.IntN(40)) // prefixes of each other
	default:
		return fmt.Appendf(nil, `{"channel":"Apple","day":"2015-07-15","bidder":%d}`, rng.IntN(5)) // many equal keys
	}
}

// TestSortSlotsDeepTies: a chunk whose keys tie on their prefix far beyond the first 8 bytes
// sorts, with the radix sort, into the order of (key, time, offset, insertion) a plain sort
// of the same entries gives.
func TestSortSlotsDeepTies(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s, err := New(Options{Dir: t.TempDir(), Budget: NewBudget(1 << 30), ChunkSize: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		n := 1000 + rng.IntN(60000)
		var want []testEntry
		for i := range n {
			e := testEntry{key: deepKey(rng), ts: rng.Int64N(4), off: rng.Int64N(3), seq: i}
			if err := s.Add(e.key, e.ts, e.off, nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, e)
		}
		want = sortedCopy(want)
		c := s.cur
		sortSlots(c.buf, c.slots(), true)
		for i, e := range c.slots() {
			if k := recordKey(c.buf, e.pos); !bytes.Equal(k, want[i].key) || e.ts != want[i].ts || e.off != want[i].off {
				t.Fatalf("seed %d: slot %d of %d: got (%q, %d, %d), want (%q, %d, %d)", seed, i, n, k, e.ts, e.off, want[i].key, want[i].ts, want[i].off)
			}
		}
		// Exact ties keep their insertion order: positions increase with it.
		for i := 1; i < n; i++ {
			a, b := c.slots()[i-1], c.slots()[i]
			if bytes.Equal(recordKey(c.buf, a.pos), recordKey(c.buf, b.pos)) && a.ts == b.ts && a.off == b.off && a.pos > b.pos {
				t.Fatalf("seed %d: an exact tie out of insertion order at slot %d", seed, i)
			}
		}
		_ = s.Close()
	}
}
