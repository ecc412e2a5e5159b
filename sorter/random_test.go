package sorter

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
)

type testEntry struct {
	key, payload []byte
	ts, off      int64
	seq          int // insertion order, for exact ties
}

func randomKey(rng *rand.Rand, nkeys int) []byte {
	k := rng.IntN(nkeys)
	switch rng.IntN(6) {
	case 0:
		return nil // empty key
	case 1:
		return fmt.Appendf(nil, "c-%d", k) // varying lengths
	case 2:
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = byte(rng.IntN(3)) // NULs and short alphabets: prefix ties
		}
		return b
	default:
		return fmt.Appendf(nil, "customer-%07d", k) // 16 bytes, long common prefix
	}
}

func randomEntries(rng *rand.Rand, n int) []testEntry {
	nkeys := 1 + rng.IntN(200)
	es := make([]testEntry, n)
	for i := range es {
		e := testEntry{key: randomKey(rng, nkeys), seq: i}
		e.ts = rng.Int64N(20) - 10
		e.off = rng.Int64N(50)
		if rng.IntN(20) == 0 {
			e.ts = rng.Int64() - rng.Int64()
			e.off = -rng.Int64N(1 << 40) // not a Kafka offset, but must round-trip
		}
		e.payload = make([]byte, rng.IntN(40))
		if rng.IntN(50) == 0 {
			e.payload = make([]byte, 300+rng.IntN(2000)) // larger than a tiny chunk
		}
		for j := range e.payload {
			e.payload[j] = byte(rng.Uint32())
		}
		es[i] = e
	}
	return es
}

func sortedCopy(es []testEntry) []testEntry {
	want := append([]testEntry(nil), es...)
	sort.Slice(want, func(i, j int) bool {
		a, b := want[i], want[j]
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c < 0
		}
		if a.ts != b.ts {
			return a.ts < b.ts
		}
		if a.off != b.off {
			return a.off < b.off
		}
		return a.seq < b.seq
	})
	return want
}

// check merges s and compares the output with want. With nextKey it expects the first entry
// of each key only.
func check(t *testing.T, s *Sorter, want []testEntry, nextKey bool) {
	t.Helper()
	it, err := s.Merge()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = it.Close() }()
	if nextKey {
		var firsts []testEntry
		for i, e := range want {
			if i == 0 || !bytes.Equal(e.key, want[i-1].key) {
				firsts = append(firsts, e)
			}
		}
		want = firsts
	}
	next := it.Next
	if nextKey {
		next = it.NextKey
	}
	i := 0
	for next() {
		if i >= len(want) {
			t.Fatalf("more entries than the %d expected", len(want))
		}
		w := want[i]
		if !bytes.Equal(it.Key(), w.key) || it.Time() != w.ts || it.Offset() != w.off || !bytes.Equal(it.Payload(), w.payload) {
			t.Fatalf("entry %d: got (%q %d %d %x), want (%q %d %d %x) seq %d", i,
				it.Key(), it.Time(), it.Offset(), it.Payload(), w.key, w.ts, w.off, w.payload, w.seq)
		}
		i++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(want) {
		t.Fatalf("got %d entries, want %d", i, len(want))
	}
}

// TestRandomized adds random entries under random tiny budgets, chunk sizes, sort algorithms
// and compaction thresholds and compares Merge with a sort of a copy.
func TestRandomized(t *testing.T) {
	seed := uint64(os.Getpid())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	for iter := range 40 {
		budget := NewBudget(int64(64 + rng.IntN(16384)))
		chunk := MinChunkSize + rng.IntN(1024)
		if rng.IntN(4) == 0 {
			chunk = 0 // default, clamped to budget/4
		}
		s, err := New(Options{Dir: filepath.Join(t.TempDir(), "s"), Budget: budget, ChunkSize: chunk})
		if err != nil {
			t.Fatal(err)
		}
		s.radix = rng.IntN(2) == 0
		s.permute = rng.IntN(3) != 0
		s.maxRuns = 2 + rng.IntN(10)
		n := rng.IntN(2000)
		es := randomEntries(rng, n)
		for _, e := range es {
			if err := s.Add(e.key, e.ts, e.off, e.payload); err != nil {
				t.Fatal(err)
			}
			if budget.Used()+budget.kept() > budget.Limit() {
				t.Fatalf("budget used %d + kept %d > limit %d", budget.Used(), budget.kept(), budget.Limit())
			}
		}
		if s.Len() != int64(n) {
			t.Fatalf("Len %d, want %d", s.Len(), n)
		}
		if got := s.Stats().Runs; got > int64(s.maxRuns) {
			t.Fatalf("iter %d: %d runs, more than maxRuns %d", iter, got, s.maxRuns)
		}
		want := sortedCopy(es)
		check(t, s, want, false)
		check(t, s, want, true) // a second Merge re-reads the same data
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
		if budget.Used() != 0 || budget.kept() != 0 {
			t.Fatalf("budget used %d, kept %d after Reset", budget.Used(), budget.kept())
		}
		// Reuse after Reset.
		es = randomEntries(rng, rng.IntN(500))
		for _, e := range es {
			if err := s.Add(e.key, e.ts, e.off, e.payload); err != nil {
				t.Fatal(err)
			}
		}
		check(t, s, sortedCopy(es), false)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if budget.Used() != 0 {
			t.Fatalf("budget used %d after Close", budget.Used())
		}
	}
}

// TestMemoryBound adds ten times the budget and checks the memory stays within it.
func TestMemoryBound(t *testing.T) {
	const limit = 256 << 10
	budget := NewBudget(limit)
	s, err := New(Options{Dir: t.TempDir(), Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	key := make([]byte, 16)
	payload := make([]byte, 16)
	var added int64
	for i := 0; added < 10*limit; i++ {
		copy(key, fmt.Appendf(nil, "customer-%07d", (i*7919)%100000))
		if err := s.Add(key, int64(i), int64(i), payload); err != nil {
			t.Fatal(err)
		}
		added += int64(len(key) + len(payload))
		if st := s.Stats(); st.MemBytes > limit || budget.Used() > budget.Limit() {
			t.Fatalf("after %d bytes: MemBytes %d, budget %d/%d", added, st.MemBytes, budget.Used(), budget.Limit())
		}
	}
	st := s.Stats()
	if st.Runs < 10 {
		t.Fatalf("expected at least 10 spills, got %+v", st)
	}
	t.Logf("stats %+v", st)
	it, err := s.Merge()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var prev []byte
	for it.Next() {
		if bytes.Compare(prev, it.Key()) > 0 {
			t.Fatalf("out of order: %q after %q", it.Key(), prev)
		}
		prev = append(prev[:0], it.Key()...)
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if n != s.Len() {
		t.Fatalf("merged %d of %d", n, s.Len())
	}
}

// TestSharedBudgetConcurrent runs two sorters on one budget from two goroutines.
func TestSharedBudgetConcurrent(t *testing.T) {
	budget := NewBudget(64 << 10)
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = func() error {
				s, err := New(Options{Dir: filepath.Join(dir, fmt.Sprint(g)), Budget: budget, ChunkSize: 4 << 10})
				if err != nil {
					return err
				}
				defer func() { _ = s.Close() }()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				es := randomEntries(rng, 20000)
				for _, e := range es {
					if err := s.Add(e.key, e.ts, e.off, e.payload); err != nil {
						return err
					}
					if u := budget.Used(); u > budget.Limit() {
						return fmt.Errorf("budget used %d > limit", u)
					}
				}
				want := sortedCopy(es)
				it, err := s.Merge()
				if err != nil {
					return err
				}
				i := 0
				for it.Next() {
					w := want[i]
					if !bytes.Equal(it.Key(), w.key) || it.Time() != w.ts || it.Offset() != w.off || !bytes.Equal(it.Payload(), w.payload) {
						return fmt.Errorf("sorter %d entry %d differs", g, i)
					}
					i++
				}
				if i != len(want) {
					return fmt.Errorf("sorter %d: %d entries, want %d", g, i, len(want))
				}
				if s.Stats().Runs == 0 {
					return errors.New("expected spills")
				}
				return it.Err()
			}()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if budget.Used() != 0 {
		t.Fatalf("budget used %d after both closed", budget.Used())
	}
}

// TestIteratorInvalidated checks that Reset stops an open iterator with an error instead of
// letting it look finished.
func TestIteratorInvalidated(t *testing.T) {
	s, err := New(Options{Dir: t.TempDir(), Budget: NewBudget(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	for i := range 10 {
		if err := s.Add([]byte{byte(i)}, 0, int64(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	it, err := s.Merge()
	if err != nil {
		t.Fatal(err)
	}
	if !it.Next() {
		t.Fatal("no entry")
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if it.Next() {
		t.Fatal("Next after Reset")
	}
	if !errors.Is(it.Err(), errReset) {
		t.Fatalf("Err = %v", it.Err())
	}
}

// TestCompactionBounded starves a sorter (its budget is taken by another) so that it spills
// a run every few KiB (hundreds of runs), and checks that compaction keeps the runs under
// maxRuns while rewriting each byte only a few times.
func TestCompactionBounded(t *testing.T) {
	budget := NewBudget(1 << 20)
	dir := t.TempDir()
	hog, err := New(Options{Dir: filepath.Join(dir, "hog"), Budget: budget, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hog.Close() }()
	if err := hog.Add([]byte("k"), 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Dir: filepath.Join(dir, "s"), Budget: budget, ChunkSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	rng := newRand(9)
	es := randomEntries(rng, 20000)
	for _, e := range es {
		if err := s.Add(e.key, e.ts, e.off, e.payload); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Runs >= int64(s.maxRuns) || budget.Used() != 1<<20 {
		t.Fatalf("stats %+v, budget used %d", st, budget.Used())
	}
	amp := float64(s.written) / float64(st.SpilledBytes)
	t.Logf("stats %+v, written %d, amplification %.1f", st, s.written, amp)
	if amp > 4 {
		t.Fatalf("each byte written %.1f times on average", amp)
	}
	check(t, s, sortedCopy(es), false)
}

// TestStarvedPrivateChunk checks that a sorter that gets nothing from the budget holds at
// most one small private chunk (plus an oversized record's own chunk).
func TestStarvedPrivateChunk(t *testing.T) {
	budget := NewBudget(16 << 20)
	dir := t.TempDir()
	hog, err := New(Options{Dir: filepath.Join(dir, "hog"), Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hog.Close() }()
	for budget.Used() < budget.Limit() {
		if err := hog.Add(make([]byte, 1<<20), 0, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Options{Dir: filepath.Join(dir, "s"), Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	for i := range 5000 {
		if err := s.Add([]byte("customer-0000042"), 0, int64(i), []byte("0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
		if m := s.Stats().MemBytes; m > maxPrivateChunk {
			t.Fatalf("starved sorter holds %d bytes", m)
		}
	}
	big := make([]byte, 200<<10)
	if err := s.Add([]byte("big"), 0, 0, big); err != nil {
		t.Fatal(err)
	}
	if m := s.Stats().MemBytes; m > int64(len(big))+1024 {
		t.Fatalf("starved sorter holds %d bytes after a %d-byte record", m, len(big))
	}
	if budget.Used() != budget.Limit() || s.Stats().Runs == 0 {
		t.Fatalf("budget %d/%d, stats %+v", budget.Used(), budget.Limit(), s.Stats())
	}
}

func TestNewValidates(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []Options{
		{Dir: dir},
		{Budget: NewBudget(1)},
		{Dir: dir, Budget: NewBudget(1), ChunkSize: -1},
		{Dir: dir, Budget: NewBudget(1), ChunkSize: 10},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	s, err := New(Options{Dir: dir, Budget: NewBudget(1000)})
	if err != nil {
		t.Fatal(err)
	}
	if s.chunk != 224 {
		t.Errorf("default chunk for a 1000-byte budget = %d, want 224 (250 rounded down to slots)", s.chunk)
	}
	s, err = New(Options{Dir: dir, Budget: NewBudget(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	if s.chunk != DefaultChunkSize {
		t.Errorf("default chunk = %d", s.chunk)
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
