package configs

import (
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestEffective runs testdata/effective: each "parse" case is optional "env NAME=value" lines
// followed by a YAML document; the expected output is the effective config (YAML()) or the
// error. Regenerate with: go test ./configs -run TestEffective -rewrite
func TestEffective(t *testing.T) {
	datadriven.RunTest(t, "testdata/effective", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "parse" {
			t.Fatalf("unknown command %q", d.Cmd)
		}
		var env []string
		lines := strings.SplitAfter(d.Input, "\n")
		for len(lines) > 0 && strings.HasPrefix(lines[0], "env ") {
			env = append(env, strings.TrimSpace(strings.TrimPrefix(lines[0], "env ")))
			lines = lines[1:]
		}
		c, err := parse([]byte(strings.Join(lines, "")), "", env, func() (string, error) { return "host-0", nil })
		if err != nil {
			return err.Error() + "\n"
		}
		out, err := c.YAML()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	})
}
