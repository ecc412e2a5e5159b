package workload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// eachCluster runs fn against kfake and, when $SLUICE_TEST_KAFKA is set (or required), against
// the real broker.
func eachCluster(t *testing.T, fn func(t *testing.T, brokers string)) {
	t.Run("kfake", func(t *testing.T) { fn(t, kafkatest.Fake(t, 8)) })
	t.Run("kafka", func(t *testing.T) { fn(t, kafkatest.Brokers(t)) })
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestProducePartitions produces a workload with Produce and a default franz-go client, then
// reads it back: every record is on the partition Partition predicts, each partition holds
// Counts records, and the values add up to Expected.
func TestProducePartitions(t *testing.T) {
	eachCluster(t, func(t *testing.T, brokers string) {
		ctx := timeout(t)
		s := Spec{Records: 3000, Keys: 250, Partitions: 8, Seed: 5}
		topic := kafkatest.UniqueName(t, "orders")
		kafkatest.CreateTopic(t, brokers, topic, s.Partitions, nil)
		if err := Produce(ctx, kafkatest.Client(t, brokers, ProducerOpts()...), topic, s); err != nil {
			t.Fatal(err)
		}

		c := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		counts := make([]int64, s.Partitions)
		got := make(map[string]Total)
		for n := int64(0); n < s.Records; {
			fs := c.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("after %d records: %v", n, err)
			}
			for _, r := range fs.Records() {
				n++
				if want := Partition(r.Key, s.Partitions); r.Partition != want {
					t.Fatalf("key %s on partition %d, Partition says %d", r.Key, r.Partition, want)
				}
				counts[r.Partition]++
				i := strings.Index(string(r.Value), `"amount":`)
				j := strings.Index(string(r.Value), `,"ts":`)
				cents, err := parseDecimal(r.Value[i+len(`"amount":`):j], 2)
				if err != nil {
					t.Fatal(err)
				}
				if ts, _ := strconv.ParseInt(string(r.Value[j+len(`,"ts":`):len(r.Value)-1]), 10, 64); ts != r.Timestamp.UnixMilli() {
					t.Fatalf("record timestamp %d, value ts %d", r.Timestamp.UnixMilli(), ts)
				}
				tot := got[string(r.Key)]
				tot.SumCents += cents
				tot.Count++
				got[string(r.Key)] = tot
			}
		}
		if fmt.Sprint(counts) != fmt.Sprint(s.Counts()) {
			t.Fatalf("records per partition %v, Counts says %v", counts, s.Counts())
		}
		if d := Diff(s.Expected(), got, 5); d != nil {
			t.Fatalf("produced values differ from Expected:\n%s", strings.Join(d, "\n"))
		}
	})
}

func TestProduceCanceled(t *testing.T) {
	brokers := kafkatest.Fake(t, 2)
	topic := kafkatest.UniqueName(t, "orders")
	kafkatest.CreateTopic(t, brokers, topic, 2, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Produce(ctx, kafkatest.Client(t, brokers), topic, Spec{Records: 5000, Keys: 10, Partitions: 2})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Produce with a canceled context returned %v", err)
	}
}

// TestReadTotals writes aggregate outputs the way sluice does (transactions, updates per key)
// plus an aborted transaction, a tombstone and unusual but exact number spellings.
func TestReadTotals(t *testing.T) {
	eachCluster(t, func(t *testing.T, brokers string) {
		ctx := timeout(t)
		topic := kafkatest.UniqueName(t, "totals")
		kafkatest.CreateTopic(t, brokers, topic, 3, nil)
		p := kafkatest.Client(t, brokers, kgo.TransactionalID(kafkatest.UniqueName(t, "tx")),
			kgo.DefaultProduceTopic(topic))
		txn := func(commit bool, kvs ...string) {
			t.Helper()
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(kvs); i += 2 {
				r := &kgo.Record{Value: []byte(kvs[i+1])}
				if kvs[i] != "" {
					r.Key = []byte(kvs[i])
				}
				if kvs[i+1] == "<nil>" {
					r.Value = nil
				}
				if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
		}
		txn(true,
			"c-1", `{"key":"c-1","amount":12.34,"orders":3}`,
			"c-2", `{"key":"c-2","amount":0.29,"orders":1}`,
			"c-3", `{"key":"c-3","amount":5,"orders":1}`,
		)
		txn(true,
			"c-1", `{"key":"c-1","amount":20.10,"orders":4}`,
			"c-4", `{"key":"c-4","amount":"1.5e3","orders":2}`,
			"", `{"key":"c-5","amount":4.35,"orders":1}`,
			"c-3", "<nil>",
		)
		txn(false, "c-1", `{"key":"c-1","amount":99999,"orders":99}`, "c-9", `{"key":"c-9","amount":1,"orders":1}`)

		got, err := ReadTotals(ctx, kafkatest.SplitBrokers(brokers), topic, "amount", "orders")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]Total{"c-1": {2010, 4}, "c-2": {29, 1}, "c-4": {150000, 2}, "c-5": {435, 1}}
		if d := Diff(want, got, 10); d != nil {
			t.Fatalf("ReadTotals:\n%s", strings.Join(d, "\n"))
		}

		// A value the verifier cannot read exactly is an error that says where it is.
		txn(true, "c-6", `{"key":"c-6","amount":1.005,"orders":1}`)
		_, err = ReadTotals(ctx, kafkatest.SplitBrokers(brokers), topic, "amount", "orders")
		if !errors.Is(err, ErrDecimal) || !strings.Contains(err.Error(), "offset") {
			t.Fatalf("ReadTotals of an inexact amount returned %v, want ErrDecimal with the offset", err)
		}
		_, err = ReadTotals(ctx, kafkatest.SplitBrokers(brokers), topic, "sum", "orders")
		if err == nil || !strings.Contains(err.Error(), `field "sum" missing`) {
			t.Fatalf("ReadTotals with a wrong field name returned %v", err)
		}
	})
}

func TestReadTotalsEmptyAndMissing(t *testing.T) {
	ctx := timeout(t)
	brokers := kafkatest.Fake(t, 4)
	topic := kafkatest.UniqueName(t, "empty")
	kafkatest.CreateTopic(t, brokers, topic, 4, nil)
	got, err := ReadTotals(ctx, kafkatest.SplitBrokers(brokers), topic, "amount", "orders")
	if err != nil || len(got) != 0 {
		t.Fatalf("ReadTotals of an empty topic = %v, %v", got, err)
	}
	_, err = ReadTotals(ctx, kafkatest.SplitBrokers(brokers), "no-such-topic", "amount", "orders")
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("ReadTotals of a missing topic returned %v", err)
	}
}

// BenchmarkPrefill measures Produce into the real broker ($SLUICE_TEST_KAFKA) with ProducerOpts
// and each compression codec; $SLUICE_BENCH_RECORDS sets the records per run (default 1M).
// Compare records/s. Each iteration writes a fresh 8-partition topic and deletes it afterwards:
//
//	SLUICE_TEST_KAFKA=127.0.0.1:19092 go test -run '^$' -bench Prefill -benchtime 1x ./cmd/sluice/workload/
func BenchmarkPrefill(b *testing.B) {
	records := int64(1_000_000)
	if v := os.Getenv("SLUICE_BENCH_RECORDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		records = n
	}
	brokers := kafkatest.Brokers(b)
	for _, codec := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"snappy", kgo.SnappyCompression()},
		{"zstd", kgo.ZstdCompression()},
	} {
		b.Run(codec.name, func(b *testing.B) {
			s := Spec{Records: records, Keys: 100_000, Partitions: 8, Seed: 1}
			opts := append(ProducerOpts(), kgo.ProducerBatchCompression(codec.codec))
			adm := kadm.NewClient(kafkatest.Client(b, brokers))
			for b.Loop() {
				topic := kafkatest.UniqueName(b, "prefill")
				kafkatest.CreateTopic(b, brokers, topic, s.Partitions, nil)
				cl := kafkatest.Client(b, brokers, opts...)
				if err := Produce(context.Background(), cl, topic, s); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cl.Close()
				if _, err := adm.DeleteTopic(context.Background(), topic); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
