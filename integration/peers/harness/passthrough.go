package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// eosCopyName is the name of the exactly-once copy of the latency phase (passThrough).
const eosCopyName = "eos-copy"

// passThrough copies every record of in to out, partition for partition, unprocessed, in the
// transactions of a consumer group (franz-go's GroupTransactSession, exactly-once by KIP-447):
// each transaction commits the records it copied with their input offsets, every interval while
// records come. It is what a plain exactly-once loop that does nothing pays to make its outputs
// visible: a reference for an exactly-once processor's latency, not a bound (it polls, produces
// and commits in turn; a processor that overlaps them can do better). ready is closed once the
// group has assigned the partitions. It runs until ctx ends.
func passThrough(ctx context.Context, seeds []string, in, out, group string, interval time.Duration, ready chan<- struct{}) error {
	assigned := false
	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.FetchMaxWait(50*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			if !assigned {
				assigned = true
				close(ready)
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("pass-through: %w", err)
	}
	defer s.Close()
	var (
		open  bool      // a transaction is open
		begun time.Time // when it began
		mu    sync.Mutex
		perr  error // the first produce error
	)
	for ctx.Err() == nil {
		deadline := time.Now().Add(interval)
		if open {
			deadline = begun.Add(interval)
		}
		pctx, cancel := context.WithDeadline(ctx, deadline)
		fetches := s.PollFetches(pctx)
		cancel()
		var ferr error
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("pass-through: fetching %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		if fetches.NumRecords() > 0 && !open {
			if err := s.Begin(); err != nil {
				return fmt.Errorf("pass-through: begin: %w", err)
			}
			open, begun = true, time.Now()
		}
		fetches.EachRecord(func(r *kgo.Record) {
			s.Produce(ctx, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp},
				func(_ *kgo.Record, err error) {
					mu.Lock()
					if err != nil && perr == nil {
						perr = err
					}
					mu.Unlock()
				})
		})
		if !open || time.Since(begun) < interval {
			continue
		}
		if _, err := s.End(ctx, kgo.TryCommit); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pass-through: end: %w", err)
		}
		mu.Lock()
		err := perr
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("pass-through: produce: %w", err)
		}
		open = false
	}
	return nil
}
