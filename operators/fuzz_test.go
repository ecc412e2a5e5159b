package operators

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

// The fuzz targets of the operators' decoders besides FuzzDecode (record values) and FuzzDecimal
// (numbers): field lookups and the expression stages over any JSON, stored aggregate and
// session states, and window keys. Each has a seed corpus in testdata/fuzz/<Name>; `make fuzz`
// runs them.

// FuzzStages runs any value through nested field lookups, a filter and a map: a result or an
// *Error, never a panic; a map's output is one valid JSON object that still has every member the
// map did not set, and its amount * 0.908 is the exact product.
func FuzzStages(f *testing.F) {
	for _, s := range []string{
		ordersValue, `{"a":{"b":{"c":1}},"amount":2}`, `{"amount":"x"}`, `{"amount":1e400}`, `{"amount":-0.0}`,
		`{"a":[1,{"b":2}],"amount":null}`, `{"a\u0000":1,"amount":3,"amount":4}`, `{"amount":9223372036854775807}`,
		`{"x":` + string(bytes.Repeat([]byte("["), 500)) + string(bytes.Repeat([]byte("]"), 500)) + `,"amount":1}`,
	} {
		f.Add([]byte(s), "a.b.c")
	}
	src := mustSource(f, configs.Source{Topic: "t"})
	filter, err := NewFilter("f", configs.Filter{Expr: `amount > 1 || a?.b != nil`})
	if err != nil {
		f.Fatal(err)
	}
	set, err := NewMap("m", configs.Map{Set: map[string]string{"double": "amount * 2", "a": "a", "tag": `"t-" + string(key)`, "eur": "amount * 0.908"}})
	if err != nil {
		f.Fatal(err)
	}
	sel, err := NewMap("s", configs.Map{Select: []any{"eur", map[string]any{"k": "key"}, "tag", "a", map[string]any{"hour": "hour(ts)"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value []byte, field string) {
		var r Record
		if err := src.Decode([]byte("k"), value, 7, &r); err != nil {
			return
		}
		in, _, _ := r.top("amount")
		in = bytes.Clone(in) // r.Value changes under the map
		if p, err := checkedPath(field); err == nil {
			if raw, ok, err := r.lookup(p); err != nil {
				t.Fatalf("lookup on a decoded value: %v", err)
			} else if ok && !json.Valid(raw) {
				t.Fatalf("lookup(%q) = %q, not a JSON value", field, raw)
			}
		}
		for _, st := range []Stage{filter, set, sel} {
			keep, err := st.Apply(&r)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: error %T %v, want *Error", st.Name(), err, err)
				}
				return
			}
			if !keep {
				return
			}
			if st == set {
				// The index the map made as it wrote the value is the value's.
				want, err := indexObject(r.Value, nil)
				if err != nil {
					t.Fatalf("map output %q is not a JSON object: %v", r.Value, err)
				}
				if got, _ := r.index(); !slices.Equal(got, want) {
					t.Fatalf("map output %q: its index %v, parsed %v", r.Value, got, want)
				}
			}
		}
		if _, err := indexObject(r.Value, nil); err != nil {
			t.Fatalf("map output %q is not a JSON object: %v", r.Value, err)
		}
		idx, _ := r.index()
		var names []string
		for _, m := range idx {
			names = append(names, string(r.Value[m.ks:m.ke]))
		}
		if strings.Join(names, ",") != "eur,k,tag,a,hour" {
			t.Fatalf("select output %q has members %v, want eur, k, tag, a, hour", r.Value, names)
		}
		if raw, ok, _ := r.top("tag"); !ok || string(raw) != `"t-k"` {
			t.Fatalf("map output %q lost the field it set", r.Value)
		}
		// A number amount converts exactly (expressions compute on exact decimals).
		if e := exponentOf(string(in)); e > -2000 && e < 2000 && len(in) > 0 && len(in) < 200 && in[0] != '"' {
			amount, _ := new(big.Rat).SetString(string(in))
			if amount != nil {
				raw, _, _ := r.top("eur")
				want := amount.Mul(amount, big.NewRat(908, 1000))
				if got, ok := new(big.Rat).SetString(string(raw)); !ok || got.Cmp(want) != 0 {
					t.Fatalf("amount %s * 0.908 = %s, want %s", in, raw, want.RatString())
				}
			}
		}
	})
}

// FuzzAggregateState: any stored bytes are a valid state or not; a valid one renders to a JSON
// object, and folds and merges without panicking.
func FuzzAggregateState(f *testing.F) {
	agg := mustAggregate(f, ordersAgg())
	empty := make([]byte, agg.StateSize())
	agg.InitState(empty)
	f.Add(empty)
	f.Add(foldValues(f, agg, `{"amount":1.5}`, `{"amount":-2}`))
	f.Add(foldValues(f, agg, `{"amount":170141183460469231731687303715.884105727}`, `{"amount":170141183460469231731687303715.884105727}`))
	f.Add([]byte{1, 2, 3})
	in, err := agg.Project(decoded(f, "c-1", `{"amount":-3.25}`, 7), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !agg.ValidState(b) {
			return
		}
		st := bytes.Clone(b)
		if out := agg.Render([]byte("c-1"), st, nil); !json.Valid(out) {
			t.Fatalf("Render(%x) = %s, not JSON", b, out)
		}
		// A valid state of a huge count (2^62, which no input reaches) may overflow when merged
		// with itself; folding and rendering must still not panic.
		agg.Fold(st, in)
		agg.Merge(st, b)
		if out := agg.RenderWindow([]byte("c-1"), 0, 60_000, st, nil); !json.Valid(out) {
			t.Fatalf("RenderWindow = %s, not JSON", out)
		}
	})
}

// FuzzAggregateFieldsState is FuzzAggregateState for an aggregate with filtered fields and min
// and max over strings (a state of variable size): a valid state renders to JSON, folds and
// merges without panicking, and stays valid when merged with a state folded from records.
func FuzzAggregateFieldsState(f *testing.F) {
	agg := mustAggregate(f, fieldsAgg())
	empty := make([]byte, agg.StateSize())
	agg.InitState(empty)
	f.Add(empty)
	f.Add(foldValues(f, agg, `{"price":1.5,"name":"b"}`, `{"price":200,"name":"\u00e9t\u00e9"}`))
	f.Add(foldValues(f, agg, `{"price":150,"name":""}`))
	f.Add([]byte{2, 1, 0})
	other := foldValues(f, agg, `{"price":3,"name":"zz"}`, `{"price":300,"name":"a"}`)
	in, err := agg.Project(decoded(f, "c-1", `{"price":-3.25,"name":"m"}`, 7), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !agg.ValidState(b) {
			return
		}
		st := bytes.Clone(b)
		if out := agg.Render([]byte("c-1"), st, nil); !json.Valid(out) {
			t.Fatalf("Render(%x) = %s, not JSON", b, out)
		}
		st = agg.Fold(st, in)
		st = agg.Merge(st, other)
		if !agg.ValidSize(len(st)) {
			t.Fatalf("state of %d bytes after a fold and a merge", len(st))
		}
		if out := agg.Render([]byte("c-1"), st, nil); !json.Valid(out) {
			t.Fatalf("Render after fold = %s, not JSON", out)
		}
	})
}

// sessCtx is an operators.Context over one key's state, for the session fuzz target.
type sessCtx struct {
	wm    int64
	state []byte
	outs  [][]byte
}

func (c *sessCtx) Watermark() int64  { return c.wm }
func (c *sessCtx) State() []byte     { return c.state }
func (c *sessCtx) Put(st []byte)     { c.state = bytes.Clone(st) }
func (c *sessCtx) Append(b []byte)   { c.state = append(c.state, b...) }
func (c *sessCtx) Delete()           { c.state = nil }
func (c *sessCtx) SetTimer(int64)    {}
func (c *sessCtx) ClearTimer()       {}
func (c *sessCtx) Emit(value []byte) { c.outs = append(c.outs, bytes.Clone(value)) }

func (c *sessCtx) EmitAt(value []byte, _ int64) { c.Emit(value) }

func (c *sessCtx) EmitKey(_, value []byte) { c.Emit(value) }

// at sets the watermark of the next call.
func (c *sessCtx) at(wm int64) Context { c.wm = wm; return c }

// FuzzSessionState: any stored bytes are a sessions state or not (ValidState, the restore's
// check), for emit: final and emit: updates (whose state also holds what was published); Process
// refuses bytes that are not laid out as sessions with an error; on a valid state, Process,
// Flush and OnTimer keep it valid (sessions sorted and apart) and emit JSON objects.
func FuzzSessionState(f *testing.F) {
	var ops []*Sessions
	for _, emit := range []string{"final", "updates"} {
		cfg := ordersAgg()
		cfg.Window, cfg.Emit = &configs.Window{Session: 30 * time.Second, Grace: time.Second}, emit
		s, err := NewSessions("sessions", cfg)
		if err != nil {
			f.Fatal(err)
		}
		ops = append(ops, s)
	}
	in, err := ops[0].Project(0, decoded(f, "c-1", `{"amount":2.5}`, 7), nil)
	if err != nil {
		f.Fatal(err)
	}
	// Seeds: no state, one session, two sessions (published or not), and bytes that are none.
	f.Add([]byte{}, int64(1_000), int64(0))
	for _, s := range ops {
		seed := &sessCtx{}
		for _, ts := range []int64{1_000, 100_000} {
			if err := s.Process(seed.at(math.MinInt64), []byte("c-1"), ts, in); err != nil {
				f.Fatal(err)
			}
			f.Add(bytes.Clone(seed.state), int64(50_000), int64(200_000))
			if s.Updates() {
				if err := s.Flush(seed, []byte("c-1")); err != nil {
					f.Fatal(err)
				}
				f.Add(bytes.Clone(seed.state), int64(50_000), int64(200_000))
			}
		}
	}
	f.Add([]byte{0, 0, 0, 1, 1, 2}, int64(0), int64(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, int64(math.MaxInt64), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, st []byte, ts, wm int64) {
		for _, s := range ops {
			c := &sessCtx{state: bytes.Clone(st)}
			if len(st) == 0 {
				c.state = nil
			}
			valid := s.ValidState(st)
			laidOut := (&Sessions{agg: s.agg, updates: s.updates}).decode(st)
			ts = min(max(ts, MinTime), MaxTime) // Source.Decode's range
			err := s.Process(c.at(min(wm, ts)), []byte("c-1"), ts, in)
			switch {
			case !laidOut && err == nil:
				t.Fatalf("updates=%v: Process accepted state %x, which is not laid out as sessions", s.updates, st)
			case valid && err != nil:
				t.Fatalf("updates=%v: Process on a valid state %x: %v", s.updates, st, err)
			case !valid:
				continue // decodable but not valid: the restore refuses it; Process must only not panic
			}
			if !s.ValidState(c.state) {
				t.Fatalf("updates=%v: Process made state %x of %x", s.updates, c.state, st)
			}
			if err := s.OnTimer(c.at(wm), []byte("c-1"), wm); err != nil {
				t.Fatalf("OnTimer: %v", err)
			}
			if c.state != nil && !s.ValidState(c.state) {
				t.Fatalf("updates=%v: OnTimer made state %x", s.updates, c.state)
			}
			if err := s.Flush(c, []byte("c-1")); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if c.state != nil && !s.ValidState(c.state) {
				t.Fatalf("updates=%v: Flush made state %x", s.updates, c.state)
			}
			for _, o := range c.outs {
				if !json.Valid(o) {
					t.Fatalf("output %s is not JSON", o)
				}
			}
		}
	})
}

// FuzzDistinctState: any stored bytes are a distinct state or not (ValidState, the restore's
// check); Process refuses a state that is not with an error; on a valid state it keeps it valid,
// only ever adds flags to the mask, and emits a JSON object exactly when it adds one.
func FuzzDistinctState(f *testing.F) {
	d, err := NewDistinct("firsts", configs.Distinct{Input: "orders", Flags: map[string]string{
		"all": "true", "cheap": "amount < 10", "dear": "amount >= 100"}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{}, int64(5))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 3}, int64(500))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 8}, int64(5))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0}, int64(5))
	f.Fuzz(func(t *testing.T, st []byte, amount int64) {
		in, c := distinctFuzzInput(t, d, fmt.Appendf(nil, `{"amount":%d,"all":"x"}`, amount), 0, st)
		valid := len(st) == 0 || d.ValidState(st)
		err := d.Process(c, []byte("c-1"), 0, in)
		switch {
		case !valid && err == nil:
			t.Fatalf("Process accepted state %x", st)
		case valid && err != nil:
			t.Fatalf("Process on a valid state %x: %v", st, err)
		case !valid:
			return
		}
		if c.state != nil && !d.ValidState(c.state) {
			t.Fatalf("Process made state %x of %x", c.state, st)
		}
		var before, after uint64
		if len(st) == 9 {
			before = binary.BigEndian.Uint64(st[1:])
		}
		if c.state != nil {
			after = binary.BigEndian.Uint64(c.state[1:])
		}
		if before&^after != 0 {
			t.Fatalf("Process dropped flags: %x to %x", before, after)
		}
		if added := after != before; added != (len(c.outs) == 1) || len(c.outs) > 1 {
			t.Fatalf("mask %x to %x, outputs %q", before, after, c.outs)
		}
		for _, o := range c.outs {
			var v map[string]any
			if err := json.Unmarshal(o, &v); err != nil || len(v) != 4 {
				t.Fatalf("output %q: %v (want amount and the three columns)", o, err)
			}
		}
	})
}

// distinctFuzzInput decodes value (key c-1, time ts) and projects it for d; the context holds a
// copy of st as the key's state (none when st is empty).
func distinctFuzzInput(t *testing.T, d *Distinct, value []byte, ts int64, st []byte) ([]byte, *sessCtx) {
	var r Record
	src, _ := NewSource("orders", configs.Source{Topic: "orders"})
	if err := src.Decode([]byte("c-1"), value, ts, &r); err != nil {
		t.Fatal(err)
	}
	in, err := d.Project(0, &r, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &sessCtx{state: bytes.Clone(st)}
	if len(st) == 0 {
		c.state = nil
	}
	return in, c
}

// FuzzDistinctWindowsState: any stored bytes are a windowed distinct's state or not (ValidState,
// the restore's check); Process refuses bytes not laid out as windows with an error; on a valid
// state, Process and OnTimer keep it valid, Process emits one JSON object (the amount, the three
// flag columns, window_start and window_end) per window it adds a flag to and none otherwise, and
// OnTimer leaves no window the watermark has closed.
func FuzzDistinctWindowsState(f *testing.F) {
	d, err := NewDistinct("firsts", configs.Distinct{Input: "orders", Flags: map[string]string{
		"all": "true", "cheap": "amount < 10", "dear": "amount >= 100"},
		Window: &configs.Window{Hopping: 30 * time.Millisecond, Advance: 10 * time.Millisecond, Grace: 5 * time.Millisecond}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	win := []byte{2, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 3}
	f.Add([]byte{}, int64(5), int64(25), int64(0))
	f.Add(win, int64(500), int64(25), int64(40))
	f.Add(win, int64(5), int64(-7), int64(-100))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 3}, int64(5), int64(5), int64(0))
	f.Fuzz(func(t *testing.T, st []byte, amount, ts, wm int64) {
		in, c := distinctFuzzInput(t, d, fmt.Appendf(nil, `{"amount":%d,"window_end":"x"}`, amount), ts, st)
		laidOut := len(st) == 0 || st[0] == distinctWindowsVersion && (len(st)-1)%16 == 0
		valid := len(st) == 0 || d.ValidState(st)
		err := d.Process(c.at(wm), []byte("c-1"), ts, in)
		switch {
		case !laidOut && err == nil:
			t.Fatalf("Process accepted state %x, which is not laid out as windows", st)
		case valid && err != nil:
			t.Fatalf("Process on a valid state %x: %v", st, err)
		case !valid:
			return // decodable but not valid: the restore refuses it; Process must only not panic
		}
		if c.state != nil && !d.ValidState(c.state) {
			t.Fatalf("Process made state %x of %x", c.state, st)
		}
		if added := !bytes.Equal(c.state, st) && !(c.state == nil && len(st) == 0); added != (len(c.outs) > 0) {
			t.Fatalf("state %x to %x, outputs %q", st, c.state, c.outs)
		}
		for _, o := range c.outs {
			var v map[string]any
			if err := json.Unmarshal(o, &v); err != nil || len(v) != 6 {
				t.Fatalf("output %q: %v (want amount, the three flag columns and the window's)", o, err)
			}
		}
		if err := d.OnTimer(c.at(wm), []byte("c-1"), wm); err != nil {
			t.Fatalf("OnTimer: %v", err)
		}
		if c.state != nil && !d.ValidState(c.state) {
			t.Fatalf("OnTimer made state %x", c.state)
		}
		if c.state != nil && d.win.Close(int64(binary.BigEndian.Uint64(c.state[1:]))) <= wm {
			t.Fatalf("OnTimer at %d kept a closed window: %x", wm, c.state)
		}
	})
}
