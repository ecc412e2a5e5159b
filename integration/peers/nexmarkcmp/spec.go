package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// kind is how a column is normalized.
type kind byte

const (
	num   kind = 'n' // an exact decimal: a JSON number or a numeric string
	str   kind = 's' // a string as it is
	ts    kind = 't' // epoch ms: a number, or an ISO-8601 / SQL timestamp string in UTC
	trunc kind = 'a' // a decimal truncated toward zero (Flink's AVG of a BIGINT is a BIGINT)
	// quo: sluice's exact average, rounded half to even to 9 places. On the Flink side the
	// column's name is "SUM/COUNT", two columns whose exact quotient is rounded the same way (q4).
	quo kind = 'q'
)

type col struct {
	flink, sluice string
	kind          kind
}

// spec is how one query's two results are compared.
type spec struct {
	name string
	cols []col
	// flinkUpsert, sluiceUpsert: the topic is an upsert stream (latest value per key).
	flinkUpsert, sluiceUpsert bool
	// sumBy: compare the sum of the second column per value of the first (q12: processing-time
	// windows differ from run to run, the per-bidder totals do not).
	sumBy bool
	// ties: the columns (Flink's names) the query's ORDER BY decides; rows that differ only in
	// the others are ties broken differently (sluice: arrival order; Flink: unspecified), which
	// compare reports as such instead of a disagreement.
	ties []string
}

// digested says whether the query's relations compare as digests of whole rows (compareDigests):
// all but those whose rows are summed or may differ within ties.
func (s spec) digested() bool { return !s.sumBy && len(s.ties) == 0 }

func (s spec) names() []string {
	out := make([]string, len(s.cols))
	for i, c := range s.cols {
		out[i] = c.flink
	}
	return out
}

// project returns rel projected on the named columns (a multiset).
func (s spec) project(rel map[string]int, names []string) map[string]int {
	var idx []int
	for _, n := range names {
		for i, c := range s.cols {
			if c.flink == n {
				idx = append(idx, i)
			}
		}
	}
	out := make(map[string]int, len(rel))
	parts := make([]string, len(idx))
	for row, n := range rel {
		f := strings.Split(row, sep)
		for j, i := range idx {
			parts[j] = f[i]
		}
		out[strings.Join(parts, sep)] += n
	}
	return out
}

func same(kinds string, names ...string) []col {
	if len(kinds) != len(names) {
		panic(fmt.Sprintf("nexmarkcmp: %d kinds for %d columns %v", len(kinds), len(names), names))
	}
	out := make([]col, len(names))
	for i, n := range names {
		out[i] = col{n, n, kind(kinds[i])}
	}
	return out
}

var specs = map[string]spec{
	"q0": {cols: same("nnnts", "auction", "bidder", "price", "dateTime", "extra")},
	"q1": {cols: same("nnnts", "auction", "bidder", "price", "dateTime", "extra")},
	"q2": {cols: same("nn", "auction", "price")},
	"q3": {cols: same("sssn", "name", "city", "state", "id")},
	// q4: Flink's own AVG(final) (truncated) against sluice's final truncated, and sluice's exact
	// final against the exact quotient of the SUM and COUNT Flink's AVG divides.
	"q4": {cols: []col{{"id", "category", num}, {"final", "final", trunc}, {"final_sum/final_count", "final", quo}}, flinkUpsert: true, sluiceUpsert: true},
	"q5": {cols: []col{{"auction", "auction", num}, {"num", "num", num}, {"starttime", "window_start", ts}, {"endtime", "window_end", ts}}, flinkUpsert: true},
	"q7": {cols: same("nnnts", "auction", "bidder", "price", "dateTime", "extra")},
	"q8": {cols: same("nst", "id", "name", "starttime")},
	"q9": {cols: same("nssnnttnnsnnnts", "id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category", "extra", "auction", "bidder", "price", "bid_dateTime", "bid_extra"), flinkUpsert: true, sluiceUpsert: true,
		ties: []string{"id", "auction", "price", "bid_dateTime"}},
	"q11": {cols: []col{{"bidder", "key", num}, {"bid_count", "bid_count", num}, {"starttime", "window_start", ts}, {"endtime", "window_end", ts}}},
	"q12": {cols: same("nn", "bidder", "bid_count"), sumBy: true},
	"q13": {cols: same("nnnts", "auction", "bidder", "price", "dateTime", "value")},
	"q14": {cols: same("nnnstsn", "auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts")},
	"q15": {cols: same("snnnnnnnnnnnn", "day", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders",
		"total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"), flinkUpsert: true, sluiceUpsert: true},
	"q16": {cols: same("sssnnnnnnnnnnnn", "channel", "day", "minute", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders",
		"total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"), flinkUpsert: true, sluiceUpsert: true},
	"q17": {cols: same("nsnnnnnnan", "auction", "day", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price", "max_price", "avg_price", "sum_price"), flinkUpsert: true, sluiceUpsert: true},
	// q18: of a pair's bids with the same dateTime, sluice keeps the last to arrive.
	"q18": {cols: same("nnnssts", "auction", "bidder", "price", "channel", "url", "dateTime", "extra"), flinkUpsert: true, sluiceUpsert: true,
		ties: []string{"auction", "bidder", "dateTime"}},
	// q19: equal prices rank in arrival order in sluice and in no stated order in Flink.
	"q19": {cols: same("nnnsstsn", "auction", "bidder", "price", "channel", "url", "dateTime", "extra", "rank_number"), flinkUpsert: true, sluiceUpsert: true,
		ties: []string{"auction", "rank_number", "price"}},
	"q20": {cols: same("nnnsstsssnnttnns", "auction", "bidder", "price", "channel", "url", "bid_dateTime", "bid_extra", "itemName", "description", "initialBid", "reserve", "auction_dateTime", "expires", "seller", "category", "auction_extra")},
	"q21": {cols: same("nnnss", "auction", "bidder", "price", "channel", "channel_id")},
	"q22": {cols: same("nnnssss", "auction", "bidder", "price", "channel", "dir1", "dir2", "dir3")},
	"q23": {cols: same("nnsssnssssssssnnttnns", "bidder", "price", "channel", "url", "bid_extra", "person_id", "name", "emailAddress", "creditCard", "city", "state", "person_extra",
		"itemName", "description", "initialBid", "reserve", "auction_dateTime", "expires", "seller", "category", "auction_extra")},
}

func init() {
	for name, s := range specs {
		s.name = name
		specs[name] = s
	}
}

func lookup(query string) (spec, error) {
	s, ok := specs[query]
	if !ok {
		return spec{}, fmt.Errorf("no comparison spec for query %q", query)
	}
	return s, nil
}

const sep = "\x1f"

// eachRow reads topic and calls fn with each record's key and its row, normalized (the
// query's columns as the side names them, joined by sep); a tombstone (an upsert topic's null
// value) comes as tomb with an empty row, and is an error in an append topic.
func eachRow(ctx context.Context, brokers []string, topic string, s spec, flink bool, fn func(key []byte, row string, tomb bool)) error {
	upsert := s.sluiceUpsert
	if flink {
		upsert = s.flinkUpsert
	}
	var p fastjson.Parser
	var buf []string
	return workload.ReadEach(ctx, brokers, topic, func(r *kgo.Record) error {
		if r.Value == nil {
			if !upsert {
				return fmt.Errorf("%s partition %d offset %d: a tombstone in an append topic", topic, r.Partition, r.Offset)
			}
			fn(r.Key, "", true)
			return nil
		}
		v, err := p.ParseBytes(r.Value)
		if err != nil {
			return fmt.Errorf("%s partition %d offset %d: %w", topic, r.Partition, r.Offset, err)
		}
		buf = buf[:0]
		for _, c := range s.cols {
			name := c.sluice
			if flink {
				name = c.flink
			}
			var f string
			var err error
			if c.kind == quo && flink {
				nd := strings.SplitN(name, "/", 2)
				f, err = quotient(v.Get(nd[0]), v.Get(nd[1]), 9)
			} else {
				f, err = normalize(v.Get(name), c.kind)
			}
			if err != nil {
				return fmt.Errorf("%s partition %d offset %d: column %s: %w", topic, r.Partition, r.Offset, name, err)
			}
			buf = append(buf, f)
		}
		fn(r.Key, strings.Join(buf, sep), false)
		return nil
	})
}

// eachResult calls add with each row of the relation topic holds, made by conv: an append
// topic's every row, an upsert topic's latest row per key.
func eachResult[V any](ctx context.Context, brokers []string, topic string, s spec, flink bool, conv func(row string) V, add func(V)) error {
	latest := make(map[string]V)
	upsert := (flink && s.flinkUpsert) || (!flink && s.sluiceUpsert)
	err := eachRow(ctx, brokers, topic, s, flink, func(key []byte, row string, tomb bool) {
		switch {
		case tomb:
			delete(latest, string(key))
		case upsert:
			latest[string(key)] = conv(row)
		default:
			add(conv(row))
		}
	})
	if err != nil {
		return err
	}
	for _, v := range latest {
		add(v)
	}
	return nil
}

// relation reads topic and returns its rows, normalized, as a multiset (eachResult).
func relation(ctx context.Context, brokers []string, topic string, s spec, flink bool) (map[string]int, error) {
	rows := make(map[string]int)
	if err := eachResult(ctx, brokers, topic, s, flink, func(row string) string { return row }, func(row string) { rows[row]++ }); err != nil {
		return nil, err
	}
	if s.sumBy {
		sums := make(map[string]*big.Rat)
		for row, n := range rows {
			kv := strings.SplitN(row, sep, 2)
			x, ok := new(big.Rat).SetString(kv[1])
			if !ok {
				return nil, fmt.Errorf("%s: %q is not a number", topic, kv[1])
			}
			if sums[kv[0]] == nil {
				sums[kv[0]] = new(big.Rat)
			}
			sums[kv[0]].Add(sums[kv[0]], x.Mul(x, new(big.Rat).SetInt64(int64(n))))
		}
		rows = make(map[string]int, len(sums))
		for k, v := range sums {
			rows[k+sep+v.RatString()]++
		}
	}
	return rows, nil
}

// digest is 128 bits of a row's SHA-256: a relation of millions of wide rows (q23 at 10M events:
// 12M rows of 21 columns, 23 GB as strings in maps) compares as two sorted slices of them.
type digest struct{ hi, lo uint64 }

func digestOf(row string) digest {
	h := sha256.Sum256([]byte(row))
	return digest{binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:16])}
}

func (d digest) cmp(e digest) int {
	if c := cmp.Compare(d.hi, e.hi); c != 0 {
		return c
	}
	return cmp.Compare(d.lo, e.lo)
}

// digests reads topic as relation does and returns its rows' digests, sorted (a multiset).
func digests(ctx context.Context, brokers []string, topic string, s spec, flink bool) ([]digest, error) {
	var out []digest
	if err := eachResult(ctx, brokers, topic, s, flink, digestOf, func(d digest) { out = append(out, d) }); err != nil {
		return nil, err
	}
	slices.SortFunc(out, digest.cmp)
	return out, nil
}

// diffSorted returns the digests of a beyond b and of b beyond a (multiset differences of two
// sorted slices).
func diffSorted(a, b []digest) (onlyA, onlyB []digest) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch a[i].cmp(b[j]) {
		case -1:
			onlyA = append(onlyA, a[i])
			i++
		case 1:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return append(onlyA, a[i:]...), append(onlyB, b[j:]...)
}

var timeLayouts = []string{
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
}

// normalize returns the column's value as a comparable string ("null" for null or missing).
func normalize(v *fastjson.Value, k kind) (string, error) {
	if v == nil || v.Type() == fastjson.TypeNull {
		return "null", nil
	}
	var text string
	switch v.Type() {
	case fastjson.TypeString:
		text = string(v.GetStringBytes())
	case fastjson.TypeNumber:
		text = string(v.MarshalTo(nil))
	default:
		text = string(v.MarshalTo(nil))
	}
	switch k {
	case str:
		return text, nil
	case num, trunc, quo:
		x, ok := new(big.Rat).SetString(text)
		if !ok {
			return "", fmt.Errorf("%q is not a number", text)
		}
		if k == trunc {
			q := new(big.Int).Quo(x.Num(), x.Denom())
			return q.String(), nil
		}
		return x.RatString(), nil
	case ts:
		if v.Type() == fastjson.TypeNumber {
			x, ok := new(big.Rat).SetString(text)
			if !ok || !x.IsInt() {
				return "", fmt.Errorf("%q is not epoch ms", text)
			}
			return x.Num().String(), nil
		}
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return text, nil
		}
		for _, l := range timeLayouts {
			if t, err := time.ParseInLocation(l, text, time.UTC); err == nil {
				return strconv.FormatInt(t.UnixMilli(), 10), nil
			}
		}
		return "", fmt.Errorf("%q is not a time", text)
	}
	return "", fmt.Errorf("unknown kind %c", k)
}

// quotient returns num/den, each normalized as an exact decimal, rounded half to even to scale
// decimal places, normalized as normalize does a number ("null" when either is null).
func quotient(numv, denv *fastjson.Value, scale int) (string, error) {
	ns, err := normalize(numv, num)
	if err != nil {
		return "", err
	}
	ds, err := normalize(denv, num)
	if err != nil {
		return "", err
	}
	if ns == "null" || ds == "null" {
		return "null", nil
	}
	n, _ := new(big.Rat).SetString(ns)
	d, _ := new(big.Rat).SetString(ds)
	if d.Sign() == 0 {
		return "", fmt.Errorf("%s / 0", ns)
	}
	return roundHalfEven(n.Quo(n, d), scale).RatString(), nil
}

// roundHalfEven returns x rounded half to even to scale decimal places.
func roundHalfEven(x *big.Rat, scale int) *big.Rat {
	pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)
	n := new(big.Int).Mul(new(big.Int).Abs(x.Num()), pow)
	q, r := new(big.Int).QuoRem(n, x.Denom(), new(big.Int))
	switch r.Lsh(r, 1).Cmp(x.Denom()) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	if x.Sign() < 0 {
		q.Neg(q)
	}
	return new(big.Rat).SetFrac(q, pow)
}
