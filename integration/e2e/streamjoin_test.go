package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestStreamJoinExactlyOnceKill9 joins orders with their payments within 10 s of event time
// (a left join: orders without a payment come out with null once their window closed) on the
// real broker, with a kill -9 during the backlog and one in real time; the committed output
// must be exactly the oracle's pairs and unmatched orders, each once.
func TestStreamJoinExactlyOnceKill9(t *testing.T) {
	streamJoinScenario(t, kafkatest.Brokers(t), 60_000, "")
}

// TestStreamJoinExactlyOnceKill9Fake is the scenario on kfake.
func TestStreamJoinExactlyOnceKill9Fake(t *testing.T) {
	streamJoinScenario(t, kafkatest.Fake(t, 8), 20_000, "")
}

// TestStreamJoinBacklogCheckpointsKill9 is the scenario with backlog checkpoints every 30 ms:
// the join replays its backlog so far at each and emits those pairs, and the first kill -9
// comes after one committed. Each pair and unmatched order is still in the output once. (On
// kfake a backlog of this size is read and folded before a checkpoint comes.)
func TestStreamJoinBacklogCheckpointsKill9(t *testing.T) {
	streamJoinScenario(t, kafkatest.Brokers(t), 200_000, "30ms")
}

type sjEvent struct {
	key, value string
	ts         int64
}

func streamJoinScenario(t *testing.T, brokers string, n int, every string) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	const parts = 4
	const within = 10_000 // ms
	p, payments := twoInputPipeline(t, brokers, parts, "payments", "paid", "", func(orders, payments, sink string) string {
		return fmt.Sprintf(`sources:
  orders: {topic: %s, key: customer_id, timestamp: ts}
  payments: {topic: %s, key: customer_id, timestamp: ts}
operators:
  - name: paid
    join: {left: orders, right: payments, within: 10s, type: left}
    output: out
sinks:
  out: {topic: %s}
`, orders, payments, sink)
	})
	if every != "" {
		b, err := os.ReadFile(p.cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), "mode: auto}", "mode: auto, checkpoint_interval: "+every+"}", 1))
		// Small fetches: the backlog takes many batches, so backlog checkpoints come before the
		// kill whatever order the two inputs' first fetches arrive in (with 32 MiB fetches on a
		// loaded machine, one input's backlog could go in two batches, the operator leaving
		// backlog between its inputs' first batches before any checkpoint was due).
		b = []byte(strings.Replace(string(b), "kafka:\n", "kafka:\n  fetch_max_bytes: 1MiB\n", 1))
		if err := os.WriteFile(p.cfgPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Orders one second apart in event time (in order); 80% get a payment 0-5 s later. Each
	// order's key is its customer; customers repeat.
	rng := rand.New(rand.NewPCG(61, 62))
	base := workload.DefaultStartTS
	var orders, pays []sjEvent
	for i := range n {
		key := fmt.Sprintf("c-%04d", rng.IntN(500))
		ts := base + int64(i)*1000
		orders = append(orders, sjEvent{key, fmt.Sprintf(`{"order_id":%d,"customer_id":%q,"ts":%d}`, i, key, ts), ts})
		if rng.IntN(5) > 0 {
			pts := ts + rng.Int64N(5000)
			pays = append(pays, sjEvent{key, fmt.Sprintf(`{"payment_id":%d,"customer_id":%q,"ts":%d}`, i, key, pts), pts})
		}
	}
	sort.SliceStable(pays, func(i, j int) bool { return pays[i].ts < pays[j].ts })
	produce := func(topic string, evs []sjEvent) {
		t.Helper()
		cl := kafkatest.Client(t, brokers, workload.ProducerOpts()...)
		for _, e := range evs {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(e.key), Value: []byte(e.value), Timestamp: time.UnixMilli(e.ts)}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	half := len(orders) / 2
	produce(p.topic, orders[:half])
	produce(payments, pays[:len(pays)/2])
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true)}
	ins[0].start()
	poll(ctx, t, "i0 to sort a backlog", 5*time.Millisecond, func() (bool, error) {
		ins[0].checkAlive()
		return len(ins[0].logLines(ins[0].runs, "switch to backlog mode"))+len(ins[0].logLines(ins[0].runs, "task starts in backlog mode")) > 0, nil
	})
	if every != "" {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		defer pcancel()
		poll(pctx, t, "i0 to commit a backlog checkpoint", time.Millisecond, func() (bool, error) {
			ins[0].checkAlive()
			return len(ins[0].logLines(ins[0].runs, "backlog checkpoint")) > 0, nil
		})
	} else {
		time.Sleep(20 * time.Millisecond)
	}
	ins[0].kill()
	t.Log("kill -9 during the backlog")
	for _, in := range ins {
		in.start()
	}
	produce(p.topic, orders[half:])
	produce(payments, pays[len(pays)/2:])
	wait := func() { p.waitInputsCommitted(ctx, 90*time.Second, ins, p.topic, payments) }
	wait()
	ins[1].kill()
	t.Log("kill -9 in real time")
	ins[1].start()
	wait()
	for _, in := range ins {
		in.term()
	}
	p.checkTransactions(ctx, "i0", "i1")

	// The oracle: inputs in order per partition, no record is late (orders are in order,
	// payments are produced sorted by time); the operator's final watermark is the smaller of
	// the inputs' per partition, so only orders whose window closed there come out unmatched.
	want := map[string]int{}
	finalWM := map[int32][2]int64{}
	for side, evs := range [][]sjEvent{orders, pays} {
		for _, e := range evs {
			part := workload.Partition([]byte(e.key), parts)
			w := finalWM[part]
			w[side] = max(w[side], e.ts)
			finalWM[part] = w
		}
	}
	byKey := map[string][]sjEvent{}
	for _, e := range pays {
		byKey[e.key] = append(byKey[e.key], e)
	}
	for _, o := range orders {
		matched := false
		for _, py := range byKey[o.key] {
			if d := py.ts - o.ts; d >= -within && d <= within {
				want[o.key+" "+fmt.Sprintf(`{"orders":%s,"payments":%s}`, o.value, py.value)]++
				matched = true
			}
		}
		w := finalWM[workload.Partition([]byte(o.key), parts)]
		if !matched && o.ts+2*within+1 <= min(w[0], w[1]) {
			want[o.key+" "+fmt.Sprintf(`{"orders":%s,"payments":null}`, o.value)]++
		}
	}
	got := map[string]int{}
	if err := readAll(ctx, brokers, p.sink, func(r *kgo.Record) { got[string(r.Key)+" "+string(r.Value)]++ }); err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for k, n := range want {
		if got[k] != n {
			diffs = append(diffs, fmt.Sprintf("%dx (want %d) %s", got[k], n, k))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%dx (want 0) %s", n, k))
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%d output lines differ from the oracle's %d (first 10):\n%s", len(diffs), len(want), strings.Join(diffs[:min(10, len(diffs))], "\n"))
	}
	t.Logf("%d pairs and unmatched orders, each exactly once", len(want))
}

// readAll reads topic read_committed from start to end.
func readAll(ctx context.Context, brokers, topic string, fn func(*kgo.Record)) error {
	return workload.ReadEach(ctx, kafkatest.SplitBrokers(brokers), topic, func(r *kgo.Record) error { fn(r); return nil })
}
