package sorter

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the process's user+system CPU time. Benchmarks report it next to wall time
// because the machine is shared: CPU time is far less sensitive to other processes.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchKeys returns n distinct 16-byte keys "customer-0000042".
func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "customer-%07d", i)
	}
	return keys
}

// randomKeys returns n random 16-byte keys (no common prefix).
func randomKeys(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, n)
	for i := range keys {
		k := make([]byte, 16)
		for j := range k {
			k[j] = byte(rng.Uint32())
		}
		keys[i] = k
	}
	return keys
}

// compositeKeys returns n distinct keys as a group_by of three fields writes them (Nexmark
// q16's distinct bidders per channel and day): they tie on their first 8 bytes, and within a
// channel on about 30.
func compositeKeys(n int) [][]byte {
	channels := []string{"Apple", "Google", "Facebook", "Baidu", "channel-1", "channel-2"}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, `{"channel":%q,"day":"2015-07-%02d","bidder":%d}`, channels[i%len(channels)], 15+i/len(channels)%4, i)
	}
	return keys
}

// setKey writes "customer-%07d" of id into the 16-byte key k without allocating.
func setKey(k []byte, id int) {
	copy(k, "customer-")
	for i := 15; i >= 9; i-- {
		k[i] = byte('0' + id%10)
		id /= 10
	}
}

// BenchmarkAdd measures Add, resetting the sorter every 1M entries off the clock. The key is
// rewritten in place each time, as a decoder would hand it over. "fastpath" uses one 128 MiB
// chunk, so it measures the copy alone; "chunk=4MiB" (the default) includes the sort and the
// sorted copy of each chunk as it fills, which Add does when it takes the next chunk. No
// spills happen. allocs/op must be 0: a chunk is taken every few MiB only.
func BenchmarkAdd(b *testing.B) {
	for _, bc := range []struct {
		name  string
		chunk int
	}{{"fastpath", 128 << 20}, {"chunk=4MiB", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			key := make([]byte, 16)
			payload := []byte("0123456789abcdef")
			s, err := New(Options{Dir: b.TempDir(), Budget: NewBudget(256 << 20), ChunkSize: bc.chunk})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			b.SetBytes(int64(len(key) + len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			var cpu time.Duration
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				j := i & (1<<20 - 1)
				if j == 0 && i > 0 {
					b.StopTimer()
					cpu += cpuTime() - c0
					if err := s.Reset(); err != nil {
						b.Fatal(err)
					}
					c0 = cpuTime()
					b.StartTimer()
				}
				setKey(key, (i*7919)%100_000)
				if err := s.Add(key, int64(i), int64(i), payload); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu += cpuTime() - c0
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			if s.Stats().Runs != 0 {
				b.Fatal("unexpected spill")
			}
		})
	}
}

// fillOneChunk adds n entries to a sorter whose single chunk holds them all and returns it
// with a copy of the unsorted slots.
func fillOneChunk(b *testing.B, keys [][]byte, n int) (*Sorter, []entry) {
	s, err := New(Options{Dir: b.TempDir(), Budget: NewBudget(1 << 30), ChunkSize: 128 << 20})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	payload := []byte("0123456789abcdef")
	for i := range n {
		if err := s.Add(keys[rng.IntN(len(keys))], rng.Int64N(1000), int64(i), payload); err != nil {
			b.Fatal(err)
		}
	}
	if len(s.chunks) != 1 {
		b.Fatal("more than one chunk")
	}
	return s, slices.Clone(s.cur.slots())
}

// BenchmarkSort1M sorts the slots of one chunk of 1M entries (16-byte keys, 16-byte payloads)
// with the radix sort and with slices.SortFunc (pdqsort), for keys with a long common prefix
// ("customer-0000042", 100k and 1M distinct), for composite keys (compositeKeys, 100k
// distinct) and for random keys. "pdq-nolcp" skips the
// common-prefix normalization, to show what it buys.
func BenchmarkSort1M(b *testing.B) {
	const n = 1_000_000
	for _, ks := range []struct {
		name string
		keys [][]byte
	}{
		{"customer100k", benchKeys(100_000)},
		{"customer1M", benchKeys(1_000_000)},
		{"composite100k", compositeKeys(100_000)},
		{"random1M", randomKeys(1_000_000)},
	} {
		s, unsorted := fillOneChunk(b, ks.keys, n)
		c := s.cur
		for _, alg := range []string{"radix", "pdq", "pdq-nolcp"} {
			b.Run(ks.name+"/"+alg, func(b *testing.B) {
				b.ReportMetric(0, "ns/op")
				var total, cpu time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					copy(c.slots(), unsorted)
					b.StartTimer()
					start, c0 := time.Now(), cpuTime()
					switch alg {
					case "radix":
						sortSlots(c.buf, c.slots(), true)
					case "pdq":
						sortSlots(c.buf, c.slots(), false)
					default:
						ss := segSorter{buf: c.buf}
						slices.SortFunc(c.slots(), ss.cmp)
					}
					total += time.Since(start)
					cpu += cpuTime() - c0
				}
				b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/sort")
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/sort")
			})
		}
		_ = s.Close()
	}
}

// BenchmarkMergeInMemory adds 1M entries with the default chunk size (no spill) and times
// the Add phase (which sorts each chunk as it fills) and Merge plus a full iteration,
// with and without the sorted copy of full chunks ("permute").
func BenchmarkMergeInMemory(b *testing.B) {
	key := make([]byte, 16)
	payload := []byte("0123456789abcdef")
	for _, permute := range []bool{true, false} {
		b.Run(fmt.Sprintf("permute=%v", permute), func(b *testing.B) {
			var addCPU, mergeCPU time.Duration
			rng := rand.New(rand.NewPCG(5, 6))
			for i := 0; i < b.N; i++ {
				s, err := New(Options{Dir: b.TempDir(), Budget: NewBudget(256 << 20)})
				if err != nil {
					b.Fatal(err)
				}
				s.permute = permute
				c0 := cpuTime()
				for j := range 1_000_000 {
					setKey(key, rng.IntN(100_000))
					if err := s.Add(key, int64(j), int64(j), payload); err != nil {
						b.Fatal(err)
					}
				}
				c1 := cpuTime()
				it, err := s.Merge()
				if err != nil {
					b.Fatal(err)
				}
				m := 0
				for it.Next() {
					m++
				}
				if it.Err() != nil || m != 1_000_000 {
					b.Fatal(it.Err(), m)
				}
				mergeCPU += cpuTime() - c1
				addCPU += c1 - c0
				_ = s.Close()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(addCPU.Nanoseconds())/float64(b.N)/1e6, "add_cpu-ns/entry")
			b.ReportMetric(float64(mergeCPU.Nanoseconds())/float64(b.N)/1e6, "merge_cpu-ns/entry")
		})
	}
}

// BenchmarkMergeSpilled adds 10M entries (16-byte keys "customer-0000042", 16-byte payloads,
// uniform over 100k or 5M keys) under a 64 MiB budget, then merges the runs and the memory. It reports the add
// phase (including sorting and spilling) and the merge phase separately.
func BenchmarkMergeSpilled(b *testing.B) {
	const n = 10_000_000
	for _, nkeys := range []int{100_000, 5_000_000} {
		b.Run(fmt.Sprintf("keys=%d", nkeys), func(b *testing.B) {
			key := make([]byte, 16)
			payload := []byte("0123456789abcdef")
			var addDur, mergeDur, addCPU, mergeCPU time.Duration
			var st Stats
			for i := 0; i < b.N; i++ {
				s, err := New(Options{Dir: b.TempDir(), Budget: NewBudget(64 << 20)})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(7, 8))
				start, c0 := time.Now(), cpuTime()
				for j := range n {
					setKey(key, rng.IntN(nkeys))
					if err := s.Add(key, int64(j), int64(j), payload); err != nil {
						b.Fatal(err)
					}
				}
				mid, c1 := time.Now(), cpuTime()
				it, err := s.Merge()
				if err != nil {
					b.Fatal(err)
				}
				m := 0
				for it.Next() {
					m++
				}
				if it.Err() != nil || m != n {
					b.Fatal(it.Err(), m)
				}
				end, c2 := time.Now(), cpuTime()
				addDur += mid.Sub(start)
				mergeDur += end.Sub(mid)
				addCPU += c1 - c0
				mergeCPU += c2 - c1
				st = s.Stats()
				_ = s.Close()
			}
			sec := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(n/sec(addDur)/1e6, "add_Mentries/s")
			b.ReportMetric(n/sec(mergeDur)/1e6, "merge_Mentries/s")
			b.ReportMetric(float64(st.SpilledBytes)/sec(mergeDur)/1e6, "merge_MB/s")
			b.ReportMetric(float64(st.SpilledBytes)/1e6, "spilled_MB")
			b.ReportMetric(float64(addCPU.Nanoseconds())/float64(b.N)/n, "add_cpu-ns/entry")
			b.ReportMetric(float64(mergeCPU.Nanoseconds())/float64(b.N)/n, "merge_cpu-ns/entry")
			b.ReportMetric(float64(st.Runs), "runs")
		})
	}
}
