package backlog

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDetector runs testdata/detector: "new mode=auto enter=100 exit=10 [enter_time=1s exit_time=100ms] [bounded=true]"
// then "observe lag=N [time=D]" lines, printing the mode after each observation.
func TestDetector(t *testing.T) {
	datadriven.RunTest(t, "testdata/detector", func(t *testing.T, td *datadriven.TestData) string {
		var d *Detector
		switch td.Cmd {
		case "new":
			o := Options{}
			for _, a := range td.CmdArgs {
				v := a.Vals[0]
				switch a.Key {
				case "mode":
					m, err := ParseMode(v)
					if err != nil {
						return err.Error()
					}
					o.Mode = m
				case "enter":
					o.EnterLag, _ = strconv.ParseInt(v, 10, 64)
				case "exit":
					o.ExitLag, _ = strconv.ParseInt(v, 10, 64)
				case "enter_time":
					o.EnterTimeLag, _ = time.ParseDuration(v)
				case "exit_time":
					o.ExitTimeLag, _ = time.ParseDuration(v)
				case "bounded":
					o.Bounded = v == "true"
				}
			}
			d = NewDetector(o)
			var b strings.Builder
			for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
				if line == "" {
					continue
				}
				var lag int64
				var tl time.Duration
				for _, f := range strings.Fields(line) {
					k, v, _ := strings.Cut(f, "=")
					switch k {
					case "lag":
						lag, _ = strconv.ParseInt(v, 10, 64)
					case "time":
						tl, _ = time.ParseDuration(v)
					}
				}
				attr, changed, first := d.Observe(lag, tl)
				mode := "real-time"
				if attr.Backlog {
					mode = "backlog"
				}
				fmt.Fprintf(&b, "%s -> %s", line, mode)
				if first {
					b.WriteString(" (first)")
				}
				if changed {
					b.WriteString(" (switch)")
				}
				b.WriteString("\n")
			}
			return b.String()
		}
		return "unknown command " + td.Cmd
	})
}

func TestCombine(t *testing.T) {
	if Combine().Backlog || Combine(RecordAttributes{}, RecordAttributes{}).Backlog {
		t.Fatal("no input in backlog must combine to real-time")
	}
	if !Combine(RecordAttributes{}, RecordAttributes{Backlog: true}).Backlog {
		t.Fatal("any input in backlog must combine to backlog")
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"auto", "never", "always"} {
		m, err := ParseMode(s)
		if err != nil || m.String() != s {
			t.Fatalf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("sometimes"); err == nil || !strings.Contains(err.Error(), "allowed") {
		t.Fatalf("bad mode error %v", err)
	}
}
