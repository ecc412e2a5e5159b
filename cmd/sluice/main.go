// Command sluice is the sluice stream processor: `sluice run -c FILE` runs a pipeline as a
// member of its consumer group; `sluice demo` runs the embedded example end to end; `sluice
// validate -c FILE` checks a config and prints the operator plan; `sluice bench` compares
// backlog mode with pure streaming and with a consume-only read; `sluice reset -c FILE
// --operator NAME` deletes a keyed operator's state so it starts over; `sluice version` prints
// the version.
//
// Exit codes: 0 success, 2 bad config or usage, 1 runtime failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/configs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// usageError is a bad command line (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

const usage = `usage: sluice <command> [flags]

commands:
  run -c FILE        run the pipeline of FILE (env SLUICE_* overrides keys); --bounded: up to
                     the end offsets at start, close every window, commit, exit 0
  demo               run the embedded example: an in-process broker, a backlog, live traffic
  validate -c FILE [--explain]
                     check FILE and print the operator plan and internal topics; --explain
                     also prints every key's effective value and where it came from (file,
                     env var, default), secrets masked
  bench              measure backlog mode against pure streaming (--workload orders, windows, join, cogroup)
                     and both against the ceiling, a consume-only read of the same input topics
                     on the same broker; prints a line for the ceiling and each run, then
                     speedup=<never s / auto s> equivalent=<bool> ceiling_ratio=<auto rate / ceiling rate>
  reset -c FILE --operator NAME [--yes]
                     start a keyed operator's state over from empty: delete its local state
                     (processing.state_dir) and its changelog topic <group>-NAME-changelog;
                     needed after changing an aggregate's fields. Stop sluice first, and run
                     it on every instance. Without --yes it only prints what it would delete.
                     The group's input offsets are kept: the new state counts from there on.
  version            print the version
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "validate":
		err = cmdValidate(args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "reset":
		err = cmdReset(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "sluice %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = &usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil // interrupted (SIGTERM, Ctrl-C) while starting or stopping: a clean exit
	}
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ue *usageError
	var ce *configs.Error
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sluice: %v\n\n%s", err, usage)
		return 2
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 2
	}
	fmt.Fprintf(stderr, "sluice: %v\n", err)
	return 1
}

// loadConfig reads -c FILE with the environment on top and compiles the plan.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("c", "", "config file (YAML)")
}

func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}
