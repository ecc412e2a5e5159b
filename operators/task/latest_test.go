package task

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLatestKeepsEachKeysLastRecord feeds a table random records of a few keys or many, of
// random sizes, under random bounds (keys, bytes, hit-rate window), and checks what the fold
// relies on: every record it hands on (evicted, drained, or refused in bypass for the caller
// to sort) is one it was given, unchanged; each key's last record is handed on; a record it
// drops is followed by a later one of its key that is handed on; it never holds more keys than
// its limit nor, beyond one record, more bytes; and when every key fits and hits are frequent it
// hands on exactly one record per key.
func TestLatestKeepsEachKeysLastRecord(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { latestRound(t, seed) })
	}
}

type latestRec struct {
	key, rec string
	ts, seq  int64
}

func latestRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := 1 + rng.IntN([]int{2, 10, 100, 5000}[rng.IntN(4)])
	limit := 1 + rng.IntN([]int{1, 8, 200}[rng.IntN(3)])
	maxBytes := []int64{1, 100, 4000, 1 << 20}[rng.IntN(4)]
	window := []int64{2, 16, defaultWindow}[rng.IntN(3)]
	defer func(old struct {
		keys          int
		bytes, window int64
	}) {
		latestLimits = old
	}(latestLimits)
	latestLimits.keys, latestLimits.bytes, latestLimits.window = limit, maxBytes, window
	l := newLatest()

	var handed []latestRec
	spill := func(key []byte, ts, seq int64, rec []byte) error {
		handed = append(handed, latestRec{string(key), string(rec), ts, seq})
		return nil
	}
	n := rng.IntN(3000)
	given := make([]latestRec, 0, n)
	for i := range n {
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		r := latestRec{key: k, rec: strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN([]int{4, 300, 3000}[rng.IntN(3)])), ts: int64(i / 10), seq: int64(i + 1)}
		given = append(given, r)
		held, err := l.add([]byte(r.key), r.ts, r.seq, []byte(r.rec), spill)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			if !l.bypass {
				t.Fatalf("record %d refused by a table not bypassed", i)
			}
			handed = append(handed, r)
		}
		if l.n > l.limit || (l.n > 1 && l.bytes > l.max) {
			t.Fatalf("record %d: holds %d keys (limit %d), %d bytes (max %d)", i, l.n, l.limit, l.bytes, l.max)
		}
		var b int64
		for j := range l.n {
			s := &l.ring[(l.head+j)%l.limit]
			b += int64(len(s.key) + len(s.rec))
			if pos, ok := l.idx[string(s.key)]; !ok || int(pos) != (l.head+j)%l.limit {
				t.Fatalf("record %d: key %q at %d, index says %d (%v)", i, s.key, (l.head+j)%l.limit, pos, ok)
			}
		}
		if b != l.bytes || len(l.idx) != l.n {
			t.Fatalf("record %d: counts %d bytes and %d keys, holds %d and %d", i, l.bytes, l.n, b, len(l.idx))
		}
	}
	if err := l.drain(spill); err != nil {
		t.Fatal(err)
	}
	if l.len() != 0 || l.bytes != 0 || len(l.idx) != 0 {
		t.Fatalf("drained table holds %d keys, %d bytes", l.len(), l.bytes)
	}

	bySeq := map[int64]latestRec{}
	for _, r := range given {
		bySeq[r.seq] = r
	}
	handedSeq := map[int64]bool{}
	lastHanded := map[string]int64{}
	for _, h := range handed {
		g, ok := bySeq[h.seq]
		if !ok || g != h || handedSeq[h.seq] {
			t.Fatalf("handed on %+v: given %+v (%v), twice %v", h, g, ok, handedSeq[h.seq])
		}
		handedSeq[h.seq] = true
		lastHanded[h.key] = max(lastHanded[h.key], h.seq)
	}
	last := map[string]int64{}
	for _, r := range given {
		last[r.key] = r.seq
	}
	for k, seq := range last {
		if lastHanded[k] != seq {
			t.Fatalf("key %q: last record %d, last handed on %d", k, seq, lastHanded[k])
		}
	}
	for _, r := range given { // a dropped record: its key's last is handed on, later (above)
		if !handedSeq[r.seq] && last[r.key] <= r.seq {
			t.Fatalf("record %+v dropped though it is its key's last", r)
		}
	}
	if len(last) <= limit && maxBytes == 1<<20 && n > 0 && !l.bypass && len(handed) != len(last) {
		t.Fatalf("%d keys within a table of %d: handed on %d records", len(last), limit, len(handed))
	}
}
