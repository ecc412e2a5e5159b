package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/dial"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/operators/task"
	"github.com/sluice-dev/sluice/state"
)

// resetTimeout bounds the Kafka part of a reset (an unreachable broker fails it, exit 1).
const resetTimeout = 30 * time.Second

// cmdReset is `sluice reset -c FILE --operator NAME [--yes]`: it starts a keyed operator's state
// over from empty by deleting its local state (every namespace of the operator in
// processing.state_dir, every partition) and its changelog topic (which the next start
// recreates, empty; for an aggregate with changelog: output, its sink topic, which holds its
// changelog), so that nothing of the old state can be read or restored. Without --yes it
// only prints what it would delete. sluice must be stopped: the state dir is locked while it
// runs. The Kafka part runs first, so a failure there leaves the local state untouched.
func cmdReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("reset", flag.ContinueOnError)
	path := configFlag(fset)
	op := fset.String("operator", "", "the keyed operator whose state to delete")
	yes := fset.Bool("yes", false, "delete (without it, reset prints what it would delete and deletes nothing)")
	if err := parseFlags(fset, args, stderr); err != nil {
		return err
	}
	if *path == "" {
		return &usageError{"reset needs -c FILE and --operator NAME"}
	}
	cfg, err := configs.Load(*path, os.Environ())
	if err != nil {
		return err
	}
	plan, err := plan.NewPlan(cfg)
	if err != nil {
		return err
	}
	if err := checkResetOperator(cfg, plan, *op); err != nil {
		return err
	}
	topic, kind := cfg.ChangelogTopic(*op), "changelog topic"
	for _, c := range plan.Chains {
		if c.OutputChangelog && c.Keyed.Name == *op {
			// Its results are its changelog: a restore would find the state there again.
			topic, kind = c.SinkTopic, "sink topic (its results are its changelog: changelog: output)"
		}
	}

	// Local state: open the store only if it exists (a dry run must not create it). Opening it
	// takes its lock, so a running sluice makes the reset fail here, before anything is deleted.
	var (
		store  *state.DB
		spaces []state.Namespace
	)
	dir := cfg.Processing.StateDir
	if _, err := os.Stat(filepath.Join(dir, "pebble")); err == nil {
		store, err = state.Open(state.Options{Dir: dir, CacheSize: 8 << 20})
		if err != nil {
			return fmt.Errorf("reset: %w (is sluice running on this state dir? stop it before a reset)", err)
		}
		defer store.Close()
		if spaces, err = task.OperatorNamespaces(store, *op); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reset: state dir: %w", err)
	}

	// The changelog topic.
	var adm *kadm.Client
	topicParts := -1 // -1: absent or not looked up
	if !cfg.Kafka.Embedded() {
		conn, err := dial.Opts(cfg.Kafka)
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(conn...)
		if err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		defer cl.Close()
		adm = kadm.NewClient(cl)
		lctx, cancel := context.WithTimeout(ctx, resetTimeout)
		details, err := adm.ListTopics(lctx, topic)
		cancel()
		if err != nil {
			return fmt.Errorf("reset: list topic %s on %s: %w", topic, strings.Join(cfg.Kafka.Brokers, ","), err)
		}
		if d, ok := details[topic]; ok && d.Err == nil {
			topicParts = len(d.Partitions)
		}
	}

	fmt.Fprintf(stdout, "reset of operator %s (group %s):\n", *op, cfg.Group)
	for _, o := range cfg.Operators {
		if o.ExpandedFrom() == *op && o.Keyed() {
			fmt.Fprintf(stdout, "  note: %s remembers the values %s has counted distinct; reset it too (--operator %s), or a value it has seen is not counted again\n", o.Name, *op, o.Name)
		}
	}
	switch {
	case store == nil:
		fmt.Fprintf(stdout, "  local state in %s: none (no state dir)\n", dir)
	case len(spaces) == 0:
		fmt.Fprintf(stdout, "  local state in %s: none\n", dir)
	default:
		fmt.Fprintf(stdout, "  local state in %s: %s\n", dir, describeNamespaces(spaces))
	}
	switch {
	case adm == nil:
		fmt.Fprintf(stdout, "  %s %s: none (kafka.brokers is embedded: its topics live only while sluice runs)\n", kind, topic)
	case topicParts < 0:
		fmt.Fprintf(stdout, "  %s %s: absent\n", kind, topic)
	default:
		fmt.Fprintf(stdout, "  %s %s: %d partitions\n", kind, topic, topicParts)
	}
	if len(spaces) == 0 && topicParts < 0 {
		fmt.Fprintln(stdout, "nothing to delete")
		return nil
	}
	if !*yes {
		fmt.Fprintln(stdout, "dry run: nothing deleted; run again with --yes to delete the above")
		return nil
	}

	if topicParts >= 0 {
		dctx, cancel := context.WithTimeout(ctx, resetTimeout)
		resp, err := adm.DeleteTopics(dctx, topic)
		cancel()
		if err == nil {
			err = resp[topic].Err
		}
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("reset: delete topic %s: %w (the local state was not touched)", topic, err)
		}
		fmt.Fprintf(stdout, "deleted %s %s\n", kind, topic)
	}
	for _, ns := range spaces {
		if err := store.Drop(ns); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	if len(spaces) > 0 {
		fmt.Fprintf(stdout, "deleted the local state of operator %s in %s\n", *op, dir)
	}
	fmt.Fprintf(stdout, "operator %s starts from empty state at its next start. Reset every instance's state dir before starting any.\n"+
		"The group's committed input offsets are unchanged: the new state counts the records from where the group left off.\n", *op)
	return nil
}

// checkResetOperator returns a usage error unless op is a keyed operator of the plan.
func checkResetOperator(cfg *configs.Config, plan *plan.Plan, op string) error {
	var keyed []string
	for _, c := range plan.Chains {
		if c.Keyed != nil {
			keyed = append(keyed, c.Keyed.Name)
		}
	}
	slices.Sort(keyed)
	if slices.Contains(keyed, op) {
		return nil
	}
	valid := "none in this config"
	if len(keyed) > 0 {
		valid = strings.Join(keyed, ", ")
	}
	switch {
	case op == "":
		return &usageError{fmt.Sprintf("reset needs --operator NAME (operators with state: %s)", valid)}
	case slices.ContainsFunc(cfg.Operators, func(o configs.Operator) bool { return o.Name == op }):
		return &usageError{fmt.Sprintf("--operator %s: the operator has no state to reset (operators with state: %s)", op, valid)}
	}
	return &usageError{fmt.Sprintf("--operator %s: no such operator (operators with state: %s)", op, valid)}
}

// describeNamespaces summarizes namespaces by operator: "totals (partitions 0-3, 5),
// totals#layout (partitions 0-3, 5)".
func describeNamespaces(spaces []state.Namespace) string {
	var out []string
	for i := 0; i < len(spaces); {
		j := i
		for j < len(spaces) && spaces[j].Operator == spaces[i].Operator {
			j++
		}
		var parts []string
		for k := i; k < j; {
			m := k
			for m+1 < j && spaces[m+1].Partition == spaces[m].Partition+1 {
				m++
			}
			if m == k {
				parts = append(parts, fmt.Sprint(spaces[k].Partition))
			} else {
				parts = append(parts, fmt.Sprintf("%d-%d", spaces[k].Partition, spaces[m].Partition))
			}
			k = m + 1
		}
		word := "partitions"
		if j-i == 1 {
			word = "partition"
		}
		out = append(out, fmt.Sprintf("%s (%s %s)", spaces[i].Operator, word, strings.Join(parts, ", ")))
		i = j
	}
	return strings.Join(out, ", ")
}
