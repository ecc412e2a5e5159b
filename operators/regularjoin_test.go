package operators

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluice-dev/sluice/configs"
)

// rjCtx is an operators.Context over one key's state that counts what the join writes: the
// bytes it Puts and Appends.
type rjCtx struct {
	sessCtx
	puts, putBytes, appended int
}

func (c *rjCtx) Put(st []byte)   { c.puts++; c.putBytes += len(st); c.sessCtx.Put(st) }
func (c *rjCtx) Append(b []byte) { c.appended += len(b); c.sessCtx.Append(b) }

func mustRegularJoin(t testing.TB, unique string) *RegularJoin {
	t.Helper()
	j, err := NewRegularJoin("j", configs.Join{Left: "bids", Right: "sellers", Unique: unique})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// rjIn is a projected input of side (0 left, 1 right).
func rjIn(side byte, v string) []byte { return append([]byte{side}, v...) }

// rjWant is a record of the state as TestRegularJoinState writes it by hand: its bytes, then
// its side, length and links.
func rjWant(v string, side byte, prevSame, lastOther uint32) []byte {
	b := append([]byte(v), side)
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	b = binary.BigEndian.AppendUint32(b, prevSame)
	return binary.BigEndian.AppendUint32(b, lastOther)
}

// TestRegularJoinState pins the state layout (version 2) and the pairs, record by record: each
// record appended with its trailer, linked to its side's previous record and the other side's
// last; each pair emitted once, with the other side's records in arrival order.
func TestRegularJoinState(t *testing.T) {
	if got, want := mustRegularJoin(t, "").Layout().String(), "regular-join/v2 sides=list(bids,sellers) unique=side(none)"; got != want {
		t.Fatalf("layout %q, want %q", got, want)
	}
	if got, want := mustRegularJoin(t, "right").Layout().String(), "regular-join/v2 sides=list(bids,sellers) unique=side(sellers)"; got != want {
		t.Fatalf("layout %q, want %q", got, want)
	}
	j := mustRegularJoin(t, "")
	c := &rjCtx{}
	var want []byte
	steps := []struct {
		side  byte
		v     string
		state []byte // the record's bytes in the state
		outs  []string
	}{
		{0, `{"b":1}`, rjWant(`{"b":1}`, 0, 0, 0), nil},  // ends at 20
		{0, `{"b":2}`, rjWant(`{"b":2}`, 0, 20, 0), nil}, // ends at 40
		{1, `{"s":1}`, rjWant(`{"s":1}`, 1, 0, 40), []string{`{"bids":{"b":1},"sellers":{"s":1}}`, `{"bids":{"b":2},"sellers":{"s":1}}`}}, // 60
		{0, `{"b":3}`, rjWant(`{"b":3}`, 0, 40, 60), []string{`{"bids":{"b":3},"sellers":{"s":1}}`}},                                      // 80
		{1, `{"s":2}`, rjWant(`{"s":2}`, 1, 60, 80), []string{`{"bids":{"b":1},"sellers":{"s":2}}`, `{"bids":{"b":2},"sellers":{"s":2}}`, `{"bids":{"b":3},"sellers":{"s":2}}`}},
		{0, `{"b":4}`, rjWant(`{"b":4}`, 0, 80, 100), []string{`{"bids":{"b":4},"sellers":{"s":1}}`, `{"bids":{"b":4},"sellers":{"s":2}}`}},
	}
	for i, s := range steps {
		c.outs = nil
		if err := j.Process(c, []byte("k"), 0, rjIn(s.side, s.v)); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want = append(want, s.state...)
		if !bytes.Equal(c.state, want) {
			t.Fatalf("step %d: state\n%x\nwant\n%x", i, c.state, want)
		}
		var outs []string
		for _, o := range c.outs {
			outs = append(outs, string(o))
		}
		if !slices.Equal(outs, s.outs) {
			t.Fatalf("step %d: outputs %q, want %q", i, outs, s.outs)
		}
		if !j.ValidState(c.state) {
			t.Fatalf("step %d: ValidState refuses %x", i, c.state)
		}
	}
	if c.puts != 0 {
		t.Fatalf("%d Puts: a join without unique only appends", c.puts)
	}

	// unique: right: the bids wait; the seller joins them and stays alone; later bids pair with it
	// and are not kept; a second seller of the key is ignored.
	u := mustRegularJoin(t, "right")
	c = &rjCtx{}
	for _, in := range [][]byte{rjIn(0, `{"b":1}`), rjIn(0, `{"b":2}`), rjIn(1, `{"s":1}`), rjIn(0, `{"b":3}`), rjIn(1, `{"s":2}`)} {
		if err := u.Process(c, []byte("k"), 0, in); err != nil {
			t.Fatal(err)
		}
	}
	if want := rjWant(`{"s":1}`, 1, 0, 0); !bytes.Equal(c.state, want) {
		t.Fatalf("unique: state %x, want %x", c.state, want)
	}
	if len(c.outs) != 3 {
		t.Fatalf("unique: %d pairs, want 3: %q", len(c.outs), c.outs)
	}
	for _, bad := range [][]byte{
		append(rjWant(`{"b":1}`, 0, 0, 0), rjWant(`{"s":1}`, 1, 0, 20)...), // the unique record after waiting ones
		append(rjWant(`{"s":1}`, 1, 0, 0), rjWant(`{"s":2}`, 1, 20, 0)...), // two unique records
	} {
		if u.ValidState(bad) {
			t.Errorf("unique: ValidState accepts %x", bad)
		}
	}
	for _, bad := range [][]byte{
		rjWant(`{"b":1}`, 0, 20, 0),                                        // a link to itself
		append(rjWant(`{"b":1}`, 0, 0, 0), rjWant(`{"b":2}`, 0, 0, 0)...),  // a missing link
		append(rjWant(`{"b":1}`, 0, 0, 0), rjWant(`{"s":1}`, 1, 0, 0)...),  // a missing other side
		append(rjWant(`{"b":1}`, 0, 0, 0), rjWant(`{"s":1}`, 1, 0, 19)...), // a link between records
		rjWant(`{"b":1}`, 2, 0, 0),                                         // no side
		rjWant(`{"b":1}`, 0, 0, 0)[1:],                                     // a length past the start
		{},
	} {
		if j.ValidState(bad) {
			t.Errorf("ValidState accepts %x", bad)
		}
	}
}

// TestRegularJoinHotKey: a record costs its pairs, not its key's state. Of a key holding
// thousands of records of one side, each further record of that side is appended (its bytes and
// trailer, no Put of the state) and reads none of them; a record of the other side reads them
// all, as it pairs with each.
func TestRegularJoinHotKey(t *testing.T) {
	j := mustRegularJoin(t, "")
	c := &rjCtx{}
	const n = 5000
	if err := j.Process(c, []byte("k"), 0, rjIn(1, `{"s":0}`)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v := fmt.Sprintf(`{"b":%d}`, i)
		c.outs, c.appended = nil, 0
		if err := j.Process(c, []byte("k"), 0, rjIn(0, v)); err != nil {
			t.Fatal(err)
		}
		if c.appended != len(v)+rjTrailer || len(c.outs) != 1 || c.puts != 0 {
			t.Fatalf("bid %d: appended %d bytes (want %d), %d Puts, %d pairs", i, c.appended, len(v)+rjTrailer, c.puts, len(c.outs))
		}
	}
	c.outs = nil
	if err := j.Process(c, []byte("k"), 0, rjIn(1, `{"s":1}`)); err != nil {
		t.Fatal(err)
	}
	if len(c.outs) != n || string(c.outs[0]) != `{"bids":{"b":0},"sellers":{"s":1}}` || string(c.outs[n-1]) != fmt.Sprintf(`{"bids":{"b":%d},"sellers":{"s":1}}`, n-1) {
		t.Fatalf("the second seller: %d pairs, want %d in arrival order", len(c.outs), n)
	}
	if !j.ValidState(c.state) {
		t.Fatal("ValidState refuses the hot key's state")
	}
}

// BenchmarkRegularJoinHotKey: the time of a record of a key that holds held records of its own
// side and one of the other (one pair each): the same whatever held is.
func BenchmarkRegularJoinHotKey(b *testing.B) {
	for _, held := range []int{100, 10_000} {
		b.Run(fmt.Sprint("held=", held), func(b *testing.B) {
			j := mustRegularJoin(b, "")
			c := &rjCtx{}
			in := rjIn(0, `{"bidder":2001,"price":350,"channel":"Google","url":"https://www.nexmark.com/awa/tsqo/_lgz/item.htm?query=1","bid_extra":"ULKRTRMPIgrymwqKKKaTadmyrsbbickjtlfvwxfvpfpza"}`)
			if err := j.Process(c, []byte("k"), 0, rjIn(1, `{"s":1}`)); err != nil {
				b.Fatal(err)
			}
			for range held {
				if err := j.Process(c, []byte("k"), 0, in); err != nil {
					b.Fatal(err)
				}
			}
			base := len(c.state)
			b.ReportAllocs()
			for b.Loop() {
				c.outs = c.outs[:0]
				c.state = c.state[:base]
				if err := j.Process(c, []byte("k"), 0, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzRegularJoinState: any stored bytes are a regular join's state or not (ValidState, the
// restore's check), with or without a unique side; Process never panics on them; on a valid
// state it does not fail, keeps the state valid, and (without unique) pairs the record with
// every record of the other side.
func FuzzRegularJoinState(f *testing.F) {
	var ops []*RegularJoin
	for _, u := range []string{"", "left", "right"} {
		ops = append(ops, mustRegularJoin(f, u))
	}
	seed := &rjCtx{}
	f.Add([]byte{}, false)
	for i, in := range [][]byte{rjIn(0, `{"b":1}`), rjIn(1, `{"s":1}`), rjIn(0, `{"b":2}`), rjIn(1, `{"s":2}`)} {
		if err := ops[0].Process(seed, []byte("k"), 0, in); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(seed.state), i%2 == 0)
	}
	f.Add(rjWant(`{"s":1}`, 1, 0, 0), false)
	f.Add(rjWant(`{"b":1}`, 0, 20, 0), true)
	f.Add([]byte{0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, st []byte, right bool) {
		side := byte(0)
		if right {
			side = 1
		}
		for _, j := range ops {
			c := &rjCtx{}
			c.state = bytes.Clone(st)
			if len(st) == 0 {
				c.state = nil
			}
			valid := len(st) == 0 || j.ValidState(st)
			err := j.Process(c, []byte("k"), 0, rjIn(side, `{"x":1}`))
			switch {
			case valid && err != nil:
				t.Fatalf("unique %d: Process on a valid state %x: %v", j.unique, st, err)
			case !valid:
				continue // the restore refuses it; Process must only not panic
			}
			if c.state != nil && !j.ValidState(c.state) {
				t.Fatalf("unique %d: Process made state %x of %x", j.unique, c.state, st)
			}
			if j.unique >= 0 {
				continue
			}
			// Without unique, a pair with each record of the other side: count them walking the
			// records back from the end, without the links.
			others := 0
			for end := uint32(len(st)); end > 0; {
				e, _ := rjRead(st, end)
				if e.side != side {
					others++
				}
				end = e.start
			}
			if len(c.outs) != others {
				t.Fatalf("Process on %x emitted %d pairs, want %d", st, len(c.outs), others)
			}
		}
	})
}

// TestRegularJoinKeepsSelectedMembers: a join with a select keeps of each side's records only
// the members its columns read (in the record's order, as written, duplicates and escaped
// names included), and writes the same columns from them as from the whole records; a side an
// expression reads is kept whole.
func TestRegularJoinKeepsSelectedMembers(t *testing.T) {
	j, err := NewRegularJoin("j", configs.Join{Left: "bids", Right: "sellers", Unique: "right", Select: []any{
		map[string]any{"price": "bids.price"}, map[string]any{"at": "bids.time"}, map[string]any{"name": "upper(sellers.name)"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Layout().String(); !strings.Contains(got, "kept=members(bids.price,bids.time,sellers)") {
		t.Fatalf("layout %q does not name the kept members", got)
	}
	if acc := j.Layout().Accepts; len(acc) != 1 || strings.Contains(acc[0].String(), "kept") {
		t.Fatalf("accepts %v, want the layout of whole records", acc)
	}
	bid := `{"url":"http://x","price":5,"t\u0069me":7,"extra":"long","price":6}`
	var r Record
	r.Set([]byte("a1"), 0, []byte(bid))
	in, err := j.Project(sideLeft, &r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(in[1:]), `{"price":5,"t\u0069me":7,"price":6}`; got != want {
		t.Fatalf("projected %s, want %s", got, want)
	}
	seller := `{"name":"ann","city":"x"}`
	r.Set([]byte("a1"), 0, []byte(seller))
	if in, err = j.Project(sideRight, &r, nil); err != nil || string(in[1:]) != seller {
		t.Fatalf("the side an expression reads: %s (%v), want it whole", in[1:], err)
	}
	for _, l := range []string{bid, `{"price":5,"t\u0069me":7,"price":6}`} {
		row, _, err := j.sel.pair(nil, []byte("a1"), "bids", []byte(l), "sellers", []byte(seller), false)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(row), `{"price":6,"at":7,"name":"ANN"}`; got != want {
			t.Errorf("from %s: row %s, want %s", l, got, want)
		}
	}
}

// TestRegularJoinKeepsWhereMembers: a join's where adds the members it reads to those its
// select reads (a path into a nested member keeps the top-level member), a side it names other
// than by its members is kept whole, and a where without a select keeps both sides whole (the
// join writes the joined records). The pairs from kept members are those from whole records.
func TestRegularJoinKeepsWhereMembers(t *testing.T) {
	cases := []struct {
		where  string
		sel    []any
		layout string // "" : no kept part
	}{
		{"bids.time <= sellers.until && bids.n.x > 0", []any{map[string]any{"price": "bids.price"}}, "kept=members(bids.n,bids.price,bids.time,sellers.until)"},
		{`sellers["until"] >= bids.time`, []any{map[string]any{"price": "bids.price"}}, "kept=members(bids.price,bids.time,sellers.until)"},
		{"sellers != nil && bids.time > 0", []any{map[string]any{"price": "bids.price"}}, "kept=members(bids.price,bids.time,sellers)"},
		{"bids.time <= sellers.until", nil, ""},
		{"len($env) == 2 && bids.time > 0", []any{map[string]any{"price": "bids.price"}}, ""},
	}
	bid := `{"url":"http://x","price":5,"time":7,"n":{"x":1},"extra":"long"}`
	seller := `{"name":"ann","until":9}`
	for _, c := range cases {
		j, err := NewRegularJoin("j", configs.Join{Left: "bids", Right: "sellers", Unique: "right", Where: c.where, Select: c.sel})
		if err != nil {
			t.Fatal(err)
		}
		got := j.Layout().String()
		if c.layout == "" && strings.Contains(got, "kept") || !strings.Contains(got, c.layout) {
			t.Fatalf("where %s: layout %q, want %q", c.where, got, c.layout)
		}
		var r Record
		r.Set([]byte("a1"), 0, []byte(bid))
		l, err := j.Project(sideLeft, &r, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Set([]byte("a1"), 0, []byte(seller))
		rr, err := j.Project(sideRight, &r, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, ok, err := j.sel.pair(nil, []byte("a1"), "bids", []byte(bid), "sellers", []byte(seller), false)
		if err != nil || !ok {
			t.Fatalf("where %s on whole records: %v %v", c.where, ok, err)
		}
		want = bytes.Clone(want)
		row, ok, err := j.sel.pair(nil, []byte("a1"), "bids", l[1:], "sellers", rr[1:], false)
		if err != nil || !ok || c.sel != nil && !bytes.Equal(row, want) {
			t.Errorf("where %s on kept members %s, %s: %s %v %v, want %s", c.where, l[1:], rr[1:], row, ok, err, want)
		}
	}
}

// TestSelectRowIndex: the index a select makes of a row as it writes it is the one a scan of
// the row makes (escaped column names, copied members, missing ones as null, expressions, a
// failing one as null), for a join's select and a map's; a join's last row is indexed from it.
func TestSelectRowIndex(t *testing.T) {
	cols := []any{"bids", map[string]any{"pri\"ce": "bids.price"}, map[string]any{"none": "bids.nothing"},
		map[string]any{"cents": "bids.price * 100"}, map[string]any{"bad": "bids.url * 2"}, map[string]any{"n": "upper(sellers.name)"}}
	j, err := NewRegularJoin("j", configs.Join{Left: "bids", Right: "sellers", Unique: "right", Select: cols})
	if err != nil {
		t.Fatal(err)
	}
	row, _, err := j.sel.pair(nil, []byte("a1"), "bids", []byte(`{"price":5,"url":"x"}`), "sellers", []byte(`{"name":"ann"}`), false)
	if err != nil {
		t.Fatal(err)
	}
	want, err := indexObject(row, nil)
	if err != nil {
		t.Fatalf("row %s: %v", row, err)
	}
	if !slices.Equal(j.sel.s.row, want) {
		t.Fatalf("row %s: index %v, want %v", row, j.sel.s.row, want)
	}
	var r Record
	r.Set([]byte("a1"), 0, row)
	if !j.IndexRow(&r) || !slices.Equal(r.members, want) {
		t.Fatalf("IndexRow of the last row: %v", r.members)
	}
	r.Set([]byte("a1"), 0, bytes.Clone(row))
	if j.IndexRow(&r) {
		t.Fatal("IndexRow took a copy of the row for the row")
	}
	m, err := NewMap("m", configs.Map{Select: []any{"price", map[string]any{"c": "price * 2"}, map[string]any{"q\\x": "url"}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Set(nil, 0, []byte(`{"url":"x","price":7}`))
	if ok, err := m.Apply(&r); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got := slices.Clone(r.members)
	if want, _ := indexObject(r.Value, nil); !slices.Equal(got, want) {
		t.Fatalf("map select row %s: index %v, want %v", r.Value, got, want)
	}
}

// TestSetIndexed: a record set from a copy of another's value with that one's index
// (AppendMembers, as a task's fork snapshot keeps them) reads the same members without scanning
// the copy, and keeps its own copy of the index: the other's next value does not change it. A
// record without an index for its value, or whose value is not an object, gives none.
func TestSetIndexed(t *testing.T) {
	var src, dst Record
	src.Set(nil, 0, []byte(`{"a":1,"b\u0063":"x","a":[2,3]}`))
	if _, ok := src.AppendMembers(nil); ok {
		t.Fatal("an index of a value never read")
	}
	if _, ok, _ := src.top("a"); !ok {
		t.Fatal("member a missing")
	}
	idx, ok := src.AppendMembers(Members{{ks: 99}})
	if !ok || len(idx) != 4 {
		t.Fatalf("AppendMembers: %v %v", idx, ok)
	}
	copyOf := bytes.Clone(src.Value)
	dst.SetIndexed([]byte("k"), 7, copyOf, idx[1:])
	if unsafe.SliceData(dst.members) == unsafe.SliceData(idx[1:]) {
		t.Fatal("the record holds the index it was given, not a copy")
	}
	if unsafe.SliceData(dst.Value) != dst.idxPtr || !slices.Equal(dst.members, idx[1:]) {
		t.Fatal("the copy is not taken as indexed by the index given")
	}
	src.Set(nil, 0, []byte(`{"zzzzzzz":0}`))
	_, _, _ = src.top("zzzzzzz") // reindexes into src's own members
	for name, want := range map[string]string{"a": "[2,3]", "bc": `"x"`} {
		got, ok, err := dst.top(name)
		if err != nil || !ok || string(got) != want {
			t.Errorf("%s: %s %v %v, want %s", name, got, ok, err, want)
		}
	}
	if string(dst.Key) != "k" || dst.Time != 7 {
		t.Errorf("key %q time %d", dst.Key, dst.Time)
	}
	src.Set(nil, 0, []byte(`[1]`))
	_, _, _ = src.top("a")
	if _, ok := src.AppendMembers(nil); ok {
		t.Error("an index of a value that is not an object")
	}
}

// askFilter is a ResultFilter that drops the rows whose member is in drop, and records what it
// was asked.
type askFilter struct {
	member string
	drop   map[string]bool
	raws   []string
	sizes  []int
}

func (f *askFilter) FilterMember() string { return f.member }

func (f *askFilter) DropsBeaten(raw []byte, size int) bool {
	f.raws, f.sizes = append(f.raws, string(raw)), append(f.sizes, size)
	return f.drop[string(raw)]
}

// TestPairSelectAsksResultFilter: a join asks its context's result filter about a row before it
// writes it, with the text of the column the filter ranks by (as the row would have it, null
// when the member is missing: not asked) and a size the row does not exceed; a row the filter
// drops is not written but the pair counts as matched; the rows written between dropped ones
// are those written without a filter. A filter is not asked when the column is an expression's
// (the row's size has no bound before it is written) or not a column.
func TestPairSelectAsksResultFilter(t *testing.T) {
	sel := []any{map[string]any{"id": "sellers.id"}, map[string]any{"price": "bids.price"}, "bids",
		map[string]any{"name": "sellers.name"}, map[string]any{"extra": "bids.extra"}}
	j, err := NewRegularJoin("j", configs.Join{Left: "bids", Right: "sellers", Unique: "right", Where: "bids.time <= sellers.until", Select: sel})
	if err != nil {
		t.Fatal(err)
	}
	seller := `{"id":1,"name":"ann","until":9,"city":"Ber\"lin"}`
	bids := []string{
		`{"price":5,"time":7,"extra":"` + strings.Repeat("x", 300) + `"}`,
		`{"price":6,"time":7}`,
		`{"price":4,"time":10}`, // the where fails: not asked
		`{"time":7,"extra":"no price"}`,
		`{"price":12.50,"time":1,"extra":"\u0041"}`,
	}
	f := &askFilter{member: "price", drop: map[string]bool{"6": true}}
	var wantRaws []string
	for _, b := range bids {
		want, wantOK, err := j.sel.pair(nil, []byte("a1"), "bids", []byte(b), "sellers", []byte(seller), false)
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.Clone(want)
		asked := len(f.raws)
		row, ok, err := j.sel.pair(f, []byte("a1"), "bids", []byte(b), "sellers", []byte(seller), false)
		if err != nil || ok != wantOK {
			t.Fatalf("%s: ok %v (%v), want %v", b, ok, err, wantOK)
		}
		if len(f.raws) > asked {
			if f.sizes[asked] < len(want) {
				t.Errorf("%s: asked with size %d, the row has %d bytes: %s", b, f.sizes[asked], len(want), want)
			}
			wantRaws = append(wantRaws, f.raws[asked])
		}
		var r Record
		r.Set([]byte("a1"), 0, want)
		price, found, _ := r.top("price")
		switch {
		case !wantOK:
			if len(f.raws) > asked {
				t.Errorf("%s: the where fails, yet the filter was asked", b)
			}
		case found && string(price) != "null" && len(f.raws) == asked:
			t.Errorf("%s: not asked", b)
		case f.drop[string(price)]:
			if row != nil {
				t.Errorf("%s: dropped, yet written: %s", b, row)
			}
		case !bytes.Equal(row, want):
			t.Errorf("%s: row %s, want %s", b, row, want)
		}
	}
	if got := strings.Join(wantRaws, " "); got != "5 6 12.50" {
		t.Errorf("asked about %q, want 5 6 12.50", got)
	}
	// Small sides, long and escaped column names: the names weigh in the bound.
	small, err := NewRegularJoin("j", configs.Join{Left: "l", Right: "r", Unique: "right",
		Select: []any{map[string]any{"a_column_name_longer_than_its_side": "l.a"}, map[string]any{"another\"quoted\"name_as_long_as_that": "r.b"}, map[string]any{"gone": "r.c"}}})
	if err != nil {
		t.Fatal(err)
	}
	f = &askFilter{member: "a_column_name_longer_than_its_side"}
	want, _, err := small.sel.pair(nil, []byte("k"), "l", []byte(`{"a":1}`), "r", []byte(`{"b":2}`), false)
	if err != nil {
		t.Fatal(err)
	}
	want = bytes.Clone(want)
	if row, ok, err := small.sel.pair(f, []byte("k"), "l", []byte(`{"a":1}`), "r", []byte(`{"b":2}`), false); err != nil || !ok || !bytes.Equal(row, want) || len(f.sizes) != 1 || f.sizes[0] < len(want) {
		t.Errorf("small sides: row %s (%v %v), want %s; asked with sizes %v, the row has %d bytes", row, ok, err, want, f.sizes, len(want))
	}
	for _, c := range []struct {
		member string
		sel    []any
	}{
		{"price", []any{map[string]any{"price": "bids.price * 2"}, map[string]any{"name": "sellers.name"}}},
		{"price", []any{map[string]any{"price": "bids.price"}, map[string]any{"name": "upper(sellers.name)"}}},
		{"cost", []any{map[string]any{"price": "bids.price"}}},
		{"bids", []any{"bids"}},
	} {
		j, err := NewRegularJoin("j", configs.Join{Left: "bids", Right: "sellers", Unique: "right", Select: c.sel})
		if err != nil {
			t.Fatal(err)
		}
		f := &askFilter{member: c.member, drop: map[string]bool{"6": true}}
		if row, ok, err := j.sel.pair(f, []byte("a1"), "bids", []byte(bids[1]), "sellers", []byte(seller), false); err != nil || !ok || row == nil || len(f.raws) > 0 {
			t.Errorf("%v by %s: row %s ok %v (%v), asked %v; want the row written unasked", c.sel, c.member, row, ok, err, f.raws)
		}
	}
}

// TestSameUnderKey: the members every row of one key has alike are the columns that copy the
// unique side (whole, or a member path of it), and only those.
func TestSameUnderKey(t *testing.T) {
	sel := []any{
		map[string]any{"id": "sellers.id"}, map[string]any{"tier": "sellers.tier.level"}, "sellers",
		map[string]any{"price": "bids.price"}, map[string]any{"upper": "upper(sellers.name)"}, "bids",
	}
	for _, c := range []struct {
		unique, left string
		sel          []any
		members      []string
		want         bool
	}{
		{"right", "bids", sel, []string{"id", "tier"}, true},
		{"right", "bids", sel, []string{"id", "sellers"}, true},
		{"right", "bids", sel, []string{"id", "price"}, false}, // the other side's
		{"right", "bids", sel, []string{"upper"}, false},       // an expression
		{"right", "bids", sel, []string{"bids"}, false},        // the other side whole
		{"right", "bids", sel, []string{"missing"}, false},     // no such column
		{"right", "bids", sel, nil, false},                     // no members
		{"left", "bids", sel, []string{"price"}, true},         // the left side unique
		{"left", "bids", sel, []string{"id"}, false},           // the right side then varies
		{"", "bids", sel, []string{"id"}, false},               // no unique side
		{"right", "sellers", sel, []string{"id"}, false},       // a join of one input with itself
		{"right", "bids", nil, []string{"sellers"}, false},     // no select: the joined record
	} {
		j, err := NewRegularJoin("j", configs.Join{Left: c.left, Right: "sellers", Unique: c.unique, Select: c.sel})
		if err != nil {
			t.Fatal(err)
		}
		if got := j.SameUnderKey(c.members); got != c.want {
			t.Errorf("unique %q, left %s, members %v: SameUnderKey %v, want %v", c.unique, c.left, c.members, got, c.want)
		}
	}
}

// TestPairFilterBeforeWhere: a join whose caller does not read whether the where held asks its
// result filter first and evaluates the where only for the pairs the filter keeps, taking the
// index of the side the select made for the filter (exprEnv.borrow); the rows it writes are
// those written with the where first, pair after pair. The bids are of one length and differ
// in their bytes (a reused buffer, the same length: an index of the last pair taken for this
// one would read the wrong members), some with a member the where cannot read (a number out of
// range: the VM's error, so no row), escapes, or the filter's member missing.
func TestPairFilterBeforeWhere(t *testing.T) {
	cfg := configs.Join{Left: "bids", Right: "sellers", Unique: "right", Where: "bids.time <= sellers.until && bids.time >= sellers.from",
		Select: []any{map[string]any{"id": "sellers.id"}, map[string]any{"price": "bids.price"}, map[string]any{"t": "bids.time"},
			map[string]any{"extra": "bids.extra"}, map[string]any{"name": "sellers.name"}}}
	first, err := NewRegularJoin("j", cfg)
	if err != nil {
		t.Fatal(err)
	}
	late, err := NewRegularJoin("j", cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	sellers := []string{`{"id":1,"name":"ann","from":20,"until":60}`, `{"id":2,"name":"b\"o","from":0,"until":99}`}
	best := map[string]int{} // the filter: drops a price at or below the best kept so far, per seller
	f := &bestFilter{best: best}
	g := &bestFilter{best: map[string]int{}}
	rows, dropped, failed := 0, 0, 0
	for i := range 5000 {
		seller := sellers[rng.IntN(len(sellers))]
		price := fmt.Sprintf("%02d", rng.IntN(100))
		extra := []string{`"ab"`, `"\n"`, `12`, `9e999999`}[rng.IntN(4)] // the last one the where's VM cannot decode
		b := fmt.Sprintf(`{"price":%s,"time":%02d,"extra":%s}`, price, rng.IntN(100), extra)
		if rng.IntN(10) == 0 {
			b = fmt.Sprintf(`{"prize":%s,"time":%02d,"extra":%s}`, price, rng.IntN(100), extra) // no price: the filter is not asked
		}
		f.seller, g.seller = seller, seller
		want, _, err := first.sel.pair(g, []byte("k"), "bids", []byte(b), "sellers", []byte(seller), false)
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.Clone(want)
		row, _, err := late.sel.pair(f, []byte("k"), "bids", []byte(b), "sellers", []byte(seller), true)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(row, want) {
			t.Fatalf("pair %d, %s with %s: row %s, want %s (where first)", i, b, seller, row, want)
		}
		switch {
		case row != nil:
			rows++
			f.keep(row)
			g.keep(want)
		case strings.Contains(b, "9e999999"):
			failed++
		default:
			dropped++
		}
	}
	if rows < 50 || dropped < 50 || failed < 50 {
		t.Fatalf("%d rows, %d dropped, %d undecodable: some case is not tested", rows, dropped, failed)
	}
}

// bestFilter drops a row whose price is not above the best price written for its seller.
type bestFilter struct {
	seller string
	best   map[string]int
}

func (f *bestFilter) FilterMember() string { return "price" }

func (f *bestFilter) DropsBeaten(raw []byte, _ int) bool {
	p, err := strconv.Atoi(string(raw))
	if err != nil {
		return false
	}
	b, ok := f.best[f.seller]
	return ok && p <= b
}

// keep records the price of a written row as its seller's best.
func (f *bestFilter) keep(row []byte) {
	var r Record
	r.Set([]byte("k"), 0, row)
	raw, ok, _ := r.top("price")
	if p, err := strconv.Atoi(string(raw)); ok && err == nil {
		f.best[f.seller] = max(f.best[f.seller], p)
	}
}

// TestJoinJudge: JoinJudge.Pair, given the decoded record of the other side and only the
// members of the unique record that the where and the filter's column read, drops exactly the
// pairs whose row pair (the fold's) does not write, for the same filter state: the where fails,
// or the filter drops the row.
func TestJoinJudge(t *testing.T) {
	cfg := configs.Join{Left: "bids", Right: "sellers", Unique: "right", Where: "bids.time <= sellers.until && bids.time >= sellers.from",
		Select: []any{map[string]any{"id": "sellers.id"}, map[string]any{"price": "bids.price"}, map[string]any{"t": "bids.time"},
			map[string]any{"extra": "bids.extra"}, map[string]any{"name": "sellers.name"}}}
	fold, err := NewRegularJoin("j", cfg)
	if err != nil {
		t.Fatal(err)
	}
	early, err := NewRegularJoin("j", cfg)
	if err != nil {
		t.Fatal(err)
	}
	jj := early.Judge("price", nil)
	if jj == nil || jj.UniqueSide() != sideRight {
		t.Fatal("no judge for a unique right side and a member column")
	}
	if early.Judge("name", nil) != nil && len(jj.keep) == 0 {
		t.Fatal("judge keeps nothing of the unique side")
	}
	src, err := NewSource("bids", configs.Source{Format: configs.FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	sellers := []string{`{"id":1,"name":"ann","from":20,"until":60,"more":"x"}`, `{"name":"b\"o","id":2,"from":0,"until":99}`, `{"id":3,"from":"no","until":99}`}
	f := &bestFilter{best: map[string]int{}}
	var rec Record
	var kept []byte
	// The oracle: each seller's interval (the third's "from" is no number: its where fails),
	// and the best price of the rows written for it so far.
	from, until := []int{20, 0, -1}, []int{60, 99, -1}
	best := map[int]int{}
	drops, keeps := 0, 0
	for i := range 5000 {
		si := rng.IntN(len(sellers))
		seller := sellers[si]
		p := rng.IntN(100)
		price := strconv.Itoa(p)
		xi := rng.IntN(4)
		extra := []string{`"ab"`, `"\n"`, `12`, `9e999999`}[xi] // the last one the where's VM cannot decode
		tm := rng.IntN(100)
		b := fmt.Sprintf(`{"price":1,"url":"u","time":%d,"extra":%s,"price":%s}`, tm, extra, price) // the later price wins
		hasPrice := rng.IntN(10) != 0
		if !hasPrice {
			b = fmt.Sprintf(`{"prize":%s,"time":%d,"extra":%s}`, price, tm, extra)
		}
		bp, seen := best[si]
		wantDrop := hasPrice && seen && p <= bp || xi == 3 || si == 2 || tm < from[si] || tm > until[si]
		f.seller = seller
		row, _, err := fold.sel.pair(f, []byte("k"), "bids", []byte(b), "sellers", []byte(seller), true)
		if err != nil {
			t.Fatal(err)
		}
		row = bytes.Clone(row)
		if err := src.Decode([]byte("k"), []byte(b), 0, &rec); err != nil {
			t.Fatal(err)
		}
		in, err := early.Project(sideLeft, &rec, nil)
		if err != nil {
			t.Fatal(err)
		}
		kept = jj.Keep(kept[:0], []byte(seller))
		drop, judged := jj.Pair(f, []byte("k"), in, &rec, kept, len(seller))
		if !judged {
			t.Fatalf("pair %d not judged", i)
		}
		if drop != (row == nil) {
			t.Fatalf("pair %d, %s with %s: drop %v, the fold writes %s", i, b, seller, drop, row)
		}
		if drop != wantDrop {
			t.Fatalf("pair %d, %s with %s: drop %v, want %v", i, b, seller, drop, wantDrop)
		}
		if row != nil {
			if hasPrice {
				best[si] = max(best[si], p)
			}
			f.keep(row)
			keeps++
		} else {
			drops++
		}
	}
	if drops < 100 || keeps < 100 {
		t.Fatalf("%d dropped, %d kept: a case is not tested", drops, keeps)
	}
}
