package workload

import (
	"strconv"
)

// Regions is the number of regions customers are spread over in the join workload.
const Regions = 16

// The join workload (issue 9, FLIP-326) adds a table to the orders: one row per customer,
//
//	{"customer_id":"c-0000042","region":"r-10","tier":"gold"}
//
// keyed by its customer_id (record key), in a topic with the orders' partition count, so both
// are co-partitioned. Customer n lives in region n mod Regions (RegionOf). A stream-table join
// of the orders with this table gives every order its customer's row; an aggregate of the
// joined orders by region adds up to RegionTotals.

// Region returns the region name of customer n ("r-07").
func Region(n int) string {
	return "r-" + string(appendPadded(nil, uint64(n%Regions), 2))
}

var tiers = [...]string{"bronze", "silver", "gold"}

// EachCustomer calls fn for every customer row of s in customer order (s.Keys rows; Records is
// ignored). key and value are reused between calls: fn must copy them to keep them. ts is the
// row's timestamp (s.StartTS, or DefaultStartTS). It allocates nothing per row.
func (s Spec) EachCustomer(fn func(key, value []byte, ts int64) error) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ts := s.StartTS
	if ts == 0 {
		ts = DefaultStartTS
	}
	digits := s.keyDigits()
	key := make([]byte, 0, 2+digits)
	value := make([]byte, 0, 96)
	for n := range s.Keys {
		key = appendKey(key[:0], n, digits)
		value = append(value[:0], `{"customer_id":"`...)
		value = append(value, key...)
		value = append(value, `","region":"r-`...)
		value = appendPadded(value, uint64(n%Regions), 2)
		value = append(value, `","tier":"`...)
		value = append(value, tiers[n%len(tiers)]...)
		value = append(value, `"}`...)
		if err := fn(key, value, ts); err != nil {
			return err
		}
	}
	return nil
}

// CustomerOf returns the customer number of a key made by Key ("c-0000042" → 42), or -1.
func CustomerOf(key []byte) int {
	if len(key) < 3 || key[0] != 'c' || key[1] != '-' {
		return -1
	}
	n, err := strconv.Atoi(string(key[2:]))
	if err != nil {
		return -1
	}
	return n
}

// RegionTotals returns what the orders of s add up to per region (Region of their customer):
// the totals an aggregate of the joined orders grouped by customers.region must produce. It
// panics if s is invalid (see Validate).
func (s Spec) RegionTotals() map[string]Total {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	sums := make([]Total, Regions)
	g := s.generator()
	for range s.Records {
		o := g.order()
		sums[o.customer%Regions].SumCents += o.cents
		sums[o.customer%Regions].Count++
	}
	out := map[string]Total{}
	for r, t := range sums {
		if t.Count > 0 {
			out[Region(r)] = t
		}
	}
	return out
}
