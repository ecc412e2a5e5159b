package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProducerOpts returns the franz-go producer options that prefill a topic fastest on our
// 2-core test machine (see the package benchmarks): idempotent acks=all (the default), large
// batches, a short linger, a deep buffer, and no compression (lz4 costs more CPU than it saves
// on loopback).
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(1 << 18),
	}
}

// slabRecords and slabBytes size the chunks Produce copies records into: kgo keeps each record
// until it is acknowledged, so the generator's reused buffers cannot be handed over directly.
const (
	slabRecords = 4096
	slabBytes   = 1 << 20
)

// Produce writes the orders of s to topic (record key = customer_id, record timestamp = ts,
// partition chosen by cl's partitioner: the default one matches Partition) and returns once
// every record is acknowledged, or with the first produce error. It flushes cl, so it also
// waits for records others produce through cl. If cl is transactional, the caller begins and
// ends the transaction around it. ProducerOpts gives fast options for cl.
func Produce(ctx context.Context, cl *kgo.Client, topic string, s Spec) error {
	return ProduceEach(ctx, cl, topic, s.Each)
}

// ProduceEach writes to topic every record that each generates (key, value, timestamp in epoch
// ms; partition chosen by cl's partitioner) and returns once every record is acknowledged, or
// with the first produce or generator error. Records are allocated in slabs, so a generator may
// reuse its key and value buffers between calls. It flushes cl like Produce.
func ProduceEach(ctx context.Context, cl *kgo.Client, topic string, each func(fn func(key, value []byte, ts int64) error) error) error {
	var (
		mu    sync.Mutex
		first error
	)
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = fmt.Errorf("workload: producing to %s: %w", topic, err)
		}
	}

	var (
		recs []kgo.Record
		buf  []byte
		n    int64
	)
	genErr := each(func(key, value []byte, ts int64) error {
		if n%1024 == 0 {
			if err := failed(); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("workload: producing to %s: %w", topic, err)
			}
		}
		n++
		if len(recs) == 0 {
			recs = make([]kgo.Record, slabRecords)
		}
		r := &recs[0]
		recs = recs[1:]
		if need := len(key) + len(value); cap(buf)-len(buf) < need {
			buf = make([]byte, 0, max(slabBytes, need))
		}
		start := len(buf)
		buf = append(buf, key...)
		buf = append(buf, value...)
		r.Topic = topic
		r.Key = buf[start : start+len(key) : start+len(key)]
		r.Value = buf[start+len(key) : len(buf) : len(buf)]
		r.Timestamp = time.UnixMilli(ts)
		cl.Produce(ctx, r, promise)
		return nil
	})
	flushErr := cl.Flush(ctx)
	if err := failed(); err != nil {
		return err
	}
	if genErr != nil {
		return genErr
	}
	if flushErr != nil {
		return fmt.Errorf("workload: flushing %s: %w", topic, flushErr)
	}
	return nil
}
