package operators

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

// hotPath is the per-record work of the orders pipeline: Decode then Project.
type hotPath struct {
	src   *Source
	agg   *Aggregate
	r     Record
	key   []byte
	value []byte
	in    []byte
}

func newHotPath(t testing.TB) *hotPath {
	return &hotPath{
		src:   mustSource(t, configs.Source{Topic: "orders", Format: "json", Key: "customer_id", Timestamp: "ts"}),
		agg:   mustAggregate(t, ordersAgg()),
		key:   []byte("c-0000042"),
		value: []byte(ordersValue),
		in:    make([]byte, 0, 64),
	}
}

func (h *hotPath) run(t testing.TB) {
	if err := h.src.Decode(h.key, h.value, 0, &h.r); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.in, err = h.agg.Project(&h.r, h.in[:0]); err != nil {
		t.Fatal(err)
	}
}

// TestHotPathAllocs pins the allocation budget: Decode, Project, Fold and Render allocate
// nothing.
func TestHotPathAllocs(t *testing.T) {
	h := newHotPath(t)
	if n := testing.AllocsPerRun(100, func() { h.run(t) }); n != 0 {
		t.Errorf("Decode+Project: %v allocs/op, want 0", n)
	}
	state := make([]byte, h.agg.StateSize())
	h.agg.InitState(state)
	if n := testing.AllocsPerRun(100, func() { h.agg.Fold(state, h.in) }); n != 0 {
		t.Errorf("Fold: %v allocs/op, want 0", n)
	}
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { dst = h.agg.Render(h.key, state, dst[:0]) }); n != 0 {
		t.Errorf("Render: %v allocs/op, want 0", n)
	}
}

func BenchmarkDecodeProject(b *testing.B) {
	h := newHotPath(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(h.value)))
	for b.Loop() {
		h.run(b)
	}
}

func BenchmarkDecode(b *testing.B) {
	h := newHotPath(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(h.value)))
	for b.Loop() {
		if err := h.src.Decode(h.key, h.value, 0, &h.r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFold(b *testing.B) {
	h := newHotPath(b)
	h.run(b)
	state := make([]byte, h.agg.StateSize())
	h.agg.InitState(state)
	b.ReportAllocs()
	for b.Loop() {
		h.agg.Fold(state, h.in)
	}
}

func BenchmarkRender(b *testing.B) {
	h := newHotPath(b)
	h.run(b)
	state := make([]byte, h.agg.StateSize())
	h.agg.InitState(state)
	for range 3 {
		h.agg.Fold(state, h.in)
	}
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = h.agg.Render(h.key, state, dst[:0])
	}
}

func BenchmarkFilter(b *testing.B) {
	h := newHotPath(b)
	f, err := NewFilter("big", configs.Filter{Input: "orders", Expr: "amount > 100"})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.src.Decode(h.key, h.value, 0, &h.r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if keep, err := f.Apply(&h.r); err != nil || !keep {
			b.Fatal(keep, err)
		}
	}
}

func BenchmarkMap(b *testing.B) {
	h := newHotPath(b)
	m, err := NewMap("eur", configs.Map{Input: "orders", Set: map[string]string{"amount_eur": "amount * 0.9"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := h.src.Decode(h.key, h.value, 0, &h.r); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Apply(&h.r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPairSelect is a join's select over a Nexmark q9 pair: fifteen member paths of a bid
// (about 100 bytes, as the generator sizes them) and its auction (about 500), as the regular
// join emits it.
func BenchmarkPairSelect(b *testing.B) {
	var cols []configs.Column
	for _, f := range []string{"id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category", "extra"} {
		cols = append(cols, configs.Column{Name: f, Expr: "auction." + f})
	}
	for _, f := range []string{"auction", "bidder", "price", "dateTime", "extra"} {
		cols = append(cols, configs.Column{Name: "bid_" + f, Expr: "bid." + f})
	}
	sel, err := NewPairSelect("q9-join", cols, "")
	if err != nil {
		b.Fatal(err)
	}
	auction := `{"id":1042,"itemName":"wkx mgee","description":"eaxrt lqwhi onr cfmub ijc qksv","initialBid":1876,` +
		`"reserve":2342,"dateTime":1436918400123,"expires":1436918410123,"seller":1027,"category":12,"extra":"` +
		strings.Repeat("nrfkr qzrd ", 33) + `"}`
	bid := `{"auction":1042,"bidder":1009,"price":5521,"channel":"Google","url":"https://www.nexmark.com/vkg/abc/item.htm?query=1",` +
		`"dateTime":1436918401123,"extra":"zzqk"}`
	bidB, auctionB := []byte(bid), []byte(auction)
	b.SetBytes(int64(len(bid) + len(auction)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sel.pair(nil, bidB[11:15], "bid", bidB, "auction", auctionB, false); err != nil {
			b.Fatal(err)
		}
	}
}

// nexmarkBids are bids as the Nexmark generator writes them (integration/nexmark): a long url,
// an extra with escapes.
var nexmarkBids = []string{
	`{"auction":1004,"bidder":2001,"price":282436,"channel":"Baidu","url":"https://www.nexmark.com/tlj/ieo/jwj/item.htm?query=1","dateTime":1436918400001,"extra":"bXVVNONMaTMJPtmnttfI` + "`" + `VW\\anaofmk_OZaV` + "`" + `qedvoxYOZX]V_Ua^TZ"}`,
	`{"auction":1004,"bidder":2004,"price":5982627,"channel":"Apple","url":"https://www.nexmark.com/iui/cxl/rh__/item.htm?query=1","dateTime":1436918400002,"extra":"T\\ZSW__\\\\M\\HwhvdneRNR^PVxctljfNTWH]abnxsohcezwsr]QI` + "`" + `a]XP` + "`" + `S^\\[H[TYIgmwrp"}`,
	`{"auction":1009,"bidder":2010,"price":21831,"channel":"channel-648","url":"https://www.nexmark.com/wnon/btxq/ppl/item.htm?query=1&channel_id=289406976","dateTime":1436918400002,"extra":"htjwnv]PTL_XZ\\aWORyrslqqdzaimh` + "`" + `JZHaO[^ZHN` + "`" + `]H[TSJRYIQJKSQZZHNdfvwpbiqkdjndy"}`,
	`{"auction":1004,"bidder":2001,"price":10937,"channel":"channel-2902","url":"https://www.nexmark.com/orp/bjzd/rfzo/item.htm?query=1&channel_id=1792016384","dateTime":1436918400005,"extra":"rueoonyhkmrmnpxHOPUVMiiufeyxewxyyxjyggzbsglcnM[_XV^hun"}`,
}

// BenchmarkDecodeBid is a Nexmark source's decode of a bid: the whole value validated and
// indexed, the key field checked against the Kafka key, the timestamp field read.
func BenchmarkDecodeBid(b *testing.B) {
	src := mustSource(b, configs.Source{Topic: "nexmark-bid", Format: "json", Key: "auction", KeyFormat: "string", Timestamp: "dateTime"})
	keys := [][]byte{[]byte("1004"), []byte("1004"), []byte("1009"), []byte("1004")}
	vals := make([][]byte, len(nexmarkBids))
	n := 0
	for i, s := range nexmarkBids {
		vals[i] = []byte(s)
		n += len(s)
	}
	var r Record
	b.ReportAllocs()
	b.SetBytes(int64(n / len(vals)))
	i := 0
	for b.Loop() {
		if err := src.Decode(keys[i], vals[i], 0, &r); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(vals) {
			i = 0
		}
	}
}

// BenchmarkSelectFinal is Nexmark q5's map over a window's count (its key an auction id): the
// auction as an int of the key, and three members copied; the counts' task asks it of every
// final it filters for the top after it.
func BenchmarkSelectFinal(b *testing.B) {
	m, err := NewMap("counted", configs.Map{Input: "counts", Select: []any{map[string]any{"auction": "int(key)"}, "num", "window_start", "window_end"}})
	if err != nil {
		b.Fatal(err)
	}
	val := []byte(`{"num":17,"window_start":1436918400000,"window_end":1436918410000}`)
	var r Record
	b.ReportAllocs()
	for b.Loop() {
		r.Set([]byte("1004"), 0, val)
		if _, err := m.Apply(&r); err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

// BenchmarkKeepMembers is a join's projection of a bid to the members its select and where
// read (Nexmark q4: price and dateTime), as RegularJoin.Project writes it into the sorter.
func BenchmarkKeepMembers(b *testing.B) {
	src := mustSource(b, configs.Source{Topic: "nexmark-bid", Format: "json", Key: "auction", KeyFormat: "string", Timestamp: "dateTime"})
	var r Record
	if err := src.Decode([]byte("1004"), []byte(nexmarkBids[0]), 0, &r); err != nil {
		b.Fatal(err)
	}
	idx, err := r.index()
	if err != nil {
		b.Fatal(err)
	}
	keep := []string{"price", "dateTime"}
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = appendMembers(dst[:0], r.Value, idx, keep)
	}
}
