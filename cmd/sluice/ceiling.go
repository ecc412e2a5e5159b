package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/producer"
)

// benchCeiling is the measurement of bench's consume-only read of the input topics.
type benchCeiling struct {
	seconds float64 // from the client's creation to the last record
	records int64   // records read (control records not counted)
	bytes   int64   // their keys' and values' bytes
	cpu     float64 // this process's user+system seconds during the read (with the embedded
	// broker, serving it too)
}

// readCeiling reads every partition of every topic in ends (by topic and partition, the end
// offsets after the prefill) from its start to its end offset, with the fetch options of a
// sluice run (producer.FetchOpts: read_committed, the same fetch bounds), without a group and
// without processing: it counts records and bytes. Its rate is the ceiling a run is compared
// to, what this machine and broker can read the same topics at.
func readCeiling(ctx context.Context, brokers []string, ends map[string]map[int32]int64) (benchCeiling, error) {
	var c benchCeiling
	from := map[string]map[int32]kgo.Offset{}
	left := 0 // partitions not read to their end yet
	for topic, end := range ends {
		from[topic] = map[int32]kgo.Offset{}
		for p, e := range end {
			if e > 0 {
				from[topic][p] = kgo.NewOffset().AtStart()
				left++
			}
		}
	}
	before := selfCPU()
	start := time.Now()
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(from),
		// A partition ends at its end offset, which a transaction's marker can occupy: keep
		// markers to see it (they are not counted).
		kgo.KeepControlRecords(),
	}, producer.FetchOpts(0)...) // the runs' kafka.fetch_max_bytes is the default
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return c, fmt.Errorf("bench: ceiling: %w", err)
	}
	defer cl.Close()
	next := map[string]map[int32]int64{}
	for topic, end := range ends {
		next[topic] = make(map[int32]int64, len(end))
	}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return c, fmt.Errorf("bench: ceiling: read %d records: %w", c.records, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("bench: ceiling: fetch %s/%d: %w", t, p, err)
		})
		if ferr != nil {
			return c, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				c.records++
				c.bytes += int64(len(r.Key) + len(r.Value))
			}
			end := ends[r.Topic][r.Partition]
			if next[r.Topic][r.Partition] < end && r.Offset+1 >= end {
				left--
			}
			next[r.Topic][r.Partition] = r.Offset + 1
		})
	}
	c.seconds = time.Since(start).Seconds()
	c.cpu = selfCPU() - before
	return c, nil
}
