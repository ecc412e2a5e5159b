// Command regroup produces and verifies the workload of integration/bench/regroup.sh: orders
// (workload.Spec) re-keyed by an aggregate's group_by, to time a bounded run of a pipeline of two
// stages, whose aggregate reads the repartition topic.
//
//	regroup produce BROKERS TOPIC RECORDS KEYS   creates TOPIC (4 partitions) and writes the orders
//	regroup verify BROKERS SINK RECORDS KEYS     checks the totals per customer in SINK, exactly
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "regroup:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("usage: regroup produce|verify BROKERS TOPIC RECORDS KEYS")
	}
	brokers := strings.Split(args[1], ",")
	records, err := strconv.ParseInt(args[3], 10, 64)
	if err != nil {
		return err
	}
	keys, err := strconv.Atoi(args[4])
	if err != nil {
		return err
	}
	s := workload.Spec{Records: records, Keys: keys, Partitions: 4, Seed: 7}
	if err := s.Validate(); err != nil {
		return err
	}
	ctx := context.Background()
	switch args[0] {
	case "produce":
		cl, err := kgo.NewClient(append(workload.ProducerOpts(), kgo.SeedBrokers(brokers...))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, s.Partitions, 1, nil, args[2]); err != nil {
			return fmt.Errorf("create %s: %w", args[2], err)
		}
		if err := workload.Produce(ctx, cl, args[2], s); err != nil {
			return err
		}
		fmt.Printf("produced %d orders over %d keys to %s\n", records, keys, args[2])
	case "verify":
		got, err := workload.ReadTotals(ctx, brokers, args[2], "amount", "orders")
		if err != nil {
			return err
		}
		if d := workload.Diff(s.Expected(), got, 5); d != nil {
			return fmt.Errorf("totals in %s differ:\n%s", args[2], strings.Join(d, "\n"))
		}
		fmt.Printf("verified %d totals in %s\n", len(got), args[2])
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	return nil
}
