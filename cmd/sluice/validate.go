package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/task"
)

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := configFlag(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *path == "" {
		return &usageError{"validate needs -c FILE"}
	}
	cfg, err := configs.Load(*path, os.Environ())
	if err != nil {
		return err
	}
	plan, err := task.NewPlan(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	plan.Describe(stdout)
	return nil
}
