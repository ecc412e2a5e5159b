package producer

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Known values from Kafka's own tests (UtilsTest.testMurmur2) and its default partitioner.
func TestMurmur2(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(Murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPartitioner(t *testing.T) {
	p := Partitioner().ForTopic("t")
	if got := p.Partition(&kgo.Record{Partition: 5}, 8); got != 5 {
		t.Fatalf("explicit partition moved to %d", got)
	}
	k := []byte("c-0000042")
	want := int(Murmur2(k)&0x7fffffff) % 8
	if got := p.Partition(&kgo.Record{Partition: -1, Key: k}, 8); got != want {
		t.Fatalf("keyed record went to %d, want %d", got, want)
	}
	if got := p.Partition(&kgo.Record{Partition: -1}, 8); got != 0 {
		t.Fatalf("null key went to %d", got)
	}
}

// TestEmptyCheckpointsDoNotStall: a checkpoint with no records and no offsets (every task is
// sorting a backlog) must not end an empty transaction. franz-go holds its session lock for
// 500 ms after ending a transaction without offsets, and the next checkpoint waited for it: the
// backlog ran at a third of its speed. A real checkpoint after them still commits its record.
func TestEmptyCheckpointsDoNotStall(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := Open(Options{Brokers: c.ListenAddrs(), Group: "g", TransactionalID: "g-0", Guarantee: ExactlyOnce, Topics: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 16
	start := time.Now()
	for range n {
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.End(ctx, nil, true); err != nil || !ok {
			t.Fatalf("empty End = %v, %v", ok, err)
		}
	}
	// n stalls would take 7.5 s or more; without them the loop takes milliseconds (a loaded
	// machine under -race has taken a second).
	if d := time.Since(start); d > time.Duration(n-1)*500*time.Millisecond*2/3 {
		t.Fatalf("%d empty checkpoints took %v: ending empty transactions stalls", n, d)
	}
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	var perr error
	s.Produce(&kgo.Record{Topic: "out", Partition: 0, Key: []byte("k"), Value: []byte("v")}, func(_ *kgo.Record, err error) { perr = err })
	if err := s.Flush(ctx); err != nil || perr != nil {
		t.Fatalf("flush: %v, produce: %v", err, perr)
	}
	if ok, err := s.End(ctx, nil, true); err != nil || !ok {
		t.Fatalf("End = %v, %v", ok, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// A fetch may come back empty before the commit marker is visible: poll until the record
	// arrives, with a deadline of its own.
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	for got := 0; got == 0; {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			t.Fatalf("read_committed: no record within 30 s; want the committed record")
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("read_committed: %v", err) })
		if got = fs.NumRecords(); got > 1 {
			t.Fatalf("read_committed: %d records; want the one committed record", got)
		}
	}
}

// TestLimitsBatchMaxBytes: a topic's batches are bounded by its max.message.bytes, capped at
// BatchMaxBytes, floored at franz-go's 512; a topic not read at start gets Kafka's historical
// default.
func TestLimitsBatchMaxBytes(t *testing.T) {
	l := Limits{"small": 16 << 10, "large": 64 << 20, "tiny": 100, "default": 1_048_588}
	for topic, want := range map[string]int32{
		"small":   16 << 10,
		"large":   4 << 20,
		"tiny":    512,
		"default": 1_048_588,
		"unknown": 1_000_012,
		"":        1_000_012,
	} {
		if got := l.BatchMaxBytes(topic); got != want {
			t.Errorf("BatchMaxBytes(%q) = %d, want %d", topic, got, want)
		}
	}
	if got := Limits(nil).BatchMaxBytes("x"); got != 1_000_012 {
		t.Errorf("nil Limits: BatchMaxBytes = %d, want 1000012", got)
	}
}

// TestBatchesFitTheTopic: the broker (kfake checks it as Kafka does) refuses a batch larger
// than its topic's max.message.bytes, measured compressed. Batched up to a fixed 4 MiB, many
// small incompressible records to a topic that accepts 16 KiB were refused (MESSAGE_TOO_LARGE)
// and every checkpoint aborted; so were dead letters (up to ~512 KiB each) to a dead-letter
// topic at the broker's default. With each topic's batches bounded by its limit (the dead-letter
// topic, not in Limits, by the default), one transaction of both commits.
func TestBatchesFitTheTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "g-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const small = 16 << 10
	adm := kadm.NewClient(mustClient(t, c.ListenAddrs()))
	resp, err := adm.CreateTopic(t.Context(), 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr(strconv.Itoa(small))}, "small")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Brokers: c.ListenAddrs(), Group: "g", TransactionalID: "g-0", Guarantee: ExactlyOnce, Topics: []string{"in"},
		Limits: Limits{"small": small}, Extra: []kgo.Opt{kgo.ProducerLinger(time.Second)}}) // one batch per topic, were it not bounded
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	var mu sync.Mutex
	var perr error
	promise := func(_ *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && perr == nil {
			perr = err
		}
	}
	for range 8 {
		s.Produce(&kgo.Record{Topic: "g-dlq", Partition: 0, Value: random(300 << 10)}, promise)
	}
	for range 64 {
		s.Produce(&kgo.Record{Topic: "small", Partition: 0, Value: random(6 << 10)}, promise)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if perr != nil {
		t.Fatalf("producing 8 dead letters of 300 KiB and 64 records of 6 KiB to a topic of 16 KiB: %v", perr)
	}
	if ok, err := s.End(ctx, nil, true); err != nil || !ok {
		t.Fatalf("End = %v, %v", ok, err)
	}
	ends, err := adm.ListEndOffsets(ctx, "small", "g-dlq")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int64{"small": 64, "g-dlq": 8} {
		// The end offset counts the records and the commit marker.
		if o, _ := ends.Lookup(topic, 0); o.Offset != want+1 {
			t.Errorf("%s ends at %d, want %d records and a commit marker", topic, o.Offset, want)
		}
	}
}

func mustClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestCompression: kafka.compression is the codec of the batches a Session produces, as a
// consumer sees them (the codec is in each record's batch attributes), none by default, and
// every codec's records read back as produced.
func TestCompression(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	codecs := []struct {
		name string
		want uint8 // the codec's number in a batch's attributes (Kafka's protocol)
	}{{"", 0}, {"none", 0}, {"gzip", 1}, {"snappy", 2}, {"lz4", 3}, {"zstd", 4}}
	value := func(name string) []byte { return append([]byte(name+":"), make([]byte, 4<<10)...) } // compressible
	for _, tc := range codecs {
		s, err := Open(Options{Brokers: c.ListenAddrs(), Group: "g", Guarantee: AtLeastOnce, Topics: []string{"in"}, Compression: tc.name})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var perr error
		s.Produce(&kgo.Record{Topic: "out", Partition: 0, Value: value(tc.name)}, func(_ *kgo.Record, err error) { perr = err })
		if err := s.Flush(ctx); err != nil || perr != nil {
			t.Fatalf("%q: flush: %v, produce: %v", tc.name, err, perr)
		}
		s.Close(ctx)
		cancel()
	}
	if _, err := Codec("brotli"); err == nil {
		t.Fatal(`Codec("brotli"): no error`)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("out"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < len(codecs) && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	if len(recs) != len(codecs) {
		t.Fatalf("read %d records, want %d", len(recs), len(codecs))
	}
	for i, tc := range codecs {
		if got := recs[i].Attrs.CompressionType(); got != tc.want {
			t.Errorf("compression %q: batch codec %d, want %d", tc.name, got, tc.want)
		}
		if !bytes.Equal(recs[i].Value, value(tc.name)) {
			t.Errorf("compression %q: read back %.20q..., want what was produced", tc.name, recs[i].Value)
		}
	}
}
