package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// offsets is one topic's offset per partition.
type offsets map[int32]int64

// total is the sum over all partitions.
func (o offsets) total() int64 {
	var n int64
	for _, v := range o {
		n += v
	}
	return n
}

// topicConfigs returns the configs of every topic the harness creates. The workload's event times
// (and so its record timestamps, which the contenders carry over to their outputs) start on
// 2026-01-01: with the broker's default 7-day time retention the broker would delete them a
// few minutes after they are written.
func topicConfigs() map[string]*string {
	return map[string]*string{"retention.ms": kadm.StringPtr("-1")}
}

// createTopic creates topic with the given partition count, replication factor 1 and no time
// retention. An existing topic is an error unless reuse is set.
func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, reuse bool) error {
	_, err := adm.CreateTopic(ctx, partitions, 1, topicConfigs(), topic)
	if errors.Is(err, kerr.TopicAlreadyExists) && reuse {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	return waitTopic(ctx, adm, topic, partitions)
}

// recreateTopic deletes topic if it exists, then creates it empty.
func recreateTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	if _, err := adm.DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("deleting topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := adm.CreateTopic(ctx, partitions, 1, topicConfigs(), topic)
		if err == nil {
			return waitTopic(ctx, adm, topic, partitions)
		}
		// A deleted topic disappears asynchronously: retry "already exists" for a while.
		if !errors.Is(err, kerr.TopicAlreadyExists) || time.Now().After(deadline) {
			return fmt.Errorf("creating topic %s: %w", topic, err)
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitTopic waits (bounded) until every partition of topic has a leader that answers ListOffsets.
func waitTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := endOffsets(ctx, adm, topic)
		if err == nil && int32(len(o)) == partitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not ready after 30s (last error: %v)", topic, err)
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// endOffsets returns the last stable offset (the read_committed end) of every partition of topic.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (offsets, error) {
	l, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	if err := l.Error(); err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	out := offsets{}
	for p, o := range l[topic] {
		out[p] = o.Offset
	}
	return out, nil
}

// groupCaughtUp reports whether group's committed offsets on topic reach end on every partition,
// and the number of records the group has committed so far (sum of committed offsets).
func groupCaughtUp(ctx context.Context, adm *kadm.Client, group, topic string, end offsets) (bool, int64, error) {
	r, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return false, 0, fmt.Errorf("fetching offsets of group %s: %w", group, err)
	}
	done := true
	var committed int64
	for p, e := range end {
		o, ok := r.Lookup(topic, p)
		if !ok || o.Err != nil || o.At < 0 {
			if e > 0 {
				done = false
			}
			continue
		}
		committed += o.At
		if o.At < e {
			done = false
		}
	}
	return done, committed, nil
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// settledEnds waits until no partition of topic has an undecided transaction (last stable
// offset = high watermark) and returns those end offsets: right after a commit the markers may
// not be written yet, and a read_committed read up to the last stable offset would miss them.
func settledEnds(ctx context.Context, adm *kadm.Client, topic string) (offsets, error) {
	for {
		hwm, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwm.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
		}
		lso, err := endOffsets(ctx, adm, topic)
		if err != nil {
			return nil, err
		}
		ends := offsets{}
		open := 0
		for p, h := range hwm[topic] {
			ends[p] = h.Offset
			if lso[p] != h.Offset {
				open++
			}
		}
		if len(ends) == 0 {
			return nil, fmt.Errorf("listing end offsets of %s: %w", topic, kerr.UnknownTopicOrPartition)
		}
		if open == 0 {
			return ends, nil
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%s still has %d partitions with an open transaction: %w", topic, open, err)
		}
	}
}

// readTopic reads topic with read_committed from its start to its end (taken once no
// transaction is open) and calls fn for every data record, in order within a partition.
func readTopic(ctx context.Context, seeds []string, topic string, fn func(r *kgo.Record)) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the reader sees the offset of a trailing commit marker
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(16<<20),
	)
	if err != nil {
		return err
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
	need := map[int32]int64{}
	assign := map[int32]kgo.Offset{}
	for p, end := range ends {
		if s, ok := starts.Lookup(topic, p); !ok || end > s.Offset {
			need[p] = end
			assign[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(need) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign})
	for len(need) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := need[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(need, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			fn(r)
		})
	}
	return nil
}
