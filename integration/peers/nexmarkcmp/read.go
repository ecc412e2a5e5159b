package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readCommitted reads topic with read_committed from its start to its end, taken as soon as no
// transaction is open on any partition, and calls fn with each data record (tombstones
// included) in offset order per partition, until fn returns an error, which it returns.
func readCommitted(ctx context.Context, brokers []string, topic string, fn func(r *kgo.Record) error) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the consumer sees the offset of a trailing commit marker
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(16<<20),
	)
	if err != nil {
		return fmt.Errorf("reading %s: %w", topic, err)
	}
	defer cl.Close()

	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	ends, err := settledEnds(ctx, adm, topic)
	if err != nil {
		return err
	}
	want := make(map[int32]int64) // partition -> offset to reach
	assign := make(map[int32]kgo.Offset)
	for p, end := range ends {
		start, ok := starts.Lookup(topic, p)
		if !ok || end > start.Offset {
			want[p] = end
			assign[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign})
	var ferr error
	for len(want) > 0 && ferr == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %w (%d partitions not at their end)", topic, err, len(want))
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || ferr != nil || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			ferr = fn(r)
		})
	}
	return ferr
}

// settledEnds waits until no partition of topic has an undecided transaction (last stable
// offset = high watermark) and returns those end offsets.
func settledEnds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		hwm, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwm.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
		}
		if _, ok := hwm[topic]; !ok {
			return nil, fmt.Errorf("end offsets of %s: %w", topic, kerr.UnknownTopicOrPartition)
		}
		ends := make(map[int32]int64, len(hwm[topic]))
		open := 0
		for p, h := range hwm[topic] {
			ends[p] = h.Offset
			if l, ok := lso.Lookup(topic, p); !ok || l.Offset != h.Offset {
				open++
			}
		}
		if open == 0 {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s still has %d partitions with an open transaction: %w", topic, open, ctx.Err())
		case <-tick.C:
		}
	}
}
