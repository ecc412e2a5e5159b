package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestAsOfJoinExactlyOnceKill9 joins orders with the version of their customer's row valid at
// the order's event time (the customers topic holds versions, with tombstones), on the real
// broker, with a kill -9 during the backlog and one in real time; the committed output must be
// the oracle's, each order once.
func TestAsOfJoinExactlyOnceKill9(t *testing.T) {
	asofScenario(t, kafkatest.Brokers(t), 40_000)
}

// TestAsOfJoinExactlyOnceKill9Fake is the scenario on kfake.
func TestAsOfJoinExactlyOnceKill9Fake(t *testing.T) {
	asofScenario(t, kafkatest.Fake(t, 8), 15_000)
}

func asofScenario(t *testing.T, brokers string, n int) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	const parts = 4
	p, customers := twoInputPipeline(t, brokers, parts, "customers", "enriched", "", func(orders, customers, sink string) string {
		return fmt.Sprintf(`sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
tables:
  customers: {topic: %s, key: customer_id, timestamp: updated_at, versions: 1h}
operators:
  - name: enriched
    join: {stream: orders, table: customers, as_of: event_time, type: left}
    output: out
sinks:
  out: {topic: %s}
`, orders, customers, sink)
	})
	// Orders one per 100 ms of event time; customer versions (a quarter of them tombstones)
	// one per 300 ms, both in time order, so nothing is late.
	type ev struct {
		key, value string
		ts         int64
		tomb       bool
	}
	rng := rand.New(rand.NewPCG(71, 72))
	base := workload.DefaultStartTS
	var orders, vers []ev
	for i := range n {
		key := fmt.Sprintf("c-%03d", rng.IntN(200))
		ts := base + int64(i)*100
		orders = append(orders, ev{key: key, ts: ts, value: fmt.Sprintf(`{"order_id":%d,"customer_id":%q,"ts":%d}`, i, key, ts)})
		if i%3 == 0 {
			vk := fmt.Sprintf("c-%03d", rng.IntN(200))
			if rng.IntN(4) == 0 {
				vers = append(vers, ev{key: vk, ts: ts, tomb: true})
			} else {
				vers = append(vers, ev{key: vk, ts: ts, value: fmt.Sprintf(`{"customer_id":%q,"tier":"t-%d","updated_at":%d}`, vk, i, ts)})
			}
		}
	}
	produce := func(topic string, evs []ev) {
		t.Helper()
		cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
		for _, e := range evs {
			r := &kgo.Record{Topic: topic, Key: []byte(e.key), Timestamp: time.UnixMilli(e.ts)}
			if !e.tomb {
				r.Value = []byte(e.value)
			}
			cl.Produce(ctx, r, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce(customers, vers[:len(vers)/2])
	produce(p.topic, orders[:len(orders)/2])
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true)}
	ins[0].start()
	poll(ctx, t, "i0 to sort a backlog", 5*time.Millisecond, func() (bool, error) {
		ins[0].checkAlive()
		return len(ins[0].logLines(ins[0].runs, "switch to backlog mode"))+len(ins[0].logLines(ins[0].runs, "task starts in backlog mode")) > 0, nil
	})
	time.Sleep(20 * time.Millisecond)
	ins[0].kill()
	t.Log("kill -9 during the backlog")
	for _, in := range ins {
		in.start()
	}
	produce(customers, vers[len(vers)/2:])
	produce(p.topic, orders[len(orders)/2:])
	wait := func() { p.waitInputsCommitted(ctx, 90*time.Second, ins, p.topic, customers) }
	wait()
	ins[1].kill()
	t.Log("kill -9 in real time")
	ins[1].start()
	wait()
	for _, in := range ins {
		in.term()
	}
	p.checkTransactions(ctx, "i0", "i1")

	// The oracle, per partition: an order is out once the smaller of the two inputs' last
	// times there has passed it, with the last version at or before it (null: none or a
	// tombstone).
	last := map[int32][2]int64{}
	for side, evs := range [][]ev{orders, vers} {
		for _, e := range evs {
			part := workload.Partition([]byte(e.key), parts)
			l := last[part]
			l[side] = max(l[side], e.ts)
			last[part] = l
		}
	}
	byKey := map[string][]ev{}
	for _, v := range vers {
		byKey[v.key] = append(byKey[v.key], v)
	}
	var want []string
	for _, o := range orders {
		l := last[workload.Partition([]byte(o.key), parts)]
		if min(l[0], l[1]) <= o.ts {
			continue // still held at the end
		}
		row := "null"
		for _, v := range byKey[o.key] {
			if v.ts <= o.ts {
				row = v.value
				if v.tomb {
					row = "null"
				}
			}
		}
		want = append(want, o.key+" "+o.value[:len(o.value)-1]+`,"customers":`+row+`}`)
	}
	var got []string
	if err := readAll(ctx, brokers, p.sink, func(r *kgo.Record) { got = append(got, string(r.Key)+" "+string(r.Value)) }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		var diffs []string
		count := map[string]int{}
		for _, l := range want {
			count[l]++
		}
		for _, l := range got {
			count[l]--
		}
		for l, c := range count {
			if c != 0 {
				diffs = append(diffs, fmt.Sprintf("%+d %s", -c, l))
			}
		}
		sort.Strings(diffs)
		t.Fatalf("%d got, %d want; differences (got - want, first 10):\n%s", len(got), len(want), strings.Join(diffs[:min(10, len(diffs))], "\n"))
	}
	t.Logf("%d orders joined as of their event time, each exactly once", len(want))
}
