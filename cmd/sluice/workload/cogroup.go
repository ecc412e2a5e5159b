package workload

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
)

// The cogroup workload (FLIP-331's co-group): two topics of orders-shaped records over the same
// customers and partition count, "orders" and "refunds" (two Specs that differ only in their
// Seed), folded per customer into one balance:
//
//	{"key":"c-0000042","spent":123.45,"refunded":12.00,"orders":3,"refunds":1}
//
// CogroupPipeline computes it, ExpectedCogroup says what it must produce, ReadCogroup reads a
// run's balances back. Both maps hold two entries per customer, one per input (CogroupKey): the
// orders side (spent, orders) and the refunds side (refunded, refunds), each only when that
// input had a record of the customer, so Diff compares them exactly like the orders' totals.

// CogroupOperator is the name of CogroupPipeline's operator: its changelog topic is
// "<group>-balance-changelog".
const CogroupOperator = "balance"

// The sides of a balance, as CogroupKey names them.
const (
	SideOrders  = "orders"
	SideRefunds = "refunds"
)

// CogroupPipeline returns the sources, operators and sinks sections of a sluice config (YAML)
// that co-groups the orders on topic orders and the refunds on topic refunds per customer_id
// into sink: the sum and count of each input's amounts.
func CogroupPipeline(orders, refunds, sink string) string {
	return fmt.Sprintf(`sources:
  orders:  {topic: %s, format: json, key: customer_id, timestamp: ts}
  refunds: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    cogroup:
      inputs: [orders, refunds]
      fields:
        spent:    {sum: amount, from: orders}
        refunded: {sum: amount, from: refunds}
        orders:   {count: {}, from: orders}
        refunds:  {count: {}, from: refunds}
    output: balance_out
sinks:
  balance_out: {topic: %s, format: json}
`, orders, refunds, CogroupOperator, sink)
}

// CogroupKey is the key of one side (SideOrders or SideRefunds) of a customer's balance in the
// maps of ExpectedCogroup and ReadCogroup: "c-0000042|refunds".
func CogroupKey(key []byte, side string) string {
	return string(key) + "|" + side
}

// ExpectedCogroup returns the balances the orders of spec orders and the refunds of spec
// refunds add up to, keyed by CogroupKey: a customer's orders side is orders.Expected()'s
// total, its refunds side refunds.Expected()'s. The caller owns the map. It panics if a spec is
// invalid (see Validate).
func ExpectedCogroup(orders, refunds Spec) map[string]Total {
	out := make(map[string]Total)
	for k, t := range orders.Expected() {
		out[CogroupKey([]byte(k), SideOrders)] = t
	}
	for k, t := range refunds.Expected() {
		out[CogroupKey([]byte(k), SideRefunds)] = t
	}
	return out
}

// ReadCogroup reads a cogroup's output topic (read_committed, to its end, as ReadTotals does)
// and returns the last balance per customer, keyed by CogroupKey, and the number of customers.
// The customer is the record key, or the value's "key" field when the record has none; a
// tombstone deletes it. A side whose sum and count are both zero (or absent, or null: no record
// of that input yet) is left out, as ExpectedCogroup leaves it out. Amounts are parsed exactly
// into cents; a value that is not an object or holds a field that is not an exact number is an
// error naming its partition and offset.
func ReadCogroup(ctx context.Context, brokers []string, topic string) (map[string]Total, int, error) {
	last := make(map[string][2]Total)
	var parser fastjson.Parser
	err := readCommitted(ctx, brokers, topic, func(r *kgo.Record) error {
		return addBalance(last, &parser, r)
	})
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]Total, 2*len(last))
	for k, b := range last {
		if b[0] != (Total{}) {
			out[CogroupKey([]byte(k), SideOrders)] = b[0]
		}
		if b[1] != (Total{}) {
			out[CogroupKey([]byte(k), SideRefunds)] = b[1]
		}
	}
	return out, len(last), nil
}

// addBalance records r's balance in last: per customer, the orders and the refunds side.
func addBalance(last map[string][2]Total, p *fastjson.Parser, r *kgo.Record) error {
	at := func(err error) error {
		return fmt.Errorf("workload: %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if r.Value == nil {
		delete(last, string(r.Key))
		return nil
	}
	v, err := p.ParseBytes(r.Value)
	if err != nil {
		return at(err)
	}
	if v.Type() != fastjson.TypeObject {
		return at(fmt.Errorf("value is %s, want an object", v.Type()))
	}
	key := r.Key
	if len(key) == 0 {
		if key = v.GetStringBytes("key"); len(key) == 0 {
			return at(errors.New(`no record key and no "key" field`))
		}
	}
	var b [2]Total
	for _, f := range []struct {
		name  string
		scale int
		dst   *int64
	}{
		{"spent", 2, &b[0].SumCents}, {"orders", 0, &b[0].Count},
		{"refunded", 2, &b[1].SumCents}, {"refunds", 0, &b[1].Count},
	} {
		if x := v.Get(f.name); x == nil || x.Type() == fastjson.TypeNull {
			continue // no record of that input (yet): zero
		}
		n, err := decimalField(v, f.name, f.scale)
		if err != nil {
			return at(err)
		}
		*f.dst = n
	}
	last[string(key)] = b
	return nil
}
