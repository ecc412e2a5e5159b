package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runCeiling is the "ceiling" contender, run as a child process of the harness (harness
// ceiling -brokers B -topic T -group G): a franz-go group consumer with read_committed that
// reads and discards every record of topic up to the end offsets it sees at start, commits
// its offsets and exits 0. It is the consume-only ceiling every other contender is compared to.
func runCeiling(args []string) error {
	fs := flag.NewFlagSet("ceiling", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "bootstrap brokers, comma separated")
	topic := fs.String("topic", "", "input topic")
	group := fs.String("group", "", "consumer group")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *topic == "" || *group == "" {
		return fmt.Errorf("ceiling: -brokers, -topic and -group are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	seeds := strings.Split(*brokers, ",")
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return fmt.Errorf("ceiling: admin client: %w", err)
	}
	end, err := endOffsets(ctx, kadm.NewClient(admCl), *topic)
	admCl.Close()
	if err != nil {
		return fmt.Errorf("ceiling: %w", err)
	}
	want := end.total()

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(8<<20),
	)
	if err != nil {
		return fmt.Errorf("ceiling: consumer: %w", err)
	}
	defer cl.Close()

	next := offsets{}
	remaining := 0
	for p, e := range end {
		if e > 0 {
			remaining++
		}
		next[p] = 0
	}
	var n, bytes int64
	for remaining > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ceiling: read %d of %d records: %w", n, want, err)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("ceiling: fetch %s/%d: %w", t, p, err)
		})
		if ferr != nil {
			return ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			bytes += int64(len(r.Key) + len(r.Value))
			before := next[r.Partition]
			next[r.Partition] = r.Offset + 1
			if e := end[r.Partition]; before < e && r.Offset+1 >= e {
				remaining--
			}
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("ceiling: commit: %w", err)
	}
	fmt.Fprintf(os.Stderr, "ceiling: read %d records (%d key+value bytes) of %d\n", n, bytes, want)
	return nil
}
