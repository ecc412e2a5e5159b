// Command gen writes the configuration reference, docs/config.md, from the Config struct of
// package configs (configs.Reference). Run it through `go generate ./configs`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluice-dev/sluice/configs"
)

func main() {
	out := flag.String("o", configs.ReferenceFile, "file to write")
	flag.Parse()
	b, err := configs.Reference()
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
