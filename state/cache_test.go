package state

import (
	"fmt"
	"testing"
)

// TestBlockCacheKeepsBlocks: reads of a flushed table are served from the block cache the
// second time. Pebble charges its memtables to the block cache; a cache sized without room for
// them held nothing, and every read of a flushed key decompressed its block again.
func TestBlockCacheKeepsBlocks(t *testing.T) {
	db, err := Open(Options{Dir: t.TempDir(), CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns := Namespace{Operator: "customers#table", Partition: 0}
	const n = 50_000
	b := db.NewBatch()
	for i := range n {
		if err := b.Set(ns, fmt.Appendf(nil, "c%07d", i), fmt.Appendf(nil, `{"customer_id":"c%07d","region":"r-%02d"}`, i, i%16)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.db.Flush(); err != nil {
		t.Fatal(err)
	}
	read := func() {
		for i := range n {
			if _, ok, err := db.Get(ns, fmt.Appendf(nil, "c%07d", (i*7919)%n), nil); err != nil || !ok {
				t.Fatalf("get %d: %v %v", i, ok, err)
			}
		}
	}
	read() // fills the cache
	before := db.db.Metrics().BlockCache
	read()
	after := db.db.Metrics().BlockCache
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	if misses*10 > hits {
		t.Fatalf("second pass over a flushed table of %d keys: %d block cache hits, %d misses; want the blocks kept", n, hits, misses)
	}
}
