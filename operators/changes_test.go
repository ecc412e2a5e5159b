package operators

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

// changesStep is one record of a key (value nil: a tombstone) or, flush, a Flush.
type changesStep struct {
	value string
	tomb  bool
	flush bool
	want  []string // with flush: the changes written
}

func TestChanges(t *testing.T) {
	row := func(v string) changesStep { return changesStep{value: v} }
	tomb := changesStep{tomb: true}
	flush := func(want ...string) changesStep { return changesStep{flush: true, want: want} }
	for _, tc := range []struct {
		name  string
		steps []changesStep
		empty bool // no state at the end
	}{
		{"first row", []changesStep{row(`{"v":1}`), flush(`{"v":1}`)}, false},
		{"a change retracts the row it replaces", []changesStep{row(`{"v":1}`), flush(`{"v":1}`), row(`{"v":2}`), flush(`{"v":1,"retract":true}`, `{"v":2}`)}, false},
		{"one change per flush", []changesStep{row(`{"v":1}`), flush(`{"v":1}`), row(`{"v":2}`), row(`{"v":3}`), flush(`{"v":1,"retract":true}`, `{"v":3}`)}, false},
		{"back to the published row", []changesStep{row(`{"v":1}`), flush(`{"v":1}`), row(`{"v":2}`), row(`{"v":1}`), flush()}, false},
		{"the same row again", []changesStep{row(`{"v":1}`), flush(`{"v":1}`), row(`{"v":1}`), flush()}, false},
		{"a tombstone retracts", []changesStep{row(`{"v":1}`), flush(`{"v":1}`), tomb, flush(`{"v":1,"retract":true}`)}, true},
		{"a tombstone of nothing", []changesStep{tomb, flush()}, true},
		{"a row and its tombstone in one commit", []changesStep{row(`{"v":1}`), tomb, flush()}, true},
		{"a tombstone then a row in one commit", []changesStep{row(`{"v":1}`), flush(`{"v":1}`), tomb, row(`{"v":2}`), flush(`{"v":1,"retract":true}`, `{"v":2}`)}, false},
		{"an empty object", []changesStep{row(`{}`), flush(`{}`), row(`{"v":2}`), flush(`{"retract":true}`, `{"v":2}`)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChanges("ch", configs.Changes{Input: "s"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := &sessCtx{}
			src := mustSource(t, configs.Source{Topic: "t"})
			for i, s := range tc.steps {
				if s.flush {
					ctx.outs = nil
					if err := c.Flush(ctx, []byte("k")); err != nil {
						t.Fatal(err)
					}
					var got []string
					for _, o := range ctx.outs {
						got = append(got, string(o))
					}
					if strings.Join(got, " ") != strings.Join(s.want, " ") {
						t.Fatalf("step %d: Flush wrote %q, want %q", i, got, s.want)
					}
					if ctx.state != nil && !c.ValidState(ctx.state) {
						t.Fatalf("step %d: state %x is not valid", i, ctx.state)
					}
					continue
				}
				var r Record
				if s.tomb {
					r.Key = []byte("k")
				} else if err := src.Decode([]byte("k"), []byte(s.value), 1, &r); err != nil {
					t.Fatal(err)
				}
				in, err := c.Project(0, &r, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Process(ctx.at(math.MinInt64), []byte("k"), 1, in); err != nil {
					t.Fatal(err)
				}
			}
			if (ctx.state == nil) != tc.empty {
				t.Fatalf("state at the end %x, want empty: %v", ctx.state, tc.empty)
			}
		})
	}
}

func TestChangesRefusesRetractField(t *testing.T) {
	c, _ := NewChanges("ch", configs.Changes{Input: "s"})
	var r Record
	if err := mustSource(t, configs.Source{Topic: "t"}).Decode([]byte("k"), []byte(`{"v":1,"retract":false}`), 1, &r); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Project(0, &r, nil); err == nil || !strings.Contains(err.Error(), `"retract" is reserved`) {
		t.Fatalf("Project = %v, want the reserved field refused", err)
	}
}

// FuzzChangesState: any stored bytes are a changes state or not (ValidState); Process and Flush
// refuse bytes that are not with an error, and on a valid state keep it valid and write at most
// a retraction and the new row, last.
func FuzzChangesState(f *testing.F) {
	c, err := NewChanges("ch", configs.Changes{Input: "s"})
	if err != nil {
		f.Fatal(err)
	}
	seed := &sessCtx{}
	f.Add([]byte{}, false)
	for _, in := range [][]byte{append([]byte{changeRow}, `{"v":1}`...), append([]byte{changeRow}, `{"v":2}`...), {changeTombstone}} {
		if err := c.Process(seed, []byte("k"), 0, in); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(seed.state), in[0] == changeTombstone)
		if err := c.Flush(seed, []byte("k")); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(seed.state), false)
	}
	f.Fuzz(func(t *testing.T, st []byte, tomb bool) {
		valid := c.ValidState(st)
		in := append([]byte{changeRow}, `{"v":3}`...)
		if tomb {
			in = []byte{changeTombstone}
		}
		ctx := &sessCtx{state: bytes.Clone(st)}
		if len(st) == 0 {
			ctx.state = nil
		}
		err := c.Process(ctx, []byte("k"), 0, in)
		if len(st) > 0 && !valid {
			if err == nil {
				t.Fatalf("Process accepted the invalid state %x", st)
			}
			return
		}
		if err != nil {
			t.Fatalf("Process on a valid state %x: %v", st, err)
		}
		if err := c.Flush(ctx, []byte("k")); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		// The published row is opaque bytes (a fuzzed one need not be JSON); the new one is.
		if n := len(ctx.outs); !tomb && n > 0 && string(ctx.outs[n-1]) != `{"v":3}` {
			t.Fatalf("Flush wrote %q, the new row last", ctx.outs)
		}
		if len(ctx.outs) > 2 {
			t.Fatalf("Flush wrote %q: more than a retraction and a row", ctx.outs)
		}
		if ctx.state != nil && !c.ValidState(ctx.state) {
			t.Fatalf("state after Flush %x is not valid", ctx.state)
		}
	})
}

// An addition and its retraction cancel to the bytes of neither, folded or merged in any split,
// and a key left with no record renders nothing (a tombstone).
func TestAggregateRetractions(t *testing.T) {
	cfg := configs.Aggregate{Input: "s", Retractions: true, Fields: map[string]map[string]any{
		"n": {"count": map[string]any{}}, "total": {"sum": "v"}, "mean": {"avg": "v"}}}
	a := mustAggregate(t, cfg)
	src := mustSource(t, configs.Source{Topic: "t"})
	project := func(v string) []byte {
		var r Record
		if err := src.Decode([]byte("k"), []byte(v), 1, &r); err != nil {
			t.Fatal(err)
		}
		in, err := a.Project(&r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	add, sub := project(`{"v":2.5}`), project(`{"v":2.5,"retract":true}`)
	other := project(`{"v":-7,"retract":null}`)
	empty := make([]byte, a.StateSize())
	a.InitState(empty)

	st := bytes.Clone(empty)
	a.Fold(st, add)
	a.Fold(st, sub)
	if !bytes.Equal(st, empty) {
		t.Fatalf("an addition and its retraction left %x, want the empty state %x", st, empty)
	}
	if out := a.Render([]byte("k"), st, nil); len(out) != 0 {
		t.Fatalf("Render of a key with no record = %s, want nothing (a tombstone)", out)
	}
	// The retraction in a partial before the addition it takes back: a negative count.
	p1, p2 := bytes.Clone(empty), bytes.Clone(empty)
	a.Fold(p1, sub)
	a.Fold(p2, add)
	a.Fold(p2, other)
	if !a.ValidState(p1) {
		t.Fatalf("a partial of a retraction alone is not a valid state: %x", p1)
	}
	a.Merge(p2, p1)
	want := bytes.Clone(empty)
	a.Fold(want, other)
	if !bytes.Equal(p2, want) {
		t.Fatalf("merged partials %x, want %x", p2, want)
	}
	if out := string(a.Render([]byte("k"), p2, nil)); out != `{"key":"k","mean":-7,"n":1,"total":-7}` {
		t.Fatalf("Render = %s", out)
	}
	var r Record
	if err := src.Decode([]byte("k"), []byte(`{"v":1,"retract":1}`), 1, &r); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Project(&r, nil); err == nil {
		t.Fatal(`Project accepted "retract": 1`)
	}
	cfg.Fields["hi"] = map[string]any{"max": "v"}
	if _, err := NewAggregate("a", cfg); err == nil || !strings.Contains(err.Error(), "cannot take a retraction back") {
		t.Fatalf("NewAggregate with max and retractions: %v", err)
	}
}
