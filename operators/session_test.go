package operators

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

func sessionCogroupCfg(gap time.Duration) configs.Cogroup {
	return configs.Cogroup{
		Inputs: []string{"orders", "refunds"},
		Fields: map[string]map[string]any{
			"spent":    {"sum": "amount", "from": "orders"},
			"orders":   {"count": map[string]any{}, "from": "orders"},
			"biggest":  {"max": "amount", "from": "orders"},
			"refunded": {"sum": "amount", "from": "refunds"},
			"refunds":  {"count": map[string]any{}, "from": "refunds"},
			"avg_ref":  {"avg": "amount", "from": "refunds"},
		},
		Emit:   "final",
		Window: &configs.Window{Session: gap, Grace: 5 * time.Millisecond},
	}
}

// TestSessionCogroup: a session cogroup merges the sessions of a key across its inputs (a refund
// bridges two sessions of orders), judges lateness by the watermark it is given, closes a
// session only once no record on time could still join it, and renders a
// closed session like a one-input session aggregate (window_start, window_end = last + gap), with
// the fields of an input without records in the session as an empty aggregate renders them.
func TestSessionCogroup(t *testing.T) {
	s, err := NewSessionCogroup("balance", sessionCogroupCfg(15*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Attributes(); !a.InternalSorter || !a.OutputOnlyAtEnd || a.OutputOnCheckpoint {
		t.Fatalf("attributes %+v", a)
	}
	src := mustSource(t, configs.Source{Topic: "t"})
	c := &sessCtx{}
	feed := func(input int, ts int64, amount string) {
		t.Helper()
		var r Record
		if err := src.Decode([]byte("c-1"), []byte(`{"amount":`+amount+`}`), ts, &r); err != nil {
			t.Fatal(err)
		}
		in, err := s.Project(input, &r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if in[0] != byte(input) {
			t.Fatalf("projected input of input %d starts with %d", input, in[0])
		}
		if err := s.Process(c.at(math.MinInt64), []byte("c-1"), ts, in); err != nil {
			t.Fatal(err)
		}
		if !s.ValidState(c.state) {
			t.Fatalf("state %x not valid", c.state)
		}
	}
	feed(0, 100, "5")
	feed(0, 120, "7")  // a second session of orders: 120 - 100 >= gap
	feed(1, 110, "2")  // a refund within the gap of both: one session [100, 120]
	feed(1, 200, "1")  // a refund alone
	feed(0, 300, "-1") // an order alone (no refunds in its session)
	// A session of a cogroup closes when every record that could still join it is late: at
	// last + gap - 1 + gap + grace (120 + 14 + 15 + 5 = 154 for the first), not at its end +
	// grace (140) as a one-input session does.
	for _, wm := range []int64{140, 153} {
		if err := s.OnTimer(c.at(wm), []byte("c-1"), wm); err != nil {
			t.Fatal(err)
		}
		if len(c.outs) != 0 {
			t.Fatalf("watermark %d closed %s", wm, c.outs[0])
		}
	}
	for _, wm := range []int64{154, math.MaxInt64} {
		if err := s.OnTimer(c.at(wm), []byte("c-1"), wm); err != nil {
			t.Fatal(err)
		}
		if wm == 154 && len(c.outs) != 1 {
			t.Fatalf("watermark 154 closed %d sessions, want 1", len(c.outs))
		}
	}
	want := []string{
		`{"key":"c-1","window_start":100,"window_end":135,"avg_ref":2,"biggest":7,"orders":2,"refunded":2,"refunds":1,"spent":12}`,
		`{"key":"c-1","window_start":200,"window_end":215,"avg_ref":1,"biggest":null,"orders":0,"refunded":1,"refunds":1,"spent":0}`,
		`{"key":"c-1","window_start":300,"window_end":315,"avg_ref":null,"biggest":-1,"orders":1,"refunded":0,"refunds":0,"spent":-1}`,
	}
	var got []string
	for _, o := range c.outs {
		got = append(got, string(o))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("outputs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.state != nil {
		t.Fatalf("state %x left after every session closed", c.state)
	}
	// Lateness: a session of its own closes at ts + gap + grace; the input does not matter to
	// the operator (the runtime passes the input's watermark).
	for _, in := range []int{0, 1} {
		if !s.IsLate(in, 100, 120) || s.IsLate(in, 100, 119) {
			t.Errorf("input %d: IsLate around 100 + 15 + 5 wrong", in)
		}
	}
	// A session cogroup needs a session window.
	cfg := sessionCogroupCfg(time.Second)
	cfg.Emit, cfg.Window = "final", &configs.Window{Tumbling: time.Second}
	if _, err := NewSessionCogroup("balance", cfg); err == nil {
		t.Fatal("a tumbling window accepted")
	}
}

// TestSessionPartials: a key's records folded by re-keying writers into partial sessions
// (FoldPartial, in tables flushed at random points, some records passed on as they are) and
// merged by the reader in any order (MergePartial, Process) give the sessions, states and
// finals of the records processed one by one, for emit: final and emit: updates; a partial
// starts at its earliest record, and bytes that are not a partial are refused.
func TestSessionPartials(t *testing.T) {
	src := mustSource(t, configs.Source{Topic: "t"})
	for _, emit := range []string{"final", "updates"} {
		cfg := ordersAgg()
		cfg.Window, cfg.Emit = &configs.Window{Session: 20 * time.Millisecond}, emit
		mk := func() *Sessions {
			s, err := NewSessions("s", cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		for seed := int64(1); seed <= 300; seed++ {
			rng := rand.New(rand.NewSource(seed))
			type rec struct {
				ts int64
				in []byte
			}
			n := 1 + rng.Intn(40)
			recs := make([]rec, n)
			proj := mk()
			for i := range recs {
				var r Record
				ts := rng.Int63n(400)
				if err := src.Decode([]byte("k"), []byte(`{"amount":`+strconv.Itoa(rng.Intn(100)-20)+`}`), ts, &r); err != nil {
					t.Fatal(err)
				}
				in, err := proj.Project(0, &r, nil)
				if err != nil {
					t.Fatal(err)
				}
				recs[i] = rec{ts, in}
			}
			want, ref := &sessCtx{}, mk()
			for _, r := range recs {
				if err := ref.Process(want.at(math.MinInt64), []byte("k"), r.ts, r.in); err != nil {
					t.Fatal(err)
				}
			}
			// The writers: each record goes to a random writer's open table, or as it is; a
			// table is flushed at random points and at the end.
			type item struct {
				partial []byte
				r       rec
			}
			var items []item
			w := mk()
			tables := make([][]byte, 1+rng.Intn(3))
			lo := make([]int64, len(tables))
			flush := func(i int) {
				if tables[i] == nil {
					return
				}
				p := bytes.Clone(w.PartialBytes(tables[i]))
				if start, ok := w.PartialStart(p); !ok || start != lo[i] {
					t.Fatalf("seed %d: partial %x starts at %d, %v, want %d", seed, p, start, ok, lo[i])
				}
				items = append(items, item{partial: p})
				tables[i] = nil
			}
			for _, r := range recs {
				i := rng.Intn(len(tables))
				switch rng.Intn(5) {
				case 0:
					items = append(items, item{r: r})
					continue
				case 1:
					flush(i)
				}
				if tables[i] == nil {
					tables[i] = make([]byte, w.PartialSize())
					w.InitPartial(tables[i])
					lo[i] = math.MaxInt64
				}
				tables[i] = w.FoldPartial(tables[i], r.ts, r.in)
				lo[i] = min(lo[i], r.ts)
			}
			for i := range tables {
				flush(i)
			}
			rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
			got, rd := &sessCtx{}, mk()
			for _, it := range items {
				var err error
				if it.partial != nil {
					err = rd.MergePartial(got.at(math.MinInt64), []byte("k"), it.partial)
				} else {
					err = rd.Process(got.at(math.MinInt64), []byte("k"), it.r.ts, it.r.in)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !rd.ValidState(got.state) {
					t.Fatalf("seed %d: state %x not valid", seed, got.state)
				}
			}
			if g, wt := spansOf(rd, got.state), spansOf(ref, want.state); g != wt {
				t.Fatalf("%s seed %d: sessions\n%s\nwant\n%s", emit, seed, g, wt)
			}
			if err := rd.OnTimer(got.at(math.MaxInt64), []byte("k"), math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if err := ref.OnTimer(want.at(math.MaxInt64), []byte("k"), math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if emit == "final" && !slices.EqualFunc(got.outs, want.outs, bytes.Equal) {
				t.Fatalf("seed %d: finals %q, want %q", seed, got.outs, want.outs)
			}
			if emit == "final" {
				// And the sessions by their definition, from the records' times alone: sorted,
				// a record less than the gap after the previous one joins its session.
				ts := make([]int64, len(recs))
				for i, r := range recs {
					ts[i] = r.ts
				}
				slices.Sort(ts)
				var oracle []string
				for i := 0; i < len(ts); {
					j := i + 1
					for j < len(ts) && ts[j]-ts[j-1] < 20 {
						j++
					}
					oracle = append(oracle, fmt.Sprintf(`"window_start":%d,"window_end":%d,`, ts[i], ts[j-1]+20)+fmt.Sprintf(`"orders":%d`, j-i))
					i = j
				}
				if len(got.outs) != len(oracle) {
					t.Fatalf("seed %d: %d sessions, the oracle %d: %q", seed, len(got.outs), len(oracle), got.outs)
				}
				for i, o := range got.outs {
					ws, _, _ := strings.Cut(oracle[i], `"orders"`)
					if !strings.Contains(string(o), ws) || !strings.Contains(string(o), oracle[i][len(ws):]) {
						t.Fatalf("seed %d: session %s, the oracle's %s", seed, o, oracle[i])
					}
				}
			}
		}
		s := mk()
		for _, bad := range [][]byte{nil, {0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 1, 1}, append([]byte{0, 0, 0, 2}, make([]byte, 2*(16+s.agg.StateSize())-1)...)} {
			if _, ok := s.PartialStart(bad); ok {
				t.Fatalf("%s: %x taken as a partial", emit, bad)
			}
		}
	}
}

// spansOf renders the sessions (start, last, state) of a sessions state st of s.
func spansOf(s *Sessions, st []byte) string {
	if !s.decode(st) {
		return "not a state"
	}
	var b strings.Builder
	for _, x := range s.ss {
		fmt.Fprintf(&b, "[%d %d %x] ", x.start, x.last, x.st)
	}
	return b.String()
}
