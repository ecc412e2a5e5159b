package main

import (
	"context"
	"io"
)

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return &usageError{"bench is not built yet"}
}
