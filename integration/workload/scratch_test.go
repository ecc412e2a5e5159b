package workload

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

func BenchmarkScratch(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	for _, v := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"snappy-l5", []kgo.Opt{kgo.ProducerBatchCompression(kgo.SnappyCompression())}},
		{"snappy-l50", []kgo.Opt{kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerLinger(50 * time.Millisecond)}},
		{"none-l50", []kgo.Opt{kgo.ProducerLinger(50 * time.Millisecond)}},
		{"snappy-l50-b16k", []kgo.Opt{kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerLinger(50 * time.Millisecond), kgo.MaxBufferedRecords(1 << 14)}},
		{"lz4-l50", []kgo.Opt{kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerLinger(50 * time.Millisecond)}},
	} {
		b.Run(v.name, func(b *testing.B) {
			s := Spec{Records: 1_000_000, Keys: 100_000, Partitions: 8, Seed: 1}
			opts := append(ProducerOpts(), v.opts...)
			for b.Loop() {
				topic := kafkatest.UniqueName(b, "prefill")
				kafkatest.CreateTopic(b, brokers, topic, s.Partitions, nil)
				cl := kafkatest.Client(b, brokers, opts...)
				if err := Produce(context.Background(), cl, topic, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(s.Records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
