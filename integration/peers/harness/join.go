package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// joinTable is the table's name in the join workload: sluice nests the joined row under it, and
// the other contenders do the same.
const joinTable = "customers"

// joined is the "join" workload (-workload join, issue 9, FLIP-326): the orders of spec in the
// orders topic and then, once every order is acknowledged, the customers table
// (spec.EachCustomer: one row per customer, keyed by customer_id) in a topic with the same
// partition count. Both are in Kafka before any contender starts. Every contender joins each
// order with its customer's row (stream-table inner join) and writes the order's JSON object
// with the row added under "customers", keyed by customer_id. A joined is a plain value, safe to
// copy and to share.
type joined struct {
	spec workload.Spec
	// rowsAfter timestamps the customer rows after every order (rowsTS) instead of with the
	// workload's StartTS, which is at or before every order's timestamp.
	rowsAfter bool
}

// rowsTS is the timestamp of the customer rows.
func (j joined) rowsTS() int64 {
	start := j.spec.StartTS
	if start == 0 {
		start = workload.DefaultStartTS
	}
	if !j.rowsAfter {
		return start
	}
	// Order i has ts in [start+i, start+i+MaxJitterMS): this is above every one.
	return start + j.spec.Records + workload.MaxJitterMS
}

// eachCustomer generates the customer rows with their timestamp (see rowsAfter).
func (j joined) eachCustomer(fn func(key, value []byte, ts int64) error) error {
	ts := j.rowsTS()
	return j.spec.EachCustomer(func(key, value []byte, _ int64) error { return fn(key, value, ts) })
}

// produce writes the orders to orders, waits until all are acknowledged, then writes the
// customer rows to customers: every row comes after every order in the log.
func (j joined) produce(ctx context.Context, cl *kgo.Client, orders, customers string) error {
	if err := workload.Produce(ctx, cl, orders, j.spec); err != nil {
		return err
	}
	return workload.ProduceEach(ctx, cl, customers, j.eachCustomer)
}

// customers returns the customer number of every order: element i is order i+1's.
func (j joined) customers() ([]int32, error) {
	cust := make([]int32, 0, j.spec.Records)
	err := j.spec.Each(func(key, _ []byte, _ int64) error {
		n := workload.CustomerOf(key)
		if n < 0 {
			return fmt.Errorf("join workload: unexpected key %q", key)
		}
		cust = append(cust, int32(n))
		return nil
	})
	return cust, err
}

// Per-order state of a joinCheck: the number of outputs seen (saturating) and whether one of
// them was wrong.
const (
	joinSeenMask = 0x7f
	joinWrong    = 0x80
)

// joinCheck checks a contender's join outputs: each order of the workload exactly once, as
// {"order_id":..,"customer_id":..,...,"customers":{"customer_id":..,"region":..,...}} keyed by
// its customer_id, with its own customer's row (the region of workload.Region). Not safe for
// concurrent use.
type joinCheck struct {
	spec  workload.Spec
	cust  []int32 // customer of order i+1 (shared, read only)
	state []uint8 // per order: outputs seen | joinWrong
	read  int64   // outputs read
	nBad  int64   // outputs that are no order of the workload
	bad   []string
}

func newJoinCheck(spec workload.Spec, cust []int32) *joinCheck {
	return &joinCheck{spec: spec, cust: cust, state: make([]uint8, len(cust))}
}

func (c *joinCheck) sample(format string, args ...any) {
	if len(c.bad) < 5 {
		c.bad = append(c.bad, fmt.Sprintf(format, args...))
	}
}

// orderID parses "o-000000001234" into 1234, or returns 0.
func orderID(s []byte) int64 {
	d, ok := bytes.CutPrefix(s, []byte("o-"))
	if !ok || len(d) == 0 || len(d) > 18 {
		return 0
	}
	var n int64
	for _, ch := range d {
		if ch < '0' || ch > '9' {
			return 0
		}
		n = n*10 + int64(ch-'0')
	}
	return n
}

// add checks one output record (partition and offset for messages only).
func (c *joinCheck) add(p *fastjson.Parser, key, value []byte, partition int32, offset int64) {
	c.read++
	at := func() string { return fmt.Sprintf("partition %d offset %d", partition, offset) }
	v, err := p.ParseBytes(value)
	if err != nil || v.Type() != fastjson.TypeObject {
		c.nBad++
		c.sample("%s: not a JSON object: %q", at(), value)
		return
	}
	id := orderID(v.GetStringBytes("order_id"))
	if id < 1 || id > int64(len(c.cust)) {
		c.nBad++
		c.sample("%s: no order of the workload: %s", at(), value)
		return
	}
	st := &c.state[id-1]
	if *st&joinSeenMask < joinSeenMask {
		*st++
	}
	if n := *st & joinSeenMask; n == 2 {
		c.sample("%s: order %d output again: %s", at(), id, value)
	}
	n := int(c.cust[id-1])
	want := c.spec.Key(n)
	wrong := func(format string, args ...any) {
		*st |= joinWrong
		c.sample("%s: order %d (customer %s): %s: %s", at(), id, want, fmt.Sprintf(format, args...), value)
	}
	cid := v.GetStringBytes("customer_id")
	row := v.Get(joinTable)
	switch {
	case !bytes.Equal(cid, want):
		wrong("customer_id %q", cid)
	case !bytes.Equal(key, want):
		wrong("record key %q", key)
	case row == nil || row.Type() != fastjson.TypeObject:
		wrong("no %q row", joinTable)
	case !bytes.Equal(row.GetStringBytes("customer_id"), want):
		wrong("the row's customer_id is %q", row.GetStringBytes("customer_id"))
	case string(row.GetStringBytes("region")) != workload.Region(n):
		wrong("region %q, want %q", row.GetStringBytes("region"), workload.Region(n))
	}
}

// joinCounts sums up a joinCheck. An order is joined when it has exactly one output and that
// output is right; every other order is missing (no output), wrong (an output with a wrong or
// absent row) or duplicated (several outputs), or both of the last two.
type joinCounts struct {
	expected, joined, missing, wrong, duplicated, bad, outputs int64
}

func (c *joinCheck) counts() joinCounts {
	k := joinCounts{expected: int64(len(c.cust)), bad: c.nBad, outputs: c.read}
	for _, st := range c.state {
		n := st & joinSeenMask
		switch {
		case n == 0:
			k.missing++
		case n == 1 && st&joinWrong == 0:
			k.joined++
		}
		if st&joinWrong != 0 {
			k.wrong++
		}
		if n > 1 {
			k.duplicated++
		}
	}
	return k
}

// onlyMissing reports whether every difference is an order without output: what a stream-table
// inner join gives for orders it processed before their customer's row.
func (k joinCounts) onlyMissing() bool {
	return k.wrong == 0 && k.duplicated == 0 && k.bad == 0
}

// complete reports whether every order was joined exactly once, right.
func (k joinCounts) complete() bool { return k.joined == k.expected && k.bad == 0 }

func (k joinCounts) String() string {
	return fmt.Sprintf("%d of %d orders joined right (%d outputs): %d missing, %d wrong, %d duplicated, %d other bad outputs",
		k.joined, k.expected, k.outputs, k.missing, k.wrong, k.duplicated, k.bad)
}

// diff returns the differences (at most max lines, the first one the counts), none when every
// order was joined right.
func (c *joinCheck) diff(max int) []string {
	k := c.counts()
	if k.complete() {
		return nil
	}
	out := []string{k.String()}
	out = append(out, c.bad...)
	var missing []string
	for i, st := range c.state {
		if st&joinSeenMask == 0 {
			if len(missing) == 3 {
				missing = append(missing, "...")
				break
			}
			missing = append(missing, fmt.Sprintf("o-%012d (%s)", i+1, c.spec.Key(int(c.cust[i]))))
		}
	}
	if len(missing) > 0 {
		out = append(out, "missing: "+strings.Join(missing, ", "))
	}
	if len(out) > max {
		out = append(out[:max-1], fmt.Sprintf("... and %d more", len(out)-max+1))
	}
	return out
}

// readJoin reads topic's join outputs with read_committed into a new check.
func readJoin(ctx context.Context, seeds []string, topic string, spec workload.Spec, cust []int32) (*joinCheck, error) {
	c := newJoinCheck(spec, cust)
	var p fastjson.Parser
	if err := readTopic(ctx, seeds, topic, func(r *kgo.Record) { c.add(&p, r.Key, r.Value, r.Partition, r.Offset) }); err != nil {
		return nil, err
	}
	return c, nil
}

// verifyJoin reads the join outputs of topic, again every second while the only differences are
// missing orders and the number of outputs still grows (for at most 15 s). grown is when the
// last read that saw more outputs than the one before began (the zero time if none did): the
// output count stopped growing then.
func (h *harness) verifyJoin(ctx context.Context, topic string) (c *joinCheck, grown time.Time, err error) {
	deadline := time.Now().Add(15 * time.Second)
	prev := int64(-1)
	for {
		began := time.Now()
		c, err = readJoin(ctx, h.seeds, topic, h.spec, h.joinCust)
		if err != nil {
			return nil, time.Time{}, err
		}
		k := c.counts()
		if prev >= 0 && k.outputs > prev {
			grown = began
		}
		if k.complete() || !k.onlyMissing() || k.outputs == prev || time.Now().After(deadline) {
			return c, grown, nil
		}
		prev = k.outputs
		if err := pause(ctx, time.Second); err != nil {
			return nil, time.Time{}, err
		}
	}
}

// joinPipeline is the sluice pipeline of the join workload: the orders joined (inner) with the
// customers table, the row nested under the table's name, written to sink.
func joinPipeline(orders, customers, sink string) string {
	return fmt.Sprintf(`tables:
  %s: {topic: %s, format: json, key: customer_id}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
operators:
  - name: enriched
    join: {stream: orders, table: %s, type: inner}
    output: enriched_out
sinks:
  enriched_out: {topic: %s}
`, joinTable, customers, orders, joinTable, sink)
}

// joinStatus is a join result's status: "ok" when every order was joined right, "missed joins"
// when the only difference is orders without output (the measured behaviour of a join that
// does not wait for its table), "DISAGREES" otherwise.
func joinStatus(k joinCounts) string {
	switch {
	case k.complete():
		return "ok"
	case k.onlyMissing():
		return statusMissed
	default:
		return "DISAGREES"
	}
}

// statusMissed is the status of a join contender whose only fault is orders it did not join.
const statusMissed = "missed joins"
