package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

func testJoined() joined {
	return joined{spec: workload.Spec{Records: 3000, Keys: 40, Partitions: 4, Seed: 3}}
}

// TestJoinedRows checks the customer rows' timestamps (at the start, or after every order) and
// the customer of every order.
func TestJoinedRows(t *testing.T) {
	j := testJoined()
	var maxTS int64
	var keys [][]byte
	if err := j.spec.Each(func(key, _ []byte, ts int64) error {
		maxTS = max(maxTS, ts)
		keys = append(keys, bytes.Clone(key))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []bool{false, true} {
		j.rowsAfter = after
		rows := 0
		err := j.eachCustomer(func(key, value []byte, ts int64) error {
			rows++
			if ts != j.rowsTS() {
				return fmt.Errorf("row %s: ts %d, want %d", key, ts, j.rowsTS())
			}
			if after != (ts > maxTS) || (!after && ts != workload.DefaultStartTS) {
				return fmt.Errorf("rowsAfter %v: row ts %d, last order ts %d", after, ts, maxTS)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if rows != j.spec.Keys {
			t.Errorf("%d rows, want %d", rows, j.spec.Keys)
		}
	}
	cust, err := j.customers()
	if err != nil {
		t.Fatal(err)
	}
	if len(cust) != len(keys) {
		t.Fatalf("%d customers for %d orders", len(cust), len(keys))
	}
	for i, k := range keys {
		if got := j.spec.Key(int(cust[i])); !bytes.Equal(got, k) {
			t.Fatalf("order %d: customer %s, want %s", i+1, got, k)
		}
	}
}

// joinOutputs renders what a right join writes for every order of j: key and value.
func joinOutputs(t *testing.T, j joined) (keys, values [][]byte) {
	t.Helper()
	rows := map[string][]byte{}
	if err := j.spec.EachCustomer(func(key, value []byte, _ int64) error {
		rows[string(key)] = bytes.Clone(value)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := j.spec.Each(func(key, value []byte, _ int64) error {
		v := append(bytes.Clone(value[:len(value)-1]), `,"customers":`...)
		v = append(append(v, rows[string(key)]...), '}')
		keys = append(keys, bytes.Clone(key))
		values = append(values, v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys, values
}

// TestJoinCheck feeds outputs to the join check: the right outputs pass; missing orders are
// "missed joins"; a wrong or absent row, a wrong key or customer, a duplicate and an output of no
// order are disagreements.
func TestJoinCheck(t *testing.T) {
	j := testJoined()
	cust, err := j.customers()
	if err != nil {
		t.Fatal(err)
	}
	keys, values := joinOutputs(t, j)
	check := func(skip map[int]bool, edit func(i int, key, value []byte) ([]byte, []byte), extra ...string) *joinCheck {
		c := newJoinCheck(j.spec, cust)
		var p fastjson.Parser
		for i := range values {
			if skip[i] {
				continue
			}
			k, v := keys[i], values[i]
			if edit != nil {
				k, v = edit(i, k, v)
			}
			c.add(&p, k, v, 0, int64(i))
		}
		for _, v := range extra {
			c.add(&p, []byte("c-0000001"), []byte(v), 1, 0)
		}
		return c
	}

	c := check(nil, nil)
	if k := c.counts(); !k.complete() || k.joined != j.spec.Records || joinStatus(k) != "ok" || len(c.diff(10)) != 0 {
		t.Fatalf("right outputs: %s, diff %v", k, c.diff(10))
	}

	c = check(map[int]bool{0: true, 7: true}, nil)
	k := c.counts()
	if k.missing != 2 || k.joined != j.spec.Records-2 || !k.onlyMissing() || joinStatus(k) != statusMissed {
		t.Fatalf("two missing: %s", k)
	}
	if d := c.diff(10); len(d) < 2 || !strings.Contains(d[len(d)-1], "o-000000000001") || !strings.Contains(d[len(d)-1], "o-000000000008") {
		t.Errorf("two missing: diff %v", d)
	}
	c = check(map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true}, nil)
	if d := c.diff(10); !strings.HasSuffix(d[len(d)-1], "...") {
		t.Errorf("five missing: diff %v, want the first three and ...", d)
	}

	// The row of customer n+1 (another region) for the first order.
	other := j.spec.Key(int(cust[0]) + 1)
	otherRow := fmt.Sprintf(`{"customer_id":%q,"region":%q,"tier":"gold"}`, other, workload.Region(int(cust[0])+1))
	first := func(f func(key, value []byte) ([]byte, []byte)) func(i int, key, value []byte) ([]byte, []byte) {
		return func(i int, key, value []byte) ([]byte, []byte) {
			if i != 0 {
				return key, value
			}
			return f(key, value)
		}
	}
	replaceRow := func(row string) func(key, value []byte) ([]byte, []byte) {
		return func(key, value []byte) ([]byte, []byte) {
			at := bytes.Index(value, []byte(`,"customers":`))
			v := append(bytes.Clone(value[:at]), row...)
			return key, append(v, '}')
		}
	}
	for name, edit := range map[string]func(i int, key, value []byte) ([]byte, []byte){
		"another customer's row": first(replaceRow(`,"customers":` + otherRow)),
		"wrong region": first(func(key, value []byte) ([]byte, []byte) {
			return key, bytes.Replace(value, []byte(`"region":"`+workload.Region(int(cust[0]))), []byte(`"region":"r-99`), 1)
		}),
		"no row":        first(replaceRow("")),
		"null row":      first(replaceRow(`,"customers":null`)),
		"row elsewhere": first(replaceRow(`,"customer":` + otherRow)),
		"wrong key": first(func(key, value []byte) ([]byte, []byte) {
			return other, value
		}),
		"wrong customer_id": first(func(key, value []byte) ([]byte, []byte) {
			return key, bytes.Replace(value, []byte(`"customer_id":"`+string(key)+`","amount"`), []byte(`"customer_id":"`+string(other)+`","amount"`), 1)
		}),
	} {
		c := check(nil, edit)
		k := c.counts()
		if k.wrong != 1 || k.joined != j.spec.Records-1 || joinStatus(k) != "DISAGREES" {
			t.Errorf("%s: %s, status %s; want one wrong order, DISAGREES", name, k, joinStatus(k))
		}
		if d := c.diff(10); len(d) < 2 || !strings.Contains(d[1], "o-000000000001") && !strings.Contains(d[1], "order 1 ") {
			t.Errorf("%s: diff %v, want the order named", name, d)
		}
	}

	c = check(nil, nil, string(values[5]))
	if k := c.counts(); k.duplicated != 1 || k.joined != j.spec.Records-1 || joinStatus(k) != "DISAGREES" {
		t.Errorf("duplicate: %s", k)
	}
	for name, v := range map[string]string{
		"not JSON":     `{"order_id":`,
		"not object":   `[1]`,
		"no order id":  `{"customer_id":"c-0000001"}`,
		"order beyond": fmt.Sprintf(`{"order_id":"o-%012d","customer_id":"c-0000001"}`, j.spec.Records+1),
		"order zero":   `{"order_id":"o-000000000000","customer_id":"c-0000001"}`,
	} {
		c := check(nil, nil, v)
		if k := c.counts(); k.bad != 1 || k.joined != j.spec.Records || joinStatus(k) != "DISAGREES" {
			t.Errorf("%s: %s, status %s", name, k, joinStatus(k))
		}
	}
}

func TestJoinResultPasses(t *testing.T) {
	for _, c := range []struct {
		name, status string
		timed, pass  bool
	}{
		{"kstreams", "ok", true, true},
		{"kstreams", statusMissed, true, true},
		{"sluice-auto", statusMissed, true, false},
		{"sluice-auto", "ok", true, true},
		{"kstreams", "DISAGREES", false, false},
		{"sluice-auto", "failed: exited", false, false},
	} {
		r := &result{name: c.name, status: c.status}
		if r.timed() != c.timed || r.passed() != c.pass {
			t.Errorf("%s %q: timed %v passed %v, want %v %v", c.name, c.status, r.timed(), r.passed(), c.timed, c.pass)
		}
	}
}

func TestParseFlagsJoin(t *testing.T) {
	c, err := parseFlags([]string{"-brokers", "127.0.0.1:19092", "-smoke", "-workload", "join"})
	if err != nil {
		t.Fatal(err)
	}
	if c.latency || c.tableTopic != "customers" || c.rowsAfter || c.ksIdleMS != 10_000 || c.records != 20_000 || c.keys != 1_000 {
		t.Fatalf("join defaults: %+v", c)
	}
	c, err = parseFlags([]string{"-brokers", "127.0.0.1:19092", "-workload", "join", "-customers-ts", "after"})
	if err != nil || !c.rowsAfter {
		t.Fatalf("-customers-ts after: %v, %+v", err, c)
	}
	for _, args := range [][]string{
		{"-brokers", "127.0.0.1:19092", "-workload", "join", "-latency=true"},
		{"-brokers", "127.0.0.1:19092", "-workload", "join", "-customers-ts", "now"},
		{"-brokers", "127.0.0.1:19092", "-workload", "join", "-table-topic", "orders"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

// TestSluiceConfigJoin checks the join contract of the sluice config.
func TestSluiceConfigJoin(t *testing.T) {
	c := &config{brokers: "127.0.0.1:1", sortMemory: "256MiB", workload: "join"}
	y := sluiceConfig(c, launch{in: "orders", table: "cust", out: "g-out", group: "g"}, "auto", "/tmp/s", 9464)
	for _, want := range []string{
		"tables:\n  customers: {topic: cust, format: json, key: customer_id}\n",
		"sources:\n  orders: {topic: orders, key: customer_id, timestamp: ts}\n",
		"join: {stream: orders, table: customers, type: inner}", "output: enriched_out",
		"enriched_out: {topic: g-out}", "mode: auto}",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("config lacks %q:\n%s", want, y)
		}
	}
}
