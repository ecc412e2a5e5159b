package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// This file holds the tests of topics that accept small records: a pass-through pipeline whose
// sink takes 16 KiB, over the real broker and over kfake (which checks max.message.bytes as
// Kafka does), and an opt-in measure of a pass-through's speed.

// sinkLimit is the sink's max.message.bytes in TestSmallSinkTopic.
const sinkLimit = 16 << 10

// passThroughConfig returns a pipeline of group that writes every record of in (JSON with a
// numeric seq field) to sink, unchanged, through a filter that keeps them all.
func passThroughConfig(t *testing.T, brokers, group, in, sink string) *configs.Config {
	t.Helper()
	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: %s
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: %q, max_checkpoint_failures: 5}
http: {listen: "off"}
sources:
  events: {topic: %s, format: json}
operators:
  - name: pass
    filter: {input: events, expr: "seq >= 0"}
    output: out
sinks:
  out: {topic: %s, format: json}
`, brokers, group, t.TempDir(), in, sink)
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// waitTopicCommitted waits until the group has committed every offset of topic, failing early if
// the engine's Run returns (with max_checkpoint_failures 5, a pipeline whose checkpoints keep
// aborting stops within seconds).
func waitTopicCommitted(t *testing.T, e *engine, adm *kadm.Client, topic string, within time.Duration) {
	t.Helper()
	waitFor(t, within, "the group to commit every offset of "+topic, func() (bool, error) {
		if err := e.failed(); err != nil {
			return false, err
		}
		ends, err := adm.ListEndOffsets(t.Context(), topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return false, nil
		}
		fo, err := adm.FetchOffsets(t.Context(), e.cfg.Group)
		if err != nil {
			return false, nil // the group forms
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := fo.Lookup(topic, o.Partition); !ok || c.At != o.Offset {
				done = false
			}
		})
		return done, nil
	})
}

// randomText returns n random letters and digits: text that Snappy, franz-go's default codec,
// cannot shrink much, so a batch is about as large compressed as not.
func randomText(rng *rand.Rand, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// TestSmallSinkTopic: the sink accepts records of 16 KiB (max.message.bytes), the broker's
// default being far larger. The producer used to batch up to 4 MiB for every topic but the
// dead-letter topic, so batches of many records were refused (MESSAGE_TOO_LARGE) and every
// checkpoint aborted, rewound and failed again (sluice gave up after
// processing.max_checkpoint_failures). Now the sink's batches are sized by its limit: a
// pass-through of 1,500 records of up to 16 KiB less a margin, over two partitions, arrives
// exactly once, byte for byte, with no checkpoint aborted; and the 4 records larger than the
// limit (by at least 1 KiB: the exact boundary is TestBatchBytesMatchesFranzGo's) go to the
// dead-letter topic with a reason that says "too large", the topic and its limit, counted in
// sluice_dead_letters_total. Over the real broker and over kfake.
func TestSmallSinkTopic(t *testing.T) {
	t.Run("Kafka", func(t *testing.T) { testSmallSinkTopic(t, kafkatest.Brokers(t)) })
	t.Run("Fake", func(t *testing.T) { testSmallSinkTopic(t, kafkatest.Fake(t, 2)) })
}

func testSmallSinkTopic(t *testing.T, brokers string) {
	in, sink, group := kafkatest.UniqueName(t, "in"), kafkatest.UniqueName(t, "sink"), kafkatest.UniqueName(t, "g")
	kafkatest.CreateTopic(t, brokers, in, 2, nil)
	kafkatest.CreateTopic(t, brokers, sink, 2, map[string]*string{"max.message.bytes": kadm.StringPtr(strconv.Itoa(sinkLimit))})
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 1500
	tooLarge := map[int]int{100: sinkLimit + 1024, 500: 20 << 10, 900: 64 << 10, 1400: 300 << 10} // seq -> pad bytes
	var recs []*kgo.Record
	for seq := range n {
		pad, over := tooLarge[seq]
		if !over {
			pad = 50 + rng.IntN(sinkLimit-400) // with the key, the rest of the JSON and the overheads, under the limit
		}
		v := fmt.Sprintf(`{"seq":%d,"pad":%q}`, seq, randomText(rng, pad))
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte("k-" + strconv.Itoa(seq)), Value: []byte(v)})
	}
	cl := kafkatest.Client(t, brokers)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing the input: %v", err)
	}

	start := time.Now()
	e := newEngine(t, passThroughConfig(t, brokers, group, in, sink), nil)
	e.start(t)
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	waitTopicCommitted(t, e, adm, in, 60*time.Second)
	took := time.Since(start)

	addrs := kafkatest.SplitBrokers(brokers)
	seen := map[string]int{}
	for _, r := range readCommitted(t, addrs, sink) {
		seen[string(r.Key)]++
	}
	for seq, r := range recs {
		k := string(r.Key)
		_, over := tooLarge[seq]
		switch got := seen[k]; {
		case over && got != 0:
			t.Errorf("record %s (%d bytes) is in the sink %d times; it is larger than the sink accepts", k, len(r.Value), got)
		case !over && got != 1:
			t.Errorf("record %s (%d bytes) is in the sink %d times, want exactly once", k, len(r.Value), got)
		}
	}
	dead := readCommitted(t, addrs, e.cfg.DLQTopic())
	byKey := map[string]*kgo.Record{}
	for _, r := range recs {
		byKey[string(r.Key)] = r
	}
	deadSeen := map[string]bool{}
	for _, dl := range dead {
		k := string(dl.Key)
		src, ok := byKey[k]
		if seq, _ := strconv.Atoi(strings.TrimPrefix(k, "k-")); !ok || deadSeen[k] || tooLarge[seq] == 0 {
			t.Errorf("unexpected dead letter %q (repeated: %v): %s", k, deadSeen[k], header(dl, codec.HeaderError))
			continue
		}
		deadSeen[k] = true
		reason := header(dl, codec.HeaderError)
		for _, want := range []string{"too large", "topic " + sink, "limit of " + strconv.Itoa(sinkLimit) + " bytes"} {
			if !strings.Contains(reason, want) {
				t.Errorf("dead letter %s: reason %q does not say %q", k, reason, want)
			}
		}
		if got := header(dl, codec.HeaderDestinationTopic); got != sink {
			t.Errorf("dead letter %s: %s = %q, want %s", k, codec.HeaderDestinationTopic, got, sink)
		}
		if cut := header(dl, codec.HeaderOriginalValueSize); cut != "" {
			if cut != strconv.Itoa(len(src.Value)) || !strings.HasPrefix(string(src.Value), string(dl.Value)) {
				t.Errorf("dead letter %s: value of %d bytes, original size %s; want a prefix of the %d bytes", k, len(dl.Value), cut, len(src.Value))
			}
		} else if string(dl.Value) != string(src.Value) {
			t.Errorf("dead letter %s: value of %d bytes, want the record's %d", k, len(dl.Value), len(src.Value))
		}
	}
	if len(deadSeen) != len(tooLarge) {
		t.Errorf("%d dead letters of records too large, want %d", len(deadSeen), len(tooLarge))
	}
	if got := e.metric(t, "sluice_dead_letters_total"); got != float64(len(tooLarge)) {
		t.Errorf("sluice_dead_letters_total = %v, want %d", got, len(tooLarge))
	}
	if got := e.metric(t, "sluice_txn_aborts_total"); got != 0 {
		t.Errorf("sluice_txn_aborts_total = %v, want 0", got)
	}
	t.Logf("%d records (%d too large) passed through a sink of max.message.bytes %d in %v; aborts %v",
		n, len(tooLarge), sinkLimit, took.Round(time.Millisecond), e.metric(t, "sluice_txn_aborts_total"))
	e.stopClean(t)
}

// passThroughEnv sets how many records TestPassThroughSpeed passes through; unset, it is skipped.
const passThroughEnv = "SLUICE_PASSTHROUGH_RECORDS"

// TestPassThroughSpeed (opt-in: SLUICE_PASSTHROUGH_RECORDS=1000000, with SLUICE_TEST_KAFKA) is
// the measure of a pass-through like Nexmark q0: records of about 200 bytes of JSON, over 4
// partitions, through a filter that keeps them all, to a sink the pipeline creates (the broker's
// default max.message.bytes). It logs the records per second, the checkpoints committed and
// aborted, and checks that every record arrived (counting the sink's committed records).
func TestPassThroughSpeed(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(passThroughEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of records to pass through", passThroughEnv)
	}
	brokers := kafkatest.Brokers(t)
	in, sink, group := kafkatest.UniqueName(t, "in"), kafkatest.UniqueName(t, "sink"), kafkatest.UniqueName(t, "g")
	kafkatest.CreateTopic(t, brokers, in, 4, nil)
	cl := kafkatest.Client(t, brokers, kgo.ProducerLinger(10*time.Millisecond))
	rng := rand.New(rand.NewPCG(1, 2))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	const chunk = 20000
	var bytes int64
	for off := 0; off < n; off += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for seq := off; seq < min(off+chunk, n); seq++ {
			// A Nexmark bid: about 200 bytes of JSON.
			v := fmt.Sprintf(`{"seq":%d,"auction":%d,"bidder":%d,"price":%d,"channel":"channel-%d","url":"https://www.nexmark.com/%s/item.htm?query=1","dateTime":%d,"extra":"%s"}`,
				seq, 1000+rng.IntN(10000), 1000+rng.IntN(100000), rng.IntN(1_000_000), rng.IntN(10000), randomText(rng, 8), 1_700_000_000_000+int64(seq), randomText(rng, 24))
			bytes += int64(len(v))
			recs = append(recs, &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(seq)), Value: []byte(v)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("producing the input: %v", err)
		}
	}
	start := time.Now()
	e := newEngine(t, passThroughConfig(t, brokers, group, in, sink), nil)
	e.cfg.Processing.MaxCheckpointFailures = 1000
	e.start(t)
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	waitTopicCommitted(t, e, adm, in, 10*time.Minute)
	took := time.Since(start)
	ends, err := adm.ListEndOffsets(ctx, sink)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	// The sink's end offsets count its records and one commit marker per partition and
	// transaction (and the aborted transactions' records and markers): at least n.
	if total < int64(n) {
		t.Errorf("the sink ends at %d offsets in all, fewer than the %d records", total, n)
	}
	t.Logf("pass-through of %d records (%.0f bytes each on average) in %.1f s: %.0f records/s; checkpoints committed %v, aborted %v; sink offsets %d",
		n, float64(bytes)/float64(n), took.Seconds(), float64(n)/took.Seconds(),
		e.metric(t, "sluice_commits_total"), e.metric(t, "sluice_txn_aborts_total"), total)
	e.stopClean(t)
}
