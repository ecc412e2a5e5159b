// Command nexmark-gen produces Nexmark events (Flink's generator, ported in integration/nexmark)
// to Kafka, for manual runs of configs/nexmark/qN.yaml and benchmarks:
//
//	go run ./integration/nexmark/cmd/nexmark-gen --brokers 127.0.0.1:19092 --events 1000000 \
//	    [--prefix nexmark-] [--partitions 8] [--seed 0] [--base-time 1436918400000]
//
// It creates the topics <prefix>person, <prefix>auction and <prefix>bid if missing (with
// retention.ms -1: the events carry 2015 timestamps by default), produces the events, and
// prints the counts per kind, the event-time range and the rate. Running it twice with the same
// flags appends the same events again. Exit codes: 0 success, 2 usage, 1 failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/integration/nexmark"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nexmark-gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	events := fs.Int64("events", 1_000_000, "number of events (persons, auctions and bids 1/3/46)")
	prefix := fs.String("prefix", "nexmark-", "topic name prefix: <prefix>person, <prefix>auction, <prefix>bid")
	partitions := fs.Int("partitions", 8, "partitions of the topics created")
	seed := fs.Int64("seed", 0, "seed of the generator's random number generators")
	base := fs.Int64("base-time", nexmark.BeamBaseTime, "event time of the first event, epoch ms (default Beam's 2015-07-15T00:00:00Z; Flink takes the clock)")
	rate := fs.Int("rate", 10_000, "events per second of event time (Flink's first event rate)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *events <= 0 || *partitions <= 0 || *rate <= 0 {
		fmt.Fprintln(stderr, "nexmark-gen: --events, --partitions and --rate must be positive, and no arguments")
		return 2
	}
	cfg := nexmark.DefaultConfig(*seed, *events)
	cfg.BaseTime = *base
	cfg.FirstEventRate = *rate
	if err := produce(ctx, cfg, strings.Split(*brokers, ","), nexmark.DefaultTopics(*prefix), int32(*partitions), stdout); err != nil {
		fmt.Fprintln(stderr, "nexmark-gen:", err)
		return 1
	}
	return 0
}

func produce(ctx context.Context, cfg nexmark.Config, brokers []string, topics nexmark.Topics, partitions int32, stdout io.Writer) error {
	g, err := nexmark.NewGenerator(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, nexmark.ProducerOpts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := nexmark.CreateTopics(ctx, kadm.NewClient(cl), topics, partitions); err != nil {
		return err
	}
	// The side input first: q13 joins the bids with it as a table, loaded before them.
	if err := nexmark.ProduceSideInput(ctx, cl, topics, cfg.BaseTime); err != nil {
		return err
	}
	start := time.Now()
	counts, err := nexmark.Produce(ctx, cl, topics, g, cfg.MaxEvents)
	if err != nil {
		return err
	}
	d := time.Since(start)
	fmt.Fprintf(stdout, "produced %d events (%d persons to %s, %d auctions to %s, %d bids to %s; %d side input rows to %s) in %v, %.0f events/s\n",
		counts.Total(), counts.Persons, topics.Person, counts.Auctions, topics.Auction, counts.Bids, topics.Bid, nexmark.SideInputRows, topics.SideInput,
		d.Round(time.Millisecond), float64(counts.Total())/d.Seconds())
	last := cfg.TimestampForEvent(cfg.FirstEventNumber + counts.Total() - 1)
	fmt.Fprintf(stdout, "event time %s to %s (seed %d)\n",
		time.UnixMilli(cfg.TimestampForEvent(cfg.FirstEventNumber)).UTC().Format(time.RFC3339Nano),
		time.UnixMilli(last).UTC().Format(time.RFC3339Nano), cfg.Seed)
	return nil
}
