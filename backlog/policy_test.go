package backlog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// stateFlags names the fields of State as testdata/policy spells them.
var stateFlags = []struct {
	name string
	set  func(*State)
	get  func(State) bool
}{
	{"backlog", func(s *State) { s.Backlog = true }, func(s State) bool { return s.Backlog }},
	{"first", func(s *State) { s.First = true }, func(s State) bool { return s.First }},
	{"shared", func(s *State) { s.Shared = true }, func(s State) bool { return s.Shared }},
	{"detectors", func(s *State) { s.Detectors.Backlog = true }, func(s State) bool { return s.Detectors.Backlog }},
	{"upstream", func(s *State) { s.Upstream.Backlog = true }, func(s State) bool { return s.Upstream.Backlog }},
	{"buffered", func(s *State) { s.Buffered = true }, func(s State) bool { return s.Buffered }},
	{"dirty", func(s *State) { s.Dirty = true }, func(s State) bool { return s.Dirty }},
	{"pending", func(s *State) { s.Pending = true }, func(s State) bool { return s.Pending }},
	{"timed", func(s *State) { s.Timed = true }, func(s State) bool { return s.Timed }},
	{"ended", func(s *State) { s.Ended = true }, func(s State) bool { return s.Ended }},
}

func parseState(line string) (State, error) {
	var s State
	for _, f := range strings.Fields(line) {
		if f == "(none)" {
			continue
		}
		ok := false
		for _, fl := range stateFlags {
			if fl.name == f {
				fl.set(&s)
				ok = true
			}
		}
		if !ok {
			return s, fmt.Errorf("unknown flag %q", f)
		}
	}
	return s, nil
}

func formatDecision(d Decision) string {
	out := []string{d.Switch.String()}
	for _, f := range []struct {
		on   bool
		name string
	}{{d.Checkpoint, "checkpoint"}, {d.Fold, "fold"}, {d.SilentFold, "silent-fold"}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, " ")
}

// TestPolicy runs testdata/policy: "decide" with one State a line (its true flags), printing
// the Decision; "streams" likewise, printing State.Streams. The expected answers are the package doc's rules, written by hand.
func TestPolicy(t *testing.T) {
	datadriven.RunTest(t, "testdata/policy", func(t *testing.T, td *datadriven.TestData) string {
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			s, err := parseState(line)
			if err != nil {
				return err.Error()
			}
			switch td.Cmd {
			case "decide":
				fmt.Fprintf(&b, "%s -> %s\n", line, formatDecision(Decide(s)))
			case "streams":
				fmt.Fprintf(&b, "%s -> %v\n", line, s.Streams())
			default:
				return "unknown command " + td.Cmd
			}
		}
		return b.String()
	})
}

// TestPolicyInvariants checks every State (all 2^10 combinations of its flags) against
// properties the policy must keep whatever the rule tables say.
func TestPolicyInvariants(t *testing.T) {
	for bits := range 1 << len(stateFlags) {
		var s State
		var names []string
		for i, fl := range stateFlags {
			if bits&(1<<i) != 0 {
				fl.set(&s)
				names = append(names, fl.name)
			}
		}
		d := Decide(s)
		want := (s.Detectors.Backlog || s.Upstream.Backlog) && !s.Ended
		fail := func(why string) {
			t.Helper()
			t.Errorf("%v: %s gives %s", names, why, formatDecision(d))
		}
		switch d.Switch {
		case Start, Enter:
			if s.Backlog || !want {
				fail("entering needs an operator streaming and inputs in backlog")
			}
			if (d.Switch == Start) != (s.First && !s.Shared) {
				fail("only the first observation of an unshared operator starts")
			}
			if d.Fold || d.SilentFold {
				fail("entering folds nothing")
			}
		case Leave:
			if !s.Backlog || want || s.Buffered || s.Pending {
				fail("leaving now needs an operator in backlog, inputs that left it and nothing to fold")
			}
		case Stay:
			if s.Backlog != want && !(s.Backlog && (s.Buffered || s.Pending || s.Ended)) {
				fail("staying in a mode the inputs do not want needs something to fold")
			}
		}
		if d.Fold && (s.Dirty || want) {
			fail("a fold needs a clean cache and inputs out of backlog")
		}
		if d.Fold && d.SilentFold {
			fail("a fold is either the switch's or silent")
		}
		if d.SilentFold && (!s.Backlog || !s.Buffered) {
			fail("a silent fold needs a backlog held")
		}
		if s.Backlog && !want && !d.Checkpoint && d.Switch != Leave {
			fail("a backlog the inputs left must end at a checkpoint")
		}
	}
}

func TestLag(t *testing.T) {
	l := Lag{Before: 1000, After: 10, TimeBefore: time.Minute, TimeAfter: time.Second}
	for _, tc := range []struct {
		observed, backlog bool
		lag               int64
		timeLag           time.Duration
	}{
		{false, false, 1000, time.Minute}, // a new (or rewound) input: the batch counts
		{false, true, 1000, time.Minute},
		{true, true, 1000, time.Minute}, // in backlog: the batch is still the backlog's
		{true, false, 10, time.Second},  // streaming: only what lies beyond the batch
	} {
		lag, tl := l.BeforeBatch(tc.observed, tc.backlog)
		if lag != tc.lag || tl != tc.timeLag {
			t.Errorf("BeforeBatch(observed=%v, backlog=%v) = %d, %v; want %d, %v", tc.observed, tc.backlog, lag, tl, tc.lag, tc.timeLag)
		}
	}
	if lag, tl := l.AfterBatch(); lag != 10 || tl != time.Second {
		t.Errorf("AfterBatch() = %d, %v; want 10, 1s", lag, tl)
	}
}
