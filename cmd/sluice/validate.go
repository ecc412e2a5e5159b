package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/dial"
	"github.com/sluice-dev/sluice/operators/plan"
)

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := configFlag(fs)
	explain := fs.Bool("explain", false, "also print the effective config: every key's value and where it came from (file, env var, default), secrets masked")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *path == "" {
		return &usageError{"validate needs -c FILE"}
	}
	cfg, settings, err := configs.Explain(*path, os.Environ())
	if err != nil {
		return err
	}
	plan, err := plan.NewPlan(cfg)
	if err != nil {
		return err
	}
	// The files of kafka.tls and kafka.sasl.password_file are read (not dialed) as sluice run
	// reads them, so a missing or malformed one fails here, naming its key.
	if _, err := dial.Opts(cfg.Kafka); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	if dial.Cleartext(cfg.Kafka) {
		fmt.Fprintf(stdout, "warning: %s\n", cleartextWarning)
	}
	if *explain {
		printSettings(stdout, *path, settings)
	}
	plan.Describe(stdout)
	return nil
}

// printSettings writes the effective config as a table: key, origin, value.
func printSettings(w io.Writer, path string, settings []configs.Setting) {
	fmt.Fprintf(w, "effective config (%s, then SLUICE_* environment variables, then defaults; secrets masked):\n", path)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range settings {
		origin := s.Origin
		if strings.HasPrefix(origin, "SLUICE_") {
			origin = "env " + origin
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.Key, origin, s.Value)
	}
	tw.Flush()
}
