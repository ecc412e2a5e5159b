package state

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Benchmarks. The bulk-load comparison (the runtime picks the winner for the switch):
//
//	go test -run XXX -bench BulkLoad -benchtime 3x -benchmem ./state/
//
// Keys are 16 bytes (8-byte big-endian index, 8 pseudo-random bytes), values 48 pseudo-random
// bytes, as an aggregate's state would be. The machine is shared, so benchmarks also report CPU
// time (user+system of the whole process, background compactions included) beside wall time.

const (
	benchKeyLen = 16
	benchValLen = 48
)

// benchKV writes key i and its value into k and v. Keys increase with i.
func benchKV(i uint64, k, v []byte) {
	binary.BigEndian.PutUint64(k, i)
	h := i*0x9E3779B97F4A7C15 + 1
	binary.BigEndian.PutUint64(k[8:], h)
	for j := 0; j < len(v); j += 8 {
		h ^= h << 13
		h ^= h >> 7
		h ^= h << 17
		binary.LittleEndian.PutUint64(v[j:], h)
	}
}

// loadedDB returns a store holding n keys in nsA1, flushed to sstables.
func loadedDB(b *testing.B, n int) *DB {
	d := openDB(b, Options{Dir: b.TempDir()})
	b.Cleanup(func() { d.Close() })
	l, err := d.NewLoader(nsA1)
	must(b, err)
	k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
	for i := range uint64(n) {
		benchKV(i*2, k, v) // even indexes: odd ones miss
		must(b, l.Add(k, v))
	}
	must(b, l.Commit())
	return d
}

func benchStore(b *testing.B, name string, n int) Store {
	if name == "pebble" {
		return loadedDB(b, n)
	}
	m := NewMem()
	bt := m.NewBatch()
	k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
	for i := range uint64(n) {
		benchKV(i*2, k, v)
		must(b, bt.Set(nsA1, k, v))
	}
	must(b, bt.Commit())
	return m
}

func benchGet(b *testing.B, miss uint64) {
	const n = 1 << 20
	for _, name := range []string{"pebble", "mem"} {
		b.Run(name, func(b *testing.B) {
			s := benchStore(b, name, n)
			rng := rand.New(rand.NewPCG(1, 2))
			k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
			dst := make([]byte, 0, benchValLen)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				benchKV(rng.Uint64N(n)*2+miss, k, v)
				var ok bool
				var err error
				dst, ok, err = s.Get(nsA1, k, dst[:0])
				if err != nil || ok == (miss == 1) {
					b.Fatalf("get: ok=%v err=%v", ok, err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkGetHit: random reads of present keys among 1M (block cache warm after a while).
func BenchmarkGetHit(b *testing.B) { benchGet(b, 0) }

// BenchmarkGetMiss: random reads of absent keys among 1M.
func BenchmarkGetMiss(b *testing.B) { benchGet(b, 1) }

// BenchmarkGetHitParallel: BenchmarkGetHit from GOMAXPROCS goroutines at once, as the tasks of a
// process read the one store: what the store's guard (a count of calls in flight) costs shared.
func BenchmarkGetHitParallel(b *testing.B) {
	const n = 1 << 20
	for _, name := range []string{"pebble", "mem"} {
		b.Run(name, func(b *testing.B) {
			s := benchStore(b, name, n)
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 2))
				k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
				dst := make([]byte, 0, benchValLen)
				for pb.Next() {
					benchKV(rng.Uint64N(n)*2, k, v)
					var ok bool
					var err error
					if dst, ok, err = s.Get(nsA1, k, dst[:0]); err != nil || !ok {
						b.Errorf("get: ok=%v err=%v", ok, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkBatchCommit: batches of 1000 random keys (of 1M) plus an offset, NoSync (the default)
// and Sync. Run with a fixed count (-benchtime 2000x) to compare: the memtable flushes every
// ~900 batches, so b.N changes what is measured.
func BenchmarkBatchCommit(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			d := openDB(b, Options{Dir: b.TempDir(), Sync: sync})
			defer d.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
			off := int64(0)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				bt := d.NewBatch()
				for range 1000 {
					benchKV(rng.Uint64N(1<<20), k, v)
					must(b, bt.Set(nsA1, k, v))
				}
				off += 1000
				must(b, bt.SetOffset(nsA1, off))
				must(b, bt.Commit())
			}
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64(b.N)*1000/(cpuTime()-cpu0).Seconds(), "keys/cpu-s")
		})
	}
}

// BenchmarkBulkLoad writes 1M keys into an empty namespace in key order, as the switch does:
// through a Loader (sstable + ingest), one big Batch, or Batches of 10k keys. keys/s counts
// until the last Commit returns; keys/s+flush until the memtable is flushed too (the loader's
// data is in an sstable already; batches leave it in the WAL and the memtable).
func BenchmarkBulkLoad(b *testing.B) {
	const n = 1_000_000
	type method func(d *DB) error
	mem4MiB := func(po *pebble.Options) { po.MemTableSize = 4 << 20 }
	loader := func(d *DB) error {
		l, err := d.NewLoader(nsA1)
		if err != nil {
			return err
		}
		k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
		for i := range uint64(n) {
			benchKV(i, k, v)
			if err := l.Add(k, v); err != nil {
				return err
			}
		}
		l.SetOffset(n)
		return l.Commit()
	}
	batches := func(per int) method {
		return func(d *DB) error {
			k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
			for start := 0; start < n; start += per {
				bt := d.NewBatch()
				for i := start; i < min(start+per, n); i++ {
					benchKV(uint64(i), k, v)
					if err := bt.Set(nsA1, k, v); err != nil {
						return err
					}
				}
				if err := bt.SetOffset(nsA1, int64(min(start+per, n))); err != nil {
					return err
				}
				if err := bt.Commit(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	cases := []struct {
		name    string
		run     method
		tune    func(*pebble.Options)
		prefill bool // the namespace already holds the same keys (a later switch)
	}{
		{"loader", loader, nil, false},
		{"batch=1M", batches(n), nil, false},
		{"batch=10k", batches(10_000), nil, false},
		{"loader/overwrite", loader, nil, true},
		{"batch=10k/overwrite", batches(10_000), nil, true},
		{"batch=10k/mem=4MiB", batches(10_000), mem4MiB, false}, // Pebble's default memtable
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var commit, flushed, cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				dir, err := os.MkdirTemp(b.TempDir(), "load")
				must(b, err)
				d := openDB(b, Options{Dir: dir, tune: c.tune})
				if c.prefill {
					must(b, loader(d))
				}
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				must(b, c.run(d))
				commit += time.Since(start)
				must(b, d.db.Flush())
				flushed += time.Since(start)
				cpu += cpuTime() - cpu0
				b.StopTimer()
				must(b, d.Close())
				must(b, os.RemoveAll(dir))
				b.StartTimer()
			}
			b.ReportMetric(float64(b.N)*n/commit.Seconds(), "keys/s")
			b.ReportMetric(float64(b.N)*n/flushed.Seconds(), "keys/s+flush")
			b.ReportMetric(float64(b.N)*n/cpu.Seconds(), "keys/cpu-s")
		})
	}
}

// BenchmarkMemTable chooses Options' memtable size (the one Pebble knob we change): 3M keys
// written in batches of 1000 plus an offset, then flushed; keys random among 1M (real-time
// checkpoints) or sequential (a fold written through batches). 4 MiB is Pebble's default.
//
//	go test -run XXX -bench MemTable -benchtime 3000x ./state/
func BenchmarkMemTable(b *testing.B) {
	for _, order := range []string{"random", "sequential"} {
		for _, mib := range []int64{4, 16, 32, 64} {
			b.Run(fmt.Sprintf("keys=%s/mem=%dMiB", order, mib), func(b *testing.B) {
				d := openDB(b, Options{Dir: b.TempDir(), tune: func(po *pebble.Options) {
					po.MemTableSize = uint64(mib) << 20
				}})
				defer d.Close()
				rng := rand.New(rand.NewPCG(1, 2))
				k, v := make([]byte, benchKeyLen), make([]byte, benchValLen)
				next := uint64(0)
				cpu0 := cpuTime()
				for b.Loop() {
					bt := d.NewBatch()
					for range 1000 {
						i := next
						if order == "random" {
							i = rng.Uint64N(1 << 20)
						}
						next++
						benchKV(i, k, v)
						must(b, bt.Set(nsA1, k, v))
					}
					must(b, bt.SetOffset(nsA1, int64(next)))
					must(b, bt.Commit())
				}
				must(b, d.db.Flush())
				b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "keys/s")
				b.ReportMetric(float64(b.N)*1000/(cpuTime()-cpu0).Seconds(), "keys/cpu-s")
			})
		}
	}
}
