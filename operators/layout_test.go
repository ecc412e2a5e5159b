package operators

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

// TestLayoutText pins the persistent text and fingerprint of the demo aggregate's layout: they
// are stored beside every user's state and carried on every changelog record, so a change here
// makes every existing deployment refuse to start. Change them only with the state version.
func TestLayoutText(t *testing.T) {
	a := mustAggregate(t, ordersAgg())
	l := a.Layout()
	const want = "aggregate/v1 amount=sum(amount) avg_amount=avg(amount) max_amount=max(amount) min_amount=min(amount) orders=count()"
	if got := l.String(); got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
	if got, want := a.Fingerprint(), "afbeb509ecd96ee6"; got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
	if fp := a.Fingerprint(); len(fp) != 16 || fp != l.Fingerprint() {
		t.Fatalf("fingerprint %q (layout's %q)", fp, l.Fingerprint())
	}
}

// TestLayoutYAMLOrder: the order of the fields in the YAML file is not part of the layout.
func TestLayoutYAMLOrder(t *testing.T) {
	doc := func(fields string) string {
		return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: g
instance_id: i
sources: {orders: {topic: orders}}
operators:
  - name: totals
    aggregate:
      input: orders
      fields:
%s
    output: out
sinks: {out: {topic: out}}
`, fields)
	}
	fp := func(fields string) string {
		t.Helper()
		cfg, err := configs.Parse([]byte(doc(fields)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return mustAggregate(t, *cfg.Operators[0].Aggregate).Fingerprint()
	}
	a := fp("        total: {sum: amount}\n        n: {count: {}}\n        top: {max: amount}")
	b := fp("        top: {max: amount}\n        total: {sum: amount}\n        n: {count: {}}")
	if a != b {
		t.Fatalf("reordering the YAML fields changed the fingerprint: %s vs %s", a, b)
	}
}

// TestLayoutChanges: every change to the fields changes the layout, including changes that keep
// the state's size (sum and avg are both 24 bytes; a renamed field moves in the state); the emit
// mode changes nothing.
func TestLayoutChanges(t *testing.T) {
	base := ordersAgg()
	fpOf := func(cfg configs.Aggregate) string { return mustAggregate(t, cfg).Fingerprint() }
	ref := fpOf(base)
	with := func(edit func(f map[string]map[string]any)) configs.Aggregate {
		c := ordersAgg()
		edit(c.Fields)
		return c
	}
	for name, cfg := range map[string]configs.Aggregate{
		"function, same size": with(func(f map[string]map[string]any) { f["amount"] = map[string]any{"avg": "amount"} }),
		"input field":         with(func(f map[string]map[string]any) { f["amount"] = map[string]any{"sum": "price"} }),
		"renamed": with(func(f map[string]map[string]any) {
			f["zamount"] = f["amount"]
			delete(f, "amount")
		}),
		"added":   with(func(f map[string]map[string]any) { f["n2"] = map[string]any{"count": map[string]any{}} }),
		"removed": with(func(f map[string]map[string]any) { delete(f, "min_amount") }),
	} {
		if fp := fpOf(cfg); fp == ref {
			t.Errorf("%s: fingerprint unchanged (%s)", name, mustAggregate(t, cfg).Layout())
		}
	}
	final := ordersAgg()
	final.Emit = "final"
	if fp := fpOf(final); fp != ref {
		t.Errorf("emit changed the fingerprint")
	}
}

func TestLayoutPartQuotes(t *testing.T) {
	for _, c := range []struct {
		name, fn string
		args     []string
		want     string
	}{
		{"n", "count", nil, "n=count()"},
		{"total", "sum", []string{"order.amount"}, "total=sum(order.amount)"},
		{"total", "sum", []string{"a b"}, `total=sum("a b")`},
		{"total", "sum", []string{"a)"}, `total=sum("a)")`},
		{"w", "tumbling", []string{"60000ms", "0ms"}, "w=tumbling(60000ms,0ms)"},
	} {
		if got := LayoutPart(c.name, c.fn, c.args...); got != c.want {
			t.Errorf("LayoutPart(%q, %q, %q) = %s, want %s", c.name, c.fn, c.args, got, c.want)
		}
	}
}

func TestParseLayout(t *testing.T) {
	for _, l := range []Layout{
		mustAggregate(t, ordersAgg()).Layout(),
		{Kind: "aggregate", Version: 2, Parts: []string{LayoutPart("a b", "sum", "x \" y", "z"), LayoutPart("n", "count"), "window=tumbling:60000ms"}},
		{Kind: "aggregate", Version: 1},
	} {
		got, ok := ParseLayout(l.String())
		if !ok || got.String() != l.String() || len(got.Parts) != len(l.Parts) {
			t.Errorf("ParseLayout(%s) = %q, %v", l, got.Parts, ok)
		}
	}
	for _, bad := range []string{"", "aggregate", "aggregate/vx a=b()", "/v1", `aggregate/v1 a=sum("x)`} {
		if l, ok := ParseLayout(bad); ok {
			t.Errorf("ParseLayout(%q) = %+v, want false", bad, l)
		}
	}
}

// TestWindowLayout: a window is part of an aggregate's layout (its keys mean windows of that
// size and advance), its grace is not (it changes when windows close, not what a state means).
func TestWindowLayout(t *testing.T) {
	fields := map[string]map[string]any{"n": {"count": map[string]any{}}}
	layout := func(w *configs.Window) string {
		t.Helper()
		a, err := NewAggregate("agg", configs.Aggregate{Input: "in", Fields: fields, Window: w})
		if err != nil {
			t.Fatal(err)
		}
		return a.Layout().String()
	}
	for _, tc := range []struct {
		w    *configs.Window
		want string
	}{
		{nil, "aggregate/v1 n=count()"},
		{&configs.Window{Tumbling: time.Minute}, "aggregate/v1 n=count() window=tumbling:60000ms"},
		{&configs.Window{Tumbling: time.Minute, Grace: time.Second}, "aggregate/v1 n=count() window=tumbling:60000ms"},
		{&configs.Window{Hopping: time.Hour, Advance: 10 * time.Minute}, "aggregate/v1 n=count() window=hopping:3600000ms:advance:600000ms"},
	} {
		if got := layout(tc.w); got != tc.want {
			t.Errorf("window %+v: layout %q, want %q", tc.w, got, tc.want)
		}
	}
}

// TestSessionCogroupLayout: a session cogroup's layout is the cogroup's (kind, inputs, each
// field's input) with its session gap, so it differs from the same cogroup with tumbling
// windows, from a one-input session aggregate of the same fields, and from another gap; the
// existing layouts are unchanged (TestLayoutText, TestWindowLayout pin them).
func TestSessionCogroupLayout(t *testing.T) {
	cg := configs.Cogroup{
		Inputs: []string{"orders", "refunds"},
		Fields: map[string]map[string]any{"n": {"count": map[string]any{}, "from": "orders"}, "r": {"sum": "amount", "from": "refunds"}},
		Emit:   "final",
		Window: &configs.Window{Session: time.Minute, Grace: time.Second},
	}
	s, err := NewSessionCogroup("b", cg)
	if err != nil {
		t.Fatal(err)
	}
	const want = `cogroup/v1 inputs=list(orders,refunds) n=count("from=orders") r=sum(amount,"from=refunds") window=session:60000ms`
	if got := s.Layout().String(); got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
	tumbling := cg
	tumbling.Window = &configs.Window{Tumbling: time.Minute}
	tc, err := NewCogroup("b", tumbling)
	if err != nil {
		t.Fatal(err)
	}
	one := configs.Aggregate{Input: "orders", Emit: "final", Window: cg.Window,
		Fields: map[string]map[string]any{"n": {"count": map[string]any{}}, "r": {"sum": "amount"}}}
	os, err := NewSessions("b", one)
	if err != nil {
		t.Fatal(err)
	}
	gap := cg
	gap.Window = &configs.Window{Session: 2 * time.Minute, Grace: time.Second}
	gs, err := NewSessionCogroup("b", gap)
	if err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]Layout{"tumbling cogroup": tc.Layout(), "one-input sessions": os.Layout(), "another gap": gs.Layout()} {
		if other.Fingerprint() == s.Layout().Fingerprint() {
			t.Errorf("%s: same fingerprint as the session cogroup (%s)", name, other)
		}
	}
	grace := cg
	grace.Window = &configs.Window{Session: time.Minute}
	if g, err := NewSessionCogroup("b", grace); err != nil || g.Layout().String() != want {
		t.Errorf("the grace changed the layout: %v %v", g.Layout(), err)
	}
}
