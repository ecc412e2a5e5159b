package task

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// benchPool is the orders workload reused by the benchmarks (100k keys); feed rewrites the
// offsets so that they keep increasing however many times the pool is replayed.
const benchKeys = 100_000

func benchTask(b *testing.B, mode string) (*Task, *fakeProducer, []*kgo.Record) {
	b.Helper()
	pool := ordersRecords(b, 200_000, benchKeys)
	db, err := state.Open(state.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	plan := mustPlan(b, testConfig(mode, 1000, 100, 200_000))
	tk := newTestTask(b, plan, db, 64<<20, 0)
	return tk, newFakeProducer(), pool
}

// feed processes n records from pool in batches of batch, starting at offset first, calling
// each after every batch.
func feed(b *testing.B, tk *Task, pool []*kgo.Record, first, n int64, lag func(end int64) int64, each func()) {
	const batch = 500
	buf := make([]*kgo.Record, 0, batch)
	for off := first; off < first+n; {
		buf = buf[:0]
		for ; off < first+n && len(buf) < batch; off++ {
			r := pool[off%int64(len(pool))]
			r.Offset = off
			buf = append(buf, r)
		}
		if tk.Observe(testTopic, lag(off), 0) {
			b.Fatal("unexpected switch")
		}
		if err := tk.Process(testTopic, buf); err != nil {
			b.Fatal(err)
		}
		if each != nil {
			each()
		}
	}
}

// discardProducer acknowledges every record at once and keeps nothing.
type discardProducer struct{ next int64 }

func (p *discardProducer) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	r.Offset = p.next
	p.next++
	promise(r, nil)
}

// BenchmarkProcessRealtime measures real-time mode: per record decode, cache lookup and fold
// over Pebble, with a checkpoint (outputs, changelog, state batch) every 10k records.
func BenchmarkProcessRealtime(b *testing.B) {
	tk, _, pool := benchTask(b, "never")
	prod := &discardProducer{}
	var since int
	ckpt := func() {
		pd, err := tk.Checkpoint(prod)
		if err != nil {
			b.Fatal(err)
		}
		if err := tk.Committed(pd); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up: every key has state once, as in a steady stream.
	feed(b, tk, pool, 0, int64(len(pool)), func(int64) int64 { return 0 }, nil)
	ckpt()
	b.ReportAllocs()
	b.ResetTimer()
	feed(b, tk, pool, int64(len(pool)), int64(b.N), func(int64) int64 { return 0 }, func() {
		if since += 500; since >= 10_000 || tk.NeedsCheckpoint() {
			ckpt()
			since = 0
		}
	})
	ckpt()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBacklogSortAndFold measures backlog mode: b.N records into the sorter (spilling
// beyond the budget), then the switch: merge, fold per key, write state in key order (loader
// path above LoaderThreshold), outputs and changelog.
func BenchmarkBacklogSortAndFold(b *testing.B) {
	tk, _, pool := benchTask(b, "always")
	prod := &discardProducer{}
	b.ReportAllocs()
	b.ResetTimer()
	n := int64(b.N)
	feed(b, tk, pool, 0, n, func(end int64) int64 { return n - end + 1<<40 }, nil)
	if !tk.Observe(testTopic, 0, 0) {
		b.Fatal("no switch at lag 0")
	}
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		b.Fatal(err)
	}
	if err := tk.Committed(pd); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkPartialsFold measures the backlog's pre-aggregation table alone: a record's lookup
// of its key's slot and a fold of 8 bytes into it, over 12,500 keys (100k keys over 8
// partitions) of up to 15 bytes in random order, with states of 48 bytes.
func BenchmarkPartialsFold(b *testing.B) {
	const keys, size = 12_500, 48
	p := newPartials(size, 100_000)
	ks := make([][]byte, 1<<16)
	rng := uint64(1)
	for i := range ks {
		rng = rng*6364136223846793005 + 1442695040888963407
		ks[i] = []byte("c-" + strconv.Itoa(int(rng>>33)%keys))
	}
	init := func(st []byte) { clear(st) }
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := ks[i&(len(ks)-1)]
		j, st, ok := p.slot(k, init)
		if !ok {
			b.Fatal("table full")
		}
		st[0]++
		st[40] += st[0]
		p.set(j, st, st)
	}
}
