package workload

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
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

// Joined is what a join's output topic held, as VerifyJoined read it.
type Joined struct {
	Orders     int64 // orders read (each expected one counts once)
	Duplicates int64 // records of an order already read
	WrongRow   int64 // orders whose row is missing (null) or is another customer's or region's
	Missing    int64 // orders of the spec not read (inner join: they found no row)
	Extra      int64 // orders read that the spec does not have
}

// OK reports whether every order of the spec was read exactly once with its customer's row.
func (j Joined) OK() bool {
	return j.Duplicates == 0 && j.WrongRow == 0 && j.Missing == 0 && j.Extra == 0
}

func (j Joined) String() string {
	return fmt.Sprintf("%d orders joined, %d duplicates, %d with a wrong or null row, %d missing, %d not in the workload",
		j.Orders, j.Duplicates, j.WrongRow, j.Missing, j.Extra)
}

// VerifyJoined reads a stream-table join's output topic (read_committed, to its end, as
// ReadTotals does) and checks it against the orders of specs joined with the customers table
// under the member table: each order exactly once, carrying its customer's row (its
// customer_id and Region). Order ids restart at 1 in each spec, so an id is expected once per
// spec that has it.
func VerifyJoined(ctx context.Context, brokers []string, topic, table string, specs ...Spec) (Joined, error) {
	return VerifyJoinedCopies(ctx, brokers, topic, table, nil, specs...)
}

// VerifyJoinedCopies is VerifyJoined for an input that holds some orders of specs twice (a
// producer's resend across a leader change): copies has the order id of each extra copy, and
// each is expected once more in the output.
func VerifyJoinedCopies(ctx context.Context, brokers []string, topic, table string, copies []string, specs ...Spec) (Joined, error) {
	var most int64
	for _, s := range specs {
		most = max(most, s.Records)
	}
	want := make([]int32, most)
	for _, s := range specs {
		for i := range s.Records {
			want[i]++
		}
	}
	for _, id := range copies {
		n, err := strconv.ParseInt(strings.TrimPrefix(id, "o-"), 10, 64)
		if err != nil || n < 1 || n > most {
			return Joined{}, fmt.Errorf("workload: copied order id %q is not one of the specs'", id)
		}
		want[n-1]++
	}
	got := make([]int32, most)
	var (
		j      Joined
		parser fastjson.Parser
	)
	err := readCommitted(ctx, brokers, topic, func(r *kgo.Record) error {
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			return fmt.Errorf("workload: %s[%d]@%d: %w", topic, r.Partition, r.Offset, err)
		}
		id := string(v.GetStringBytes("order_id"))
		n, err := strconv.ParseInt(strings.TrimPrefix(id, "o-"), 10, 64)
		if err != nil || n < 1 || n > most {
			j.Extra++
			return nil
		}
		if got[n-1] >= want[n-1] {
			j.Duplicates++
			return nil
		}
		got[n-1]++
		j.Orders++
		cust := v.GetStringBytes("customer_id")
		c := CustomerOf(cust)
		row := v.Get(table)
		if c < 0 || row == nil || string(row.GetStringBytes("customer_id")) != string(cust) || string(row.GetStringBytes("region")) != Region(c) {
			j.WrongRow++
		}
		return nil
	})
	if err != nil {
		return j, err
	}
	for i := range want {
		j.Missing += int64(want[i] - got[i])
	}
	return j, nil
}

// JoinTable is the table's name in JoinPipeline: the joined row is nested under it, so
// VerifyJoined reads a JoinPipeline's output with table JoinTable.
const JoinTable = "customers"

// JoinPipeline returns the tables, sources, operators and sinks sections of a sluice config
// (YAML) that joins the orders on topic orders with the customers table on topic customers
// (inner, as_of processing: each order waits for its task's table snapshot) and writes each
// joined order to sink: what VerifyJoined(..., sink, JoinTable, spec) checks. The chain is
// stateless (no changelog).
func JoinPipeline(orders, customers, sink string) string {
	return fmt.Sprintf(`tables:
  %[1]s: {topic: %[2]s, format: json, key: customer_id}
sources:
  orders: {topic: %[3]s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: enriched
    join: {stream: orders, table: %[1]s, type: inner}
    output: enriched_out
sinks:
  enriched_out: {topic: %[4]s, format: json}
`, JoinTable, customers, orders, sink)
}
