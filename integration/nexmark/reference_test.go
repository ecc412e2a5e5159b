package nexmark

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The references: each query's answer computed from the generated bids in plain Go, following
// Flink's nexmark SQL (nexmark-flink/src/main/resources/queries/qN.sql), never with sluice's
// code. An answer is a multiset of rows; a row is an identity (what names one answer row: a
// bid, a session) and a value (what the query computes for it). Rows are strings so that
// output and reference compare exactly.

// row is one answer row.
type row struct{ id, val string }

// query is one Nexmark query: how to compute its answer from the bids, and how to read one
// output record of sluice's pipeline as a row.
type query struct {
	name      string
	reference func(ev events) []row
	read      func(r *kgo.Record) (row, error)
	// upsert: the output is an upsert stream (the latest value per Kafka key is the row, a null
	// value deletes it); else each record is a row.
	upsert bool
	// settled, for an unbounded run, keeps the rows the run must have written by the time it
	// has caught up (windows its watermarks closed), of both the reference and the output; nil:
	// all of them.
	settled func(ev events, want []row, out []*kgo.Record) ([]row, []*kgo.Record)
	// check, for a query no reference can compute (processing time), checks the invariants of
	// its output instead (reference is nil); bounded says whether every window has closed.
	check func(bids []Bid, out []*kgo.Record, bounded bool) error
	// kills: the query also runs unbounded with kill -9 and restarts (modes: auto-kill9).
	kills bool
	// internal: the internal topics (suffixes after the group) the pipeline's later chains
	// read, whose committed offsets say an unbounded run has caught up.
	internal []string
}

var queries = []query{
	{name: "q3", reference: refQ3, read: readQ3, internal: []string{"-by_seller-repartition"}},
	{name: "q0", reference: bidsOnly(refQ0), read: readQ0},
	{name: "q1", reference: bidsOnly(refQ1), read: readQ1},
	{name: "q2", reference: bidsOnly(refQ2), read: readQ2},
	{name: "q4", reference: refQ4, read: readQ4, upsert: true, kills: true, internal: []string{"-q4-join-output", "-q4-max-repartition", "-q4-max-output",
		"-q4-changes-output", "-q4-repartition"}},
	{name: "q5", reference: bidsOnly(refQ5), read: readQ5, settled: settledQ5, kills: true, internal: []string{"-counts-output", "-hottest-repartition"}},
	{name: "q7", reference: bidsOnly(refQ7), read: readQ7, settled: settledQ7, kills: true, internal: []string{"-windowed-repartition"}},
	{name: "q8", reference: refQ8, read: readQ8, settled: settledQ8, internal: []string{"-person_windows-repartition", "-person_windows-output", "-p-repartition", "-seller_windows-repartition", "-seller_windows-output", "-a-repartition"}},
	{name: "q9", reference: refQ9, read: readQ9, upsert: true, kills: true, internal: []string{"-q9-join-output"}},
	{name: "q11", reference: bidsOnly(refQ11), read: readQ11, kills: true, internal: []string{"-q11-repartition"}},
	{name: "q12", read: readQ12, check: checkQ12, internal: []string{"-q12-repartition"}},
	{name: "q13", reference: bidsOnly(refQ13), read: readQ13, internal: []string{"-by_side_key-repartition"}},
	{name: "q14", reference: bidsOnly(refQ14), read: readQ14},
	{name: "q20", reference: refQ20, read: readQ20, kills: true},
	{name: "q21", reference: bidsOnly(refQ21), read: readQ21},
	{name: "q22", reference: bidsOnly(refQ22), read: readQ22},
	{name: "q23", reference: refQ23, read: readQ23, kills: true, internal: []string{"-by_seller-repartition", "-sellers-output",
		"-by_bidder-repartition"}},
	{name: "q17", reference: bidsOnly(refQ17), read: readQ17, upsert: true, internal: []string{}},
	{name: "q18", reference: bidsOnly(refQ18), read: readQ18, upsert: true, kills: true},
	{name: "q19", reference: bidsOnly(refQ19), read: readQ19, upsert: true, kills: true},
	{name: "q15", reference: bidsOnly(refQ15), read: readQ15, upsert: true, kills: true, internal: []string{"-q15-by-repartition", "-q15-distinct-bidder-repartition",
		"-q15-distinct-bidder-output", "-q15-distinct-bidder-by-repartition", "-q15-distinct-auction-output", "-q15-distinct-auction-by-repartition"}},
	{name: "q16", reference: bidsOnly(refQ16), read: readQ16, upsert: true, kills: true, internal: []string{"-q16-by-repartition", "-q16-distinct-bidder-repartition", "-q16-distinct-bidder-output", "-q16-distinct-bidder-by-repartition", "-q16-distinct-auction-output", "-q16-distinct-auction-by-repartition"}},
}

// events are the generated events a reference computes from.
type events struct {
	bids     []Bid
	auctions []Auction
	persons  []Person
}

// bidsOnly is a reference that reads the bids alone.
func bidsOnly(ref func([]Bid) []row) func(events) []row {
	return func(ev events) []row { return ref(ev.bids) }
}

// bidID names a bid: its auction, bidder, time and extra (the extra alone, a random substring of
// a 1 MiB string, all but names it).
func bidID(auction, bidder, dateTime int64, extra string) string {
	return fmt.Sprintf("auction=%d bidder=%d dateTime=%d extra=%q", auction, bidder, dateTime, extra)
}

// q0, pass-through: SELECT auction, bidder, price, dateTime, extra FROM bid. Every bid once;
// sluice passes channel and url through too, so they are compared as well.
func refQ0(bids []Bid) []row {
	out := make([]row, len(bids))
	for i, b := range bids {
		out[i] = row{bidID(b.Auction, b.Bidder, b.DateTime, b.Extra), fmt.Sprintf("price=%d channel=%q url=%q", b.Price, b.Channel, b.URL)}
	}
	return out
}

// outBid is a bid as a pipeline writes it; price is kept as its JSON text.
type outBid struct {
	Auction  *int64      `json:"auction"`
	Bidder   *int64      `json:"bidder"`
	Price    json.Number `json:"price"`
	Channel  string      `json:"channel"`
	URL      string      `json:"url"`
	DateTime *int64      `json:"dateTime"`
	Extra    string      `json:"extra"`
}

func decodeBid(r *kgo.Record) (outBid, error) {
	var b outBid
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(&b); err != nil {
		return b, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if b.Auction == nil || b.Bidder == nil || b.DateTime == nil || b.Price == "" {
		return b, fmt.Errorf("value %q lacks auction, bidder, price or dateTime", r.Value)
	}
	if want := strconv.FormatInt(*b.Auction, 10); string(r.Key) != want {
		return b, fmt.Errorf("record key %q, want the auction %s", r.Key, want)
	}
	return b, nil
}

func readQ0(r *kgo.Record) (row, error) {
	b, err := decodeBid(r)
	if err != nil {
		return row{}, err
	}
	return row{bidID(*b.Auction, *b.Bidder, *b.DateTime, b.Extra), fmt.Sprintf("price=%s channel=%q url=%q", b.Price, b.Channel, b.URL)}, nil
}

// q1, currency conversion: 0.908 * price, exact (Flink's DECIMAL(23, 3)):
// 0.908 × 468715 = 425593.22.
func refQ1(bids []Bid) []row {
	out := make([]row, len(bids))
	for i, b := range bids {
		euros := new(big.Rat).SetFrac64(b.Price*908, 1000)
		out[i] = row{bidID(b.Auction, b.Bidder, b.DateTime, b.Extra), "price=" + exactDecimal(euros)}
	}
	return out
}

func readQ1(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "dateTime", "extra"); err != nil {
		return row{}, err
	}
	b, err := decodeBid(r)
	if err != nil {
		return row{}, err
	}
	v, ok := new(big.Rat).SetString(string(b.Price))
	if !ok {
		return row{}, fmt.Errorf("price %s is not a number", b.Price)
	}
	return row{bidID(*b.Auction, *b.Bidder, *b.DateTime, b.Extra), "price=" + exactDecimal(v)}, nil
}

// exactDecimal writes v exactly: as a decimal if it has one (as short as it can be), else as a
// fraction. A float's artefacts (425593.22000000003) stay visible.
func exactDecimal(v *big.Rat) string {
	ten := big.NewInt(10)
	scaled := new(big.Rat).Set(v)
	for k := 0; k <= 40; k++ {
		if scaled.IsInt() {
			return v.FloatString(k)
		}
		scaled.Mul(scaled, new(big.Rat).SetInt(ten))
	}
	return v.RatString()
}

// q2, selection: SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0.
func refQ2(bids []Bid) []row {
	var out []row
	for _, b := range bids {
		if b.Auction%123 == 0 {
			out = append(out, row{fmt.Sprintf("auction=%d price=%d", b.Auction, b.Price), ""})
		}
	}
	return out
}

func readQ2(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "price"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction *int64 `json:"auction"`
		Price   *int64 `json:"price"`
	}
	if err := decodeKeyed(r, &v, func() *int64 { return v.Auction }); err != nil {
		return row{}, err
	}
	if v.Price == nil {
		return row{}, fmt.Errorf("value %q: price is null", r.Value)
	}
	return row{fmt.Sprintf("auction=%d price=%d", *v.Auction, *v.Price), ""}, nil
}

// checkColumns checks that r's value is a JSON object of exactly the columns want, in order.
func checkColumns(r *kgo.Record, want ...string) error {
	d := json.NewDecoder(bytes.NewReader(r.Value))
	var got []string
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("value %q is not a JSON object", r.Value)
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return fmt.Errorf("value %q: %w", r.Value, err)
		}
		got = append(got, tok.(string))
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return fmt.Errorf("value %q: %w", r.Value, err)
		}
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("value %q has columns %v, want %v", r.Value, got, want)
	}
	return nil
}

// decodeKeyed decodes r's value into v (numbers as json.Number where v asks) and checks that
// the record key is the auction that auction returns after decoding.
func decodeKeyed(r *kgo.Record, v any, auction func() *int64) error {
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("value %q: %w", r.Value, err)
	}
	a := auction()
	if a == nil {
		return fmt.Errorf("value %q lacks auction", r.Value)
	}
	if want := strconv.FormatInt(*a, 10); string(r.Key) != want {
		return fmt.Errorf("record key %q, want the auction %s", r.Key, want)
	}
	return nil
}

// nullable writes a string column: quoted, or null.
func nullable(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}

// q14, calculation: SELECT auction, bidder, 0.908 * price AS price, CASE WHEN HOUR(dateTime) >= 8
// AND HOUR(dateTime) <= 18 THEN 'dayTime' WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN
// 'nightTime' ELSE 'otherTime' END AS bidTimeType, dateTime, extra, count_char(extra, 'c') AS
// c_counts FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000. In integers:
// 10^9 < 908 * price < 5 * 10^10; HOUR in UTC; count_char counts the bytes 'c' (Nexmark's UDF).
func refQ14(bids []Bid) []row {
	var out []row
	for _, b := range bids {
		if p := b.Price * 908; p <= 1_000_000_000 || p >= 50_000_000_000 {
			continue
		}
		h := time.UnixMilli(b.DateTime).UTC().Hour()
		kind := "otherTime"
		switch {
		case h >= 8 && h <= 18:
			kind = "dayTime"
		case h <= 6 || h >= 20:
			kind = "nightTime"
		}
		euros := new(big.Rat).SetFrac64(b.Price*908, 1000)
		out = append(out, row{bidID(b.Auction, b.Bidder, b.DateTime, b.Extra),
			fmt.Sprintf("price=%s bidTimeType=%s c_counts=%d", exactDecimal(euros), kind, strings.Count(b.Extra, "c"))})
	}
	return out
}

func readQ14(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction     *int64      `json:"auction"`
		Bidder      *int64      `json:"bidder"`
		Price       json.Number `json:"price"`
		BidTimeType *string     `json:"bidTimeType"`
		DateTime    *int64      `json:"dateTime"`
		Extra       *string     `json:"extra"`
		CCounts     *int64      `json:"c_counts"`
	}
	if err := decodeKeyed(r, &v, func() *int64 { return v.Auction }); err != nil {
		return row{}, err
	}
	if v.Bidder == nil || v.BidTimeType == nil || v.DateTime == nil || v.Extra == nil || v.CCounts == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	price, ok := new(big.Rat).SetString(string(v.Price))
	if !ok {
		return row{}, fmt.Errorf("price %q is not a number", v.Price)
	}
	return row{bidID(*v.Auction, *v.Bidder, *v.DateTime, *v.Extra),
		fmt.Sprintf("price=%s bidTimeType=%s c_counts=%d", exactDecimal(price), *v.BidTimeType, *v.CCounts)}, nil
}

// q21, add channel id: SELECT auction, bidder, price, channel, CASE WHEN lower(channel) =
// 'apple' THEN '0' WHEN ... 'google' THEN '1' ... 'facebook' THEN '2' ... 'baidu' THEN '3' ELSE
// REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id FROM bid WHERE
// REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL OR lower(channel) IN ('apple',
// 'google', 'facebook', 'baidu'). The generator's hot channels (Google, Facebook, Baidu, Apple)
// have URLs without channel_id; 9 in 10 of its other 10,000 channels append &channel_id=N. A
// row is all its columns: the output has no other identity.
func refQ21(bids []Bid) []row {
	hot := map[string]string{"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
	var out []row
	for _, b := range bids {
		id, ok := hot[strings.ToLower(b.Channel)]
		if !ok {
			id, ok = urlChannelID(b.URL)
		}
		if ok {
			out = append(out, row{fmt.Sprintf("auction=%d bidder=%d price=%d channel=%q channel_id=%q", b.Auction, b.Bidder, b.Price, b.Channel, id), ""})
		}
	}
	return out
}

// urlChannelID is the value of the first channel_id parameter of url, at its start or after a
// '&', up to the next '&'.
func urlChannelID(url string) (string, bool) {
	for i := 0; i <= len(url); i++ {
		if (i == 0 || url[i-1] == '&') && strings.HasPrefix(url[i:], "channel_id=") {
			v := url[i+len("channel_id="):]
			if j := strings.IndexByte(v, '&'); j >= 0 {
				v = v[:j]
			}
			return v, true
		}
	}
	return "", false
}

func readQ21(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "channel", "channel_id"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction   *int64  `json:"auction"`
		Bidder    *int64  `json:"bidder"`
		Price     *int64  `json:"price"`
		Channel   *string `json:"channel"`
		ChannelID *string `json:"channel_id"`
	}
	if err := decodeKeyed(r, &v, func() *int64 { return v.Auction }); err != nil {
		return row{}, err
	}
	if v.Bidder == nil || v.Price == nil || v.Channel == nil || v.ChannelID == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	return row{fmt.Sprintf("auction=%d bidder=%d price=%d channel=%q channel_id=%q", *v.Auction, *v.Bidder, *v.Price, *v.Channel, *v.ChannelID), ""}, nil
}

// q22, get URL directories: SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS
// dir1, SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid. SPLIT_INDEX
// counts from 0 the parts between separators, empty ones included, and is null past the last
// (and for an empty string). Every bid; a row is all its columns.
func refQ22(bids []Bid) []row {
	out := make([]row, len(bids))
	for i, b := range bids {
		var parts []string
		if b.URL != "" {
			parts = strings.Split(b.URL, "/")
		}
		dir := func(k int) string {
			if k < len(parts) {
				return nullable(&parts[k])
			}
			return "null"
		}
		out[i] = row{fmt.Sprintf("auction=%d bidder=%d price=%d channel=%q dir1=%s dir2=%s dir3=%s", b.Auction, b.Bidder, b.Price, b.Channel, dir(3), dir(4), dir(5)), ""}
	}
	return out
}

func readQ22(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction          *int64  `json:"auction"`
		Bidder           *int64  `json:"bidder"`
		Price            *int64  `json:"price"`
		Channel          *string `json:"channel"`
		Dir1, Dir2, Dir3 *string
	}
	if err := decodeKeyed(r, &v, func() *int64 { return v.Auction }); err != nil {
		return row{}, err
	}
	if v.Bidder == nil || v.Price == nil || v.Channel == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	return row{fmt.Sprintf("auction=%d bidder=%d price=%d channel=%q dir1=%s dir2=%s dir3=%s", *v.Auction, *v.Bidder, *v.Price, *v.Channel, nullable(v.Dir1), nullable(v.Dir2), nullable(v.Dir3)), ""}, nil
}

// sessionGap is q11's SESSION(dateTime, INTERVAL '10' SECOND).
const sessionGap = 10_000

// session is one bidder's session of bids: [start, end) and its count.
type session struct{ bidder, start, end, count int64 }

// sessions computes q11's sessions: per bidder, the bids sorted by time, a session of
// consecutive bids each less than gap after the one before (merge(prev, next) says whether a
// bid joins the session), spanning [first, last + gap).
//
// sluice's sessions (operators/session.go, README "Session windows") merge records closer than
// the gap (next - last < gap) and end at last + gap: merge = next - last < gap. Flink's session
// windows merge windows [t, t + gap) that intersect, touching ones included (TimeWindow's
// intersects: start <= other.end && end >= other.start), so bids exactly gap apart are one
// session there: merge = next - last <= gap. The reference uses sluice's definition;
// TestNexmark reports how many sessions Flink's would make differ.
func sessions(bids []Bid, merge func(last, next int64) bool) []session {
	times := map[int64][]int64{}
	for _, b := range bids {
		times[b.Bidder] = append(times[b.Bidder], b.DateTime)
	}
	var out []session
	for bidder, ts := range times {
		slices.Sort(ts)
		s := session{bidder: bidder, start: ts[0], end: ts[0] + sessionGap, count: 1}
		for _, t := range ts[1:] {
			if merge(s.end-sessionGap, t) {
				s.end = t + sessionGap
				s.count++
				continue
			}
			out = append(out, s)
			s = session{bidder: bidder, start: t, end: t + sessionGap, count: 1}
		}
		out = append(out, s)
	}
	return out
}

func sluiceMerge(last, next int64) bool { return next-last < sessionGap }
func flinkMerge(last, next int64) bool  { return next-last <= sessionGap }

// q11, user sessions: SELECT bidder, count(*), SESSION_START, SESSION_END FROM bid GROUP BY
// bidder, SESSION(dateTime, INTERVAL '10' SECOND). sluice's output: key (the bidder), bid_count,
// window_start, window_end.
func refQ11(bids []Bid) []row {
	ss := sessions(bids, sluiceMerge)
	out := make([]row, len(ss))
	for i, s := range ss {
		out[i] = row{fmt.Sprintf("bidder=%d start=%d", s.bidder, s.start), fmt.Sprintf("bid_count=%d end=%d", s.count, s.end)}
	}
	return out
}

func readQ11(r *kgo.Record) (row, error) {
	var v struct {
		Key         *string `json:"key"`
		BidCount    *int64  `json:"bid_count"`
		WindowStart *int64  `json:"window_start"`
		WindowEnd   *int64  `json:"window_end"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if v.Key == nil || v.BidCount == nil || v.WindowStart == nil || v.WindowEnd == nil {
		return row{}, fmt.Errorf("value %q lacks key, bid_count, window_start or window_end", r.Value)
	}
	if string(r.Key) != *v.Key {
		return row{}, fmt.Errorf("record key %q, value's key %q", r.Key, *v.Key)
	}
	return row{fmt.Sprintf("bidder=%s start=%d", *v.Key, *v.WindowStart), fmt.Sprintf("bid_count=%d end=%d", *v.BidCount, *v.WindowEnd)}, nil
}

// diff is how an output compares with its reference, as multisets of rows.
type diff struct {
	want, got   int // rows
	exact       int // rows of the reference found once each
	different   int // rows whose identity was found with another value
	missing     int // rows of the reference not in the output
	extra       int // rows whose identity the reference does not have
	duplicated  int // rows of the reference found more often than it has them
	unreadable  int // output records that do not read as rows
	examples    []string
	perKind     map[string]int // examples so far, by their first word
	maxExamples int            // per kind
}

func (d *diff) example(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	kind, _, _ := strings.Cut(s, ":")
	if d.perKind[kind] < d.maxExamples {
		d.perKind[kind]++
		d.examples = append(d.examples, s)
	}
}

// ok reports whether the output is the reference exactly, each row exactly once.
func (d *diff) ok() bool {
	return d.different == 0 && d.missing == 0 && d.extra == 0 && d.duplicated == 0 && d.unreadable == 0 && d.exact == d.want && d.got == d.want
}

func (d *diff) String() string {
	s := fmt.Sprintf("%d rows expected, %d read: %d exactly once, %d different, %d missing, %d extra, %d duplicated",
		d.want, d.got, d.exact, d.different, d.missing, d.extra, d.duplicated)
	if d.unreadable > 0 {
		s += fmt.Sprintf(", %d unreadable", d.unreadable)
	}
	if len(d.examples) > 0 {
		s += "; e.g.\n    " + strings.Join(d.examples, "\n    ")
	}
	return s
}

// compare compares the output records with the reference rows.
func compare(q query, want []row, out []*kgo.Record) *diff {
	d := &diff{want: len(want), got: len(out), maxExamples: 2, perKind: map[string]int{}}
	type vals map[string]int
	exp, act := map[string]vals{}, map[string]vals{}
	add := func(m map[string]vals, r row) {
		if m[r.id] == nil {
			m[r.id] = vals{}
		}
		m[r.id][r.val]++
	}
	for _, r := range want {
		add(exp, r)
	}
	for _, rec := range out {
		r, err := q.read(rec)
		if err != nil {
			d.unreadable++
			d.example("unreadable: partition %d offset %d: %v", rec.Partition, rec.Offset, err)
			continue
		}
		add(act, r)
	}
	ids := make([]string, 0, len(exp)+len(act))
	for id := range exp {
		ids = append(ids, id)
	}
	for id := range act {
		if exp[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // deterministic examples
	for _, id := range ids {
		e, a := exp[id], act[id]
		var remE, remA []string // values left after matching equal ones
		for v, n := range e {
			m := min(n, a[v])
			d.exact += m
			for range n - m {
				remE = append(remE, v)
			}
		}
		for v, n := range a {
			for range n - min(n, e[v]) {
				remA = append(remA, v)
			}
		}
		slices.Sort(remE)
		slices.Sort(remA)
		if e == nil {
			d.extra += len(remA)
			d.example("extra: %s %s", id, remA[0])
			continue
		}
		pairs := min(len(remE), len(remA))
		for i := range pairs {
			d.different++
			d.example("different: %s: want %s, got %s", id, remE[i], remA[i])
		}
		for _, v := range remE[pairs:] {
			d.missing++
			d.example("missing: %s %s", id, v)
		}
		for _, v := range remA[pairs:] {
			if e[v] > 0 {
				d.duplicated++
				d.example("duplicated: %s %s (%d times, want %d)", id, v, a[v], e[v])
			} else {
				d.extra++
				d.example("extra: %s %s", id, v)
			}
		}
	}
	return d
}

// q18, the last bid of each bidder on each auction (ROW_NUMBER() OVER (PARTITION BY bidder,
// auction ORDER BY dateTime DESC) = 1): the bid that comes last in the bid topic for the pair.
// The generator's bids of one pair are in time order there (one auction's bids are one
// partition's), so this is also the latest by dateTime, ties going to the later bid.
func refQ18(bids []Bid) []row {
	type pair struct{ bidder, auction int64 }
	last := map[pair]Bid{}
	for _, b := range bids {
		last[pair{b.Bidder, b.Auction}] = b
	}
	out := make([]row, 0, len(last))
	for p, b := range last {
		out = append(out, row{fmt.Sprintf("bidder=%d auction=%d", p.bidder, p.auction),
			fmt.Sprintf("price=%d channel=%q url=%q dateTime=%d extra=%q", b.Price, b.Channel, b.URL, b.DateTime, b.Extra)})
	}
	return out
}

// readQ18 reads one row of q18's upsert stream: a bid under the key {"bidder":..,"auction":..}.
func readQ18(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "channel", "url", "dateTime", "extra"); err != nil {
		return row{}, err
	}
	var b outBid
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(&b); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if b.Auction == nil || b.Bidder == nil || b.DateTime == nil || b.Price == "" {
		return row{}, fmt.Errorf("value %q lacks auction, bidder, price or dateTime", r.Value)
	}
	if want := fmt.Sprintf(`{"bidder":%d,"auction":%d}`, *b.Bidder, *b.Auction); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("bidder=%d auction=%d", *b.Bidder, *b.Auction),
		fmt.Sprintf("price=%s channel=%q url=%q dateTime=%d extra=%q", b.Price, b.Channel, b.URL, *b.DateTime, b.Extra)}, nil
}

// latestPerKey reduces an upsert stream to its rows: each Kafka key's latest value (records of
// one key are in one partition, read in offset order), without the keys whose latest is a
// tombstone.
func latestPerKey(out []*kgo.Record) []*kgo.Record {
	last := map[string]*kgo.Record{}
	var keys []string
	for _, r := range out {
		if _, ok := last[string(r.Key)]; !ok {
			keys = append(keys, string(r.Key))
		}
		last[string(r.Key)] = r
	}
	rows := make([]*kgo.Record, 0, len(keys))
	for _, k := range keys {
		if r := last[k]; r.Value != nil {
			rows = append(rows, r)
		}
	}
	return rows
}

// q17, auction statistics per day: per (auction, UTC day of dateTime) the bids, those under
// 10,000, from 10,000 to under 1,000,000 and from 1,000,000, the min, max, sum and average price
// (exact, rounded half to even to 9 decimal places, as sluice's avg).
func refQ17(bids []Bid) []row {
	type group struct {
		auction int64
		day     string
	}
	type stats struct{ n, r1, r2, r3, lo, hi, sum int64 }
	by := map[group]*stats{}
	for _, b := range bids {
		g := group{b.Auction, time.UnixMilli(b.DateTime).UTC().Format("2006-01-02")}
		st := by[g]
		if st == nil {
			st = &stats{lo: b.Price, hi: b.Price}
			by[g] = st
		}
		st.n++
		switch {
		case b.Price < 10_000:
			st.r1++
		case b.Price < 1_000_000:
			st.r2++
		default:
			st.r3++
		}
		st.lo, st.hi, st.sum = min(st.lo, b.Price), max(st.hi, b.Price), st.sum+b.Price
	}
	out := make([]row, 0, len(by))
	for g, st := range by {
		out = append(out, row{fmt.Sprintf("auction=%d day=%s", g.auction, g.day),
			fmt.Sprintf("total=%d rank1=%d rank2=%d rank3=%d min=%d max=%d avg=%s sum=%d",
				st.n, st.r1, st.r2, st.r3, st.lo, st.hi, roundedAvg(st.sum, st.n), st.sum)})
	}
	return out
}

// roundedAvg is sum/n rounded half to even to 9 decimal places, without trailing zeros.
func roundedAvg(sum, n int64) string {
	scaled := new(big.Int).Mul(big.NewInt(sum), big.NewInt(1_000_000_000))
	q, r := new(big.Int).QuoRem(scaled, big.NewInt(n), new(big.Int))
	twice := new(big.Int).Mul(r.Abs(r), big.NewInt(2))
	if c := twice.Cmp(big.NewInt(n)); c > 0 || c == 0 && q.Bit(0) == 1 {
		q.Add(q, big.NewInt(int64(scaled.Sign())))
	}
	return exactDecimal(new(big.Rat).SetFrac(q, big.NewInt(1_000_000_000)))
}

// readQ17 reads one row of q17's upsert stream, keyed by {"auction":..,"day":..}.
func readQ17(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "day", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price", "max_price", "avg_price", "sum_price"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction            *int64
		Day                string
		Total, R1, R2, R3  json.Number
		Min, Max, Avg, Sum json.Number
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.Value, &m); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	for name, dst := range map[string]any{"auction": &v.Auction, "day": &v.Day, "total_bids": &v.Total, "rank1_bids": &v.R1,
		"rank2_bids": &v.R2, "rank3_bids": &v.R3, "min_price": &v.Min, "max_price": &v.Max, "avg_price": &v.Avg, "sum_price": &v.Sum} {
		d := json.NewDecoder(bytes.NewReader(m[name]))
		d.UseNumber()
		if err := d.Decode(dst); err != nil {
			return row{}, fmt.Errorf("value %q: %s: %w", r.Value, name, err)
		}
	}
	if v.Auction == nil {
		return row{}, fmt.Errorf("value %q lacks auction", r.Value)
	}
	if want := fmt.Sprintf(`{"auction":%d,"day":%q}`, *v.Auction, v.Day); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("auction=%d day=%s", *v.Auction, v.Day),
		fmt.Sprintf("total=%s rank1=%s rank2=%s rank3=%s min=%s max=%s avg=%s sum=%s", v.Total, v.R1, v.R2, v.R3, v.Min, v.Max, v.Avg, v.Sum)}, nil
}

// q19, the 10 highest bids of each auction (ROW_NUMBER() OVER (PARTITION BY auction ORDER BY
// price DESC) <= 10), ties in the bid topic's order (the earlier first).
func refQ19(bids []Bid) []row {
	top := map[int64][]Bid{}
	for _, b := range bids {
		rows := top[b.Auction]
		at := len(rows)
		for i, x := range rows {
			if b.Price > x.Price {
				at = i
				break
			}
		}
		rows = append(rows[:at], append([]Bid{b}, rows[at:]...)...)
		top[b.Auction] = rows[:min(len(rows), 10)]
	}
	var out []row
	for a, rows := range top {
		for i, b := range rows {
			out = append(out, row{fmt.Sprintf("auction=%d rank=%d", a, i+1),
				fmt.Sprintf("bidder=%d price=%d channel=%q url=%q dateTime=%d extra=%q", b.Bidder, b.Price, b.Channel, b.URL, b.DateTime, b.Extra)})
		}
	}
	return out
}

// readQ19 reads one row of q19's upsert stream: a bid and its rank_number under the key
// {"key":"<auction>","rank_number":r}.
func readQ19(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "channel", "url", "dateTime", "extra", "rank_number"); err != nil {
		return row{}, err
	}
	var b struct {
		outBid
		Rank *int64 `json:"rank_number"`
	}
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(&b); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if b.Auction == nil || b.Bidder == nil || b.DateTime == nil || b.Price == "" || b.Rank == nil {
		return row{}, fmt.Errorf("value %q lacks auction, bidder, price, dateTime or rank_number", r.Value)
	}
	if want := fmt.Sprintf(`{"key":"%d","rank_number":%d}`, *b.Auction, *b.Rank); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("auction=%d rank=%d", *b.Auction, *b.Rank),
		fmt.Sprintf("bidder=%d price=%s channel=%q url=%q dateTime=%d extra=%q", *b.Bidder, b.Price, b.Channel, b.URL, *b.DateTime, b.Extra)}, nil
}

// q20, bids expanded with their auction (bid INNER JOIN auction ON bid.auction = auction.id
// WHERE auction.category = 10): every bid of an auction of category 10, with the auction.
func refQ20(ev events) []row {
	byID := map[int64]Auction{}
	for _, a := range ev.auctions {
		if a.Category == 10 {
			byID[a.ID] = a
		}
	}
	var out []row
	for _, b := range ev.bids {
		a, ok := byID[b.Auction]
		if !ok {
			continue
		}
		out = append(out, row{bidID(b.Auction, b.Bidder, b.DateTime, b.Extra), fmt.Sprintf(
			"price=%d channel=%q url=%q itemName=%q description=%q initialBid=%d reserve=%d auction_dateTime=%d expires=%d seller=%d category=%d auction_extra=%q",
			b.Price, b.Channel, b.URL, a.ItemName, a.Description, a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, a.Extra)})
	}
	return out
}

// readQ20 reads one row of q20: Flink's nexmark_q20 columns, keyed by the auction.
func readQ20(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "channel", "url", "bid_dateTime", "bid_extra",
		"itemName", "description", "initialBid", "reserve", "auction_dateTime", "expires", "seller", "category", "auction_extra"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction, Bidder, Price                         *int64
		Channel, URL                                   string
		BidDateTime                                    *int64 `json:"bid_dateTime"`
		BidExtra                                       string `json:"bid_extra"`
		ItemName, Description                          string
		InitialBid, Reserve, Expires, Seller, Category *int64
		AuctionDateTime                                *int64 `json:"auction_dateTime"`
		AuctionExtra                                   string `json:"auction_extra"`
	}
	v2 := &v
	if err := decodeKeyed(r, v2, func() *int64 { return v.Auction }); err != nil {
		return row{}, err
	}
	for _, p := range []*int64{v.Bidder, v.Price, v.BidDateTime, v.InitialBid, v.Reserve, v.AuctionDateTime, v.Expires, v.Seller, v.Category} {
		if p == nil {
			return row{}, fmt.Errorf("value %q has a null number column", r.Value)
		}
	}
	return row{bidID(*v.Auction, *v.Bidder, *v.BidDateTime, v.BidExtra), fmt.Sprintf(
		"price=%d channel=%q url=%q itemName=%q description=%q initialBid=%d reserve=%d auction_dateTime=%d expires=%d seller=%d category=%d auction_extra=%q",
		*v.Price, v.Channel, v.URL, v.ItemName, v.Description, *v.InitialBid, *v.Reserve, *v.AuctionDateTime, *v.Expires, *v.Seller, *v.Category, v.AuctionExtra)}, nil
}

// q3, local item suggestion (auction JOIN person ON auction.seller = person.id WHERE
// auction.category = 10 AND person.state IN ('OR', 'ID', 'CA')): per auction, its seller's
// name, city and state, keyed by the seller.
func refQ3(ev events) []row {
	byID := map[int64]Person{}
	for _, p := range ev.persons {
		if p.State == "OR" || p.State == "ID" || p.State == "CA" {
			byID[p.ID] = p
		}
	}
	var out []row
	for _, a := range ev.auctions {
		p, ok := byID[a.Seller]
		if a.Category != 10 || !ok {
			continue
		}
		out = append(out, row{fmt.Sprintf("id=%d", a.ID), fmt.Sprintf("seller=%d name=%q city=%q state=%q", a.Seller, p.Name, p.City, p.State)})
	}
	return out
}

// readQ3 reads one row of q3: name, city, state, id, keyed by the seller.
func readQ3(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "name", "city", "state", "id"); err != nil {
		return row{}, err
	}
	var v struct {
		Name, City, State string
		ID                *int64
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if v.ID == nil {
		return row{}, fmt.Errorf("value %q lacks id", r.Value)
	}
	return row{fmt.Sprintf("id=%d", *v.ID), fmt.Sprintf("seller=%s name=%q city=%q state=%q", r.Key, v.Name, v.City, v.State)}, nil
}

// q23, bids expanded with their bidder and the auctions their bidder sells (bid JOIN person ON
// person.id = bid.bidder JOIN auction ON auction.seller = bid.bidder): every bid whose bidder is
// a person, once with each auction that person sells. A row is named by its bid and auction
// columns (q23 keeps neither the auction's id nor the bid's time); its value is the person.
func refQ23(ev events) []row {
	persons := map[int64]Person{}
	for _, p := range ev.persons {
		persons[p.ID] = p
	}
	sold := map[int64][]Auction{}
	for _, a := range ev.auctions {
		sold[a.Seller] = append(sold[a.Seller], a)
	}
	var out []row
	for _, b := range ev.bids {
		p, ok := persons[b.Bidder]
		if !ok {
			continue
		}
		for _, a := range sold[b.Bidder] {
			out = append(out, row{q23ID(b.Bidder, b.Price, b.Channel, b.URL, b.Extra, a.ItemName, a.Description, a.InitialBid,
				a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, a.Extra),
				q23Person(p.ID, p.Name, p.EmailAddress, p.CreditCard, p.City, p.State, p.Extra)})
		}
	}
	return out
}

// q23ID names a row of q23 by its bid's and its auction's columns.
func q23ID(bidder, price int64, channel, url, bidExtra, itemName, description string, initialBid, reserve,
	auctionDateTime, expires, seller, category int64, auctionExtra string) string {
	return fmt.Sprintf("bidder=%d price=%d channel=%q url=%q bid_extra=%q itemName=%q description=%q initialBid=%d reserve=%d auction_dateTime=%d expires=%d seller=%d category=%d auction_extra=%q",
		bidder, price, channel, url, bidExtra, itemName, description, initialBid, reserve, auctionDateTime, expires, seller, category, auctionExtra)
}

// q23Person is the value of a row of q23: its person's columns.
func q23Person(id int64, name, email, card, city, state, extra string) string {
	return fmt.Sprintf("person_id=%d name=%q emailAddress=%q creditCard=%q city=%q state=%q person_extra=%q", id, name, email, card, city, state, extra)
}

// readQ23 reads one row of q23: Flink's nexmark_q23 columns, keyed by the bidder.
func readQ23(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "bidder", "price", "channel", "url", "bid_extra", "person_id", "name", "emailAddress",
		"creditCard", "city", "state", "person_extra", "itemName", "description", "initialBid", "reserve",
		"auction_dateTime", "expires", "seller", "category", "auction_extra"); err != nil {
		return row{}, err
	}
	var v struct {
		Bidder, Price                                             *int64
		Channel, URL, Name, EmailAddress, CreditCard, City, State string
		BidExtra                                                  string `json:"bid_extra"`
		PersonID                                                  *int64 `json:"person_id"`
		PersonExtra                                               string `json:"person_extra"`
		ItemName, Description                                     string
		InitialBid, Reserve, Expires, Seller, Category            *int64
		AuctionDateTime                                           *int64 `json:"auction_dateTime"`
		AuctionExtra                                              string `json:"auction_extra"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	for _, p := range []*int64{v.Bidder, v.Price, v.PersonID, v.InitialBid, v.Reserve, v.AuctionDateTime, v.Expires, v.Seller, v.Category} {
		if p == nil {
			return row{}, fmt.Errorf("value %q has a null number column", r.Value)
		}
	}
	if want := strconv.FormatInt(*v.Bidder, 10); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want the bidder %s", r.Key, want)
	}
	return row{q23ID(*v.Bidder, *v.Price, v.Channel, v.URL, v.BidExtra, v.ItemName, v.Description, *v.InitialBid,
		*v.Reserve, *v.AuctionDateTime, *v.Expires, *v.Seller, *v.Category, v.AuctionExtra),
		q23Person(*v.PersonID, v.Name, v.EmailAddress, v.CreditCard, v.City, v.State, v.PersonExtra)}, nil
}

// q8's window: 10 s, tumbling, aligned to the epoch.
const q8Window = 10_000

// q8, monitor new users: the persons who created an auction in the 10 s window they entered
// in, with the window's start.
func refQ8(ev events) []row {
	type sw struct{ seller, start int64 }
	sold := map[sw]bool{}
	for _, a := range ev.auctions {
		sold[sw{a.Seller, a.DateTime - a.DateTime%q8Window}] = true
	}
	var out []row
	for _, p := range ev.persons {
		start := p.DateTime - p.DateTime%q8Window
		if sold[sw{p.ID, start}] {
			out = append(out, row{fmt.Sprintf("id=%d starttime=%d", p.ID, start), fmt.Sprintf("name=%q", p.Name)})
		}
	}
	return out
}

// readQ8 reads one row of q8: id, name, starttime, keyed by {"id":..,"window_start":..}.
func readQ8(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "id", "name", "starttime"); err != nil {
		return row{}, err
	}
	var v struct {
		ID, Starttime *int64
		Name          string
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if v.ID == nil || v.Starttime == nil {
		return row{}, fmt.Errorf("value %q lacks id or starttime", r.Value)
	}
	if want := fmt.Sprintf(`{"id":%d,"window_start":%d}`, *v.ID, *v.Starttime); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("id=%d starttime=%d", *v.ID, *v.Starttime), fmt.Sprintf("name=%q", v.Name)}, nil
}

// settledQ8 keeps, of an unbounded run, the windows that end 30 s or more before the last
// person and auction: every partition's watermark has passed them (a window closes when the
// watermarks of all the tasks that write its side have), so their rows are out.
func settledQ8(ev events, want []row, out []*kgo.Record) ([]row, []*kgo.Record) {
	last := min(ev.persons[len(ev.persons)-1].DateTime, ev.auctions[len(ev.auctions)-1].DateTime)
	cut := last - 30_000 - q8Window
	keep := func(id string) bool {
		var pid, start int64
		_, err := fmt.Sscanf(id, "id=%d starttime=%d", &pid, &start)
		return err == nil && start < cut
	}
	return keepRows(want, out, readQ8, keep)
}

// q13, bids joined with the side input (mod(auction, 10000) = key; the side input's value is the
// key's text): every bid with the value of its auction modulo 10,000.
func refQ13(bids []Bid) []row {
	out := make([]row, len(bids))
	for i, b := range bids {
		out[i] = row{bidID(b.Auction, b.Bidder, b.DateTime, ""), fmt.Sprintf("price=%d value=%q key=%d", b.Price, strconv.FormatInt(b.Auction%SideInputRows, 10), b.Auction%SideInputRows)}
	}
	return out
}

// readQ13 reads one row of q13: auction, bidder, price, dateTime, value, keyed by the side
// input's key.
func readQ13(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "dateTime", "value"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction, Bidder, Price, DateTime *int64
		Value                            *string
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if v.Auction == nil || v.Bidder == nil || v.Price == nil || v.DateTime == nil || v.Value == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	return row{bidID(*v.Auction, *v.Bidder, *v.DateTime, ""), fmt.Sprintf("price=%d value=%q key=%s", *v.Price, *v.Value, r.Key)}, nil
}

// readQ12 reads one row of q12: bidder, bid_count, window_start, window_end.
func readQ12(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "bidder", "bid_count", "window_start", "window_end"); err != nil {
		return row{}, err
	}
	var v struct {
		Bidder, BidCount, WindowStart, WindowEnd *int64
	}
	var m map[string]*int64
	if err := json.Unmarshal(r.Value, &m); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	v.Bidder, v.BidCount, v.WindowStart, v.WindowEnd = m["bidder"], m["bid_count"], m["window_start"], m["window_end"]
	if v.Bidder == nil || v.BidCount == nil || v.WindowStart == nil || v.WindowEnd == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	if string(r.Key) != strconv.FormatInt(*v.Bidder, 10) {
		return row{}, fmt.Errorf("record key %q, want the bidder %d", r.Key, *v.Bidder)
	}
	return row{fmt.Sprintf("bidder=%d window_start=%d", *v.Bidder, *v.WindowStart), fmt.Sprintf("bid_count=%d window_end=%d", *v.BidCount, *v.WindowEnd)}, nil
}

// q12's window: 10 s of processing time.
const q12Window = 10_000

// checkQ12 checks q12's windows of processing time (the bids counted per bidder in each 10 s of
// the wall clock at which sluice read them, which no reference knows): each row a 10 s window
// aligned to the epoch, each (bidder, window) once, and per bidder the counts adding up to the
// bidder's bids once every window closed (a bounded run), to at most them before.
func checkQ12(bids []Bid, out []*kgo.Record, bounded bool) error {
	want := map[int64]int64{}
	for _, b := range bids {
		want[b.Bidder]++
	}
	got := map[int64]int64{}
	seen := map[string]bool{}
	for _, rec := range out {
		r, err := readQ12(rec)
		if err != nil {
			return err
		}
		var bidder, start, count, end int64
		fmt.Sscanf(r.id, "bidder=%d window_start=%d", &bidder, &start)
		fmt.Sscanf(r.val, "bid_count=%d window_end=%d", &count, &end)
		switch {
		case start%q12Window != 0 || end != start+q12Window:
			return fmt.Errorf("row %s %s is not a 10 s window aligned to the epoch", r.id, r.val)
		case seen[r.id]:
			return fmt.Errorf("bidder %d window %d written twice", bidder, start)
		case count < 1:
			return fmt.Errorf("row %s %s counts no bid", r.id, r.val)
		}
		seen[r.id] = true
		got[bidder] += count
	}
	for bidder, n := range want {
		if bounded && got[bidder] != n || got[bidder] > n {
			return fmt.Errorf("bidder %d: windows count %d bids, the bidder made %d", bidder, got[bidder], n)
		}
	}
	for bidder := range got {
		if want[bidder] == 0 {
			return fmt.Errorf("bidder %d made no bid but has windows", bidder)
		}
	}
	return nil
}

// q7's window: 10 s, tumbling, aligned to the epoch.
const q7Window = 10_000

// q7, highest bid: the bids whose price is the highest of their own 10 s window.
func refQ7(bids []Bid) []row {
	highest := map[int64]int64{}
	for _, b := range bids {
		w := b.DateTime - b.DateTime%q7Window
		highest[w] = max(highest[w], b.Price)
	}
	var out []row
	for _, b := range bids {
		if b.Price == highest[b.DateTime-b.DateTime%q7Window] {
			out = append(out, row{bidID(b.Auction, b.Bidder, b.DateTime, b.Extra), fmt.Sprintf("price=%d", b.Price)})
		}
	}
	return out
}

// readQ7 reads one row of q7: auction, bidder, price, dateTime, extra, keyed by its window's
// start (the top's group key).
func readQ7(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "bidder", "price", "dateTime", "extra"); err != nil {
		return row{}, err
	}
	var v struct {
		Auction, Bidder, Price, DateTime *int64
		Extra                            string
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if v.Auction == nil || v.Bidder == nil || v.Price == nil || v.DateTime == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	if want := strconv.FormatInt(*v.DateTime-*v.DateTime%q7Window, 10); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{bidID(*v.Auction, *v.Bidder, *v.DateTime, v.Extra), fmt.Sprintf("price=%d", *v.Price)}, nil
}

// settledQ7 keeps, of an unbounded run, the bids of the windows that end 30 s or more before the
// last bid: every partition's watermark has passed them, so their maxima are out.
func settledQ7(ev events, want []row, out []*kgo.Record) ([]row, []*kgo.Record) {
	cut := ev.bids[len(ev.bids)-1].DateTime - 30_000 - q7Window
	keep := func(id string) bool {
		var auction, bidder, t int64
		_, err := fmt.Sscanf(id, "auction=%d bidder=%d dateTime=%d", &auction, &bidder, &t)
		return err == nil && t-t%q7Window < cut
	}
	return keepRows(want, out, readQ7, keep)
}

// q5's windows: 10 s, sliding by 2 s, aligned to the epoch.
const (
	q5Size    = 10_000
	q5Advance = 2_000
)

// q5, hot items: per 10 s window sliding by 2 s, every auction whose bid count is the window's
// highest.
func refQ5(bids []Bid) []row {
	type aw struct{ auction, start int64 }
	counts := map[aw]int64{}
	highest := map[int64]int64{}
	for _, b := range bids {
		last := b.DateTime - b.DateTime%q5Advance
		for s := last; s > b.DateTime-q5Size; s -= q5Advance {
			counts[aw{b.Auction, s}]++
			highest[s] = max(highest[s], counts[aw{b.Auction, s}])
		}
	}
	var out []row
	for k, n := range counts {
		if n == highest[k.start] {
			out = append(out, row{fmt.Sprintf("auction=%d window_start=%d", k.auction, k.start), fmt.Sprintf("num=%d window_end=%d", n, k.start+q5Size)})
		}
	}
	return out
}

// readQ5 reads one row of q5: auction, num, window_start, window_end, keyed by its window's
// start (the top's group key).
func readQ5(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "auction", "num", "window_start", "window_end"); err != nil {
		return row{}, err
	}
	var m map[string]*int64
	if err := json.Unmarshal(r.Value, &m); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	a, n, s, e := m["auction"], m["num"], m["window_start"], m["window_end"]
	if a == nil || n == nil || s == nil || e == nil {
		return row{}, fmt.Errorf("value %q has a null column", r.Value)
	}
	if want := strconv.FormatInt(*s, 10); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("auction=%d window_start=%d", *a, *s), fmt.Sprintf("num=%d window_end=%d", *n, *e)}, nil
}

// settledQ5 keeps, of an unbounded run, the windows that end 30 s or more before the last bid.
func settledQ5(ev events, want []row, out []*kgo.Record) ([]row, []*kgo.Record) {
	cut := ev.bids[len(ev.bids)-1].DateTime - 30_000 - q5Size
	keep := func(id string) bool {
		var auction, start int64
		_, err := fmt.Sscanf(id, "auction=%d window_start=%d", &auction, &start)
		return err == nil && start < cut
	}
	return keepRows(want, out, readQ5, keep)
}

// q9, winning bids: per auction, of its bids made while it was open (dateTime from the
// auction's to its expires, both included), the highest, of equal prices the earliest (then the
// first in the bid topic).
func refQ9(ev events) []row {
	auctions := map[int64]Auction{}
	for _, a := range ev.auctions {
		auctions[a.ID] = a
	}
	best := map[int64]Bid{}
	for _, b := range ev.bids {
		a, ok := auctions[b.Auction]
		if !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		if w, ok := best[a.ID]; !ok || b.Price > w.Price || b.Price == w.Price && b.DateTime < w.DateTime {
			best[a.ID] = b
		}
	}
	var out []row
	for id, b := range best {
		a := auctions[id]
		out = append(out, row{fmt.Sprintf("id=%d", id), fmt.Sprintf(
			"itemName=%q description=%q initialBid=%d reserve=%d dateTime=%d expires=%d seller=%d category=%d extra=%q auction=%d bidder=%d price=%d bid_dateTime=%d bid_extra=%q",
			a.ItemName, a.Description, a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, a.Extra,
			b.Auction, b.Bidder, b.Price, b.DateTime, b.Extra)})
	}
	return out
}

// readQ9 reads one row of q9's upsert stream, keyed by {"key":"<auction>","rank":1}.
func readQ9(r *kgo.Record) (row, error) {
	cols := []string{"id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category", "extra",
		"auction", "bidder", "price", "bid_dateTime", "bid_extra"}
	if err := checkColumns(r, cols...); err != nil {
		return row{}, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.Value, &m); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	num := func(c string) int64 {
		n, _ := strconv.ParseInt(string(m[c]), 10, 64)
		return n
	}
	str := func(c string) string {
		var s string
		_ = json.Unmarshal(m[c], &s)
		return s
	}
	if want := fmt.Sprintf(`{"key":"%d","rank":1}`, num("id")); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("id=%d", num("id")), fmt.Sprintf(
		"itemName=%q description=%q initialBid=%d reserve=%d dateTime=%d expires=%d seller=%d category=%d extra=%q auction=%d bidder=%d price=%d bid_dateTime=%d bid_extra=%q",
		str("itemName"), str("description"), num("initialBid"), num("reserve"), num("dateTime"), num("expires"), num("seller"), num("category"), str("extra"),
		num("auction"), num("bidder"), num("price"), num("bid_dateTime"), str("bid_extra"))}, nil
}

// q4, average price for a category: per auction, the highest price of its bids made while it
// was open (dateTime from the auction's to its expires, both included; auctions without one
// have no row), and per category the average of those maxima, exact, rounded half to even to 9
// decimal places (sluice's avg; Flink's AVG of a BIGINT truncates).
func refQ4(ev events) []row {
	auctions := map[int64]Auction{}
	for _, a := range ev.auctions {
		auctions[a.ID] = a
	}
	best := map[int64]int64{}
	for _, b := range ev.bids {
		a, ok := auctions[b.Auction]
		if !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		if p, ok := best[a.ID]; !ok || b.Price > p {
			best[a.ID] = b.Price
		}
	}
	type stats struct{ n, sum int64 }
	by := map[int64]*stats{}
	for id, p := range best {
		c := auctions[id].Category
		if by[c] == nil {
			by[c] = &stats{}
		}
		by[c].n++
		by[c].sum += p
	}
	var out []row
	for c, st := range by {
		out = append(out, row{fmt.Sprintf("category=%d", c), "final=" + roundedAvg(st.sum, st.n)})
	}
	return out
}

// readQ4 reads one row of q4's upsert stream, keyed by the category.
func readQ4(r *kgo.Record) (row, error) {
	if err := checkColumns(r, "category", "final"); err != nil {
		return row{}, err
	}
	var v struct {
		Category *int64
		Final    json.Number
	}
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return row{}, fmt.Errorf("value %q: %w", r.Value, err)
	}
	if v.Category == nil || v.Final == "" {
		return row{}, fmt.Errorf("value %q lacks category or final", r.Value)
	}
	if want := strconv.FormatInt(*v.Category, 10); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("category=%d", *v.Category), "final=" + string(v.Final)}, nil
}

// keepRows keeps the rows of want and the records of out whose row id keep accepts (a record
// read cannot read stays, to be reported).
func keepRows(want []row, out []*kgo.Record, read func(*kgo.Record) (row, error), keep func(id string) bool) ([]row, []*kgo.Record) {
	var w []row
	for _, r := range want {
		if keep(r.id) {
			w = append(w, r)
		}
	}
	var o []*kgo.Record
	for _, rec := range out {
		if r, err := read(rec); err != nil || keep(r.id) {
			o = append(o, rec)
		}
	}
	return w, o
}

// q15 and q16, bidding statistics per day (q16: per channel and day): the bids, those under
// 10,000, from 10,000 to under 1,000,000 and from 1,000,000 (rank1..3), and the distinct bidders
// and auctions among all of them and among each rank's; q16 also the largest 'HH:mm' of the
// group's bids. Days and minutes are UTC. Computed with sets, as the SQL says.
type dayStats struct {
	bids              [4]int64 // total, rank1, rank2, rank3
	bidders, auctions [4]map[int64]bool
	minute            string
}

func (st *dayStats) add(b Bid) {
	rank := 3
	switch {
	case b.Price < 10_000:
		rank = 1
	case b.Price < 1_000_000:
		rank = 2
	}
	for _, i := range []int{0, rank} {
		st.bids[i]++
		if st.bidders[i] == nil {
			st.bidders[i], st.auctions[i] = map[int64]bool{}, map[int64]bool{}
		}
		st.bidders[i][b.Bidder] = true
		st.auctions[i][b.Auction] = true
	}
	st.minute = max(st.minute, time.UnixMilli(b.DateTime).UTC().Format("15:04"))
}

func (st *dayStats) String() string {
	return fmt.Sprintf("bids=%d/%d/%d/%d bidders=%d/%d/%d/%d auctions=%d/%d/%d/%d",
		st.bids[0], st.bids[1], st.bids[2], st.bids[3],
		len(st.bidders[0]), len(st.bidders[1]), len(st.bidders[2]), len(st.bidders[3]),
		len(st.auctions[0]), len(st.auctions[1]), len(st.auctions[2]), len(st.auctions[3]))
}

func refQ15(bids []Bid) []row {
	by := map[string]*dayStats{}
	for _, b := range bids {
		day := time.UnixMilli(b.DateTime).UTC().Format("2006-01-02")
		if by[day] == nil {
			by[day] = &dayStats{}
		}
		by[day].add(b)
	}
	out := make([]row, 0, len(by))
	for day, st := range by {
		out = append(out, row{"day=" + day, st.String()})
	}
	return out
}

func refQ16(bids []Bid) []row {
	type group struct{ channel, day string }
	by := map[group]*dayStats{}
	for _, b := range bids {
		g := group{b.Channel, time.UnixMilli(b.DateTime).UTC().Format("2006-01-02")}
		if by[g] == nil {
			by[g] = &dayStats{}
		}
		by[g].add(b)
	}
	out := make([]row, 0, len(by))
	for g, st := range by {
		out = append(out, row{fmt.Sprintf("channel=%q day=%s", g.channel, g.day), "minute=" + st.minute + " " + st.String()})
	}
	return out
}

// statsColumns are the columns q15 and q16 end with, in Flink's order.
var statsColumns = []string{"total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders",
	"total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"}

// readStats decodes r's value: the string columns named in strs, then statsColumns as integers,
// written as the reference writes them.
func readStats(r *kgo.Record, strs ...string) (map[string]string, string, error) {
	if err := checkColumns(r, append(slices.Clone(strs), statsColumns...)...); err != nil {
		return nil, "", err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.Value, &m); err != nil {
		return nil, "", fmt.Errorf("value %q: %w", r.Value, err)
	}
	s := map[string]string{}
	for _, c := range strs {
		var v string
		if err := json.Unmarshal(m[c], &v); err != nil {
			return nil, "", fmt.Errorf("value %q: %s: %w", r.Value, c, err)
		}
		s[c] = v
	}
	n := make([]any, len(statsColumns))
	for i, c := range statsColumns {
		var v int64
		if err := json.Unmarshal(m[c], &v); err != nil {
			return nil, "", fmt.Errorf("value %q: %s: %w", r.Value, c, err)
		}
		n[i] = v
	}
	return s, fmt.Sprintf("bids=%d/%d/%d/%d bidders=%d/%d/%d/%d auctions=%d/%d/%d/%d", n...), nil
}

// readQ15 reads one row of q15's upsert stream, keyed by the day.
func readQ15(r *kgo.Record) (row, error) {
	s, stats, err := readStats(r, "day")
	if err != nil {
		return row{}, err
	}
	if string(r.Key) != s["day"] {
		return row{}, fmt.Errorf("record key %q, want the day %q", r.Key, s["day"])
	}
	return row{"day=" + s["day"], stats}, nil
}

// readQ16 reads one row of q16's upsert stream, keyed by {"channel":..,"day":..}.
func readQ16(r *kgo.Record) (row, error) {
	s, stats, err := readStats(r, "channel", "day", "minute")
	if err != nil {
		return row{}, err
	}
	if want := fmt.Sprintf(`{"channel":%s,"day":%q}`, mustJSON(s["channel"]), s["day"]); string(r.Key) != want {
		return row{}, fmt.Errorf("record key %q, want %s", r.Key, want)
	}
	return row{fmt.Sprintf("channel=%q day=%s", s["channel"], s["day"]), "minute=" + s["minute"] + " " + stats}, nil
}

// mustJSON is s as a JSON string.
func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
