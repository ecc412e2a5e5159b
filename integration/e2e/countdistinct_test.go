package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestCountDistinctKill9 runs an aggregate with filtered fields (where), count_distinct and a
// max over strings on the real broker, in every backlog mode, with two instances (a backlog,
// then live orders) and kills: per product, the orders, those under 30, the distinct customers,
// the distinct customers who bought under 30, and the largest customer id. count_distinct runs
// as the operators the config writes out (a distinct per (product, customer), rekeys, a
// cogroup), three transactional hops. The latest row per product must be the oracle's, computed
// here from the orders, and no order may be a dead letter.
func TestCountDistinctKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, mode := range []string{"auto", "never", "always"} {
		t.Run(mode, func(t *testing.T) { countDistinctScenario(t, brokers, mode, 40_000, true, "") })
	}
}

// TestCountDistinctFake is TestCountDistinctKill9 against kfake, smaller, in every mode, the
// kills in mode auto only.
func TestCountDistinctFake(t *testing.T) {
	for _, mode := range []string{"auto", "never", "always"} {
		t.Run(mode, func(t *testing.T) {
			countDistinctScenario(t, kafkatest.Fake(t, countDistinctParts), mode, 10_000, mode == "auto", "")
		})
	}
}

// TestCountDistinctWindowsKill9 is the scenario over windows of 5 s (emit: final), tumbling and
// hopping every second, in mode auto with kills, on the real broker: each (product, window)
// final exactly once, with the oracle's counts for that window alone. The distincts mark firsts
// per window and write them once per window at its end - 1, which the cogroup puts back into
// that window alone (window_finals); after the orders, one per partition far ahead in event
// time closes every window.
func TestCountDistinctWindowsKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, window := range []string{"tumbling", "hopping"} {
		t.Run(window, func(t *testing.T) { countDistinctScenario(t, brokers, "auto", 40_000, true, window) })
	}
}

// TestCountDistinctWindowsFake is TestCountDistinctWindowsKill9 against kfake, smaller, in every
// mode, the kills in mode auto only.
func TestCountDistinctWindowsFake(t *testing.T) {
	for _, mode := range []string{"auto", "never", "always"} {
		for _, window := range []string{"tumbling", "hopping"} {
			t.Run(mode+"/"+window, func(t *testing.T) {
				countDistinctScenario(t, kafkatest.Fake(t, countDistinctParts), mode, 10_000, mode == "auto", window)
			})
		}
	}
}

// The windows of the windowed scenarios (tumbling, or hopping by countDistinctAdvanceMS); the
// orders are 1 ms apart in event time.
const (
	countDistinctWindowMS  = 5000
	countDistinctAdvanceMS = 1000
)

const countDistinctParts = 4

// distinctRow is one product's row: the oracle's or the output's.
type distinctRow struct {
	orders, cheap, buyers, cheapBuyers int64
	lastBuyer                          string
}

func countDistinctScenario(t *testing.T, brokers, mode string, n int, kills bool, windowKind string) {
	windowed := windowKind != ""
	advance := int64(countDistinctWindowMS)
	if windowKind == "hopping" {
		advance = countDistinctAdvanceMS
	}
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	began := time.Now()
	seed, rng := scenarioSeed(t)
	window, watermark := "", ""
	if windowed {
		window = fmt.Sprintf("\n      window: {tumbling: %dms, grace: 500ms}\n      emit: final", countDistinctWindowMS)
		if windowKind == "hopping" {
			window = fmt.Sprintf("\n      window: {hopping: %dms, advance: %dms, grace: 500ms}\n      emit: final", countDistinctWindowMS, countDistinctAdvanceMS)
		}
		watermark = ", watermark: {max_delay: 0s}"
	}
	p := configuredPipeline(t, brokers, countDistinctParts, "per_product", "commit_interval: 100ms",
		"enter_lag: 1000, exit_lag: 100, checkpoint_interval: 0s", func(p *pipeline) string {
			return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts%s}
operators:
  - name: per_product
    aggregate:
      input: orders
      group_by: product%s
      fields:
        orders: {count: {}}
        cheap: {count: {}, where: "amount < 30"}
        buyers: {count_distinct: customer_id}
        cheap_buyers: {count_distinct: customer_id, where: "amount < 30"}
        last_buyer: {max: customer_id, type: string}
    output: out
sinks:
  out: {topic: %s, format: json}
`, p.topic, watermark, window, p.sink)
		})
	p.env = []string{"SLUICE_BACKLOG__MODE=" + mode}

	// Orders of 300 customers over 60 products; a customer's ids differ in length (c-7, c-123),
	// so byte order is not numeric order.
	gen := rand.New(rand.NewPCG(uint64(seed), 0xd157))
	recs := make([]*kgo.Record, n)
	want := map[winKey]*distinctRow{} // without windows, start 0
	buyers, cheapBuyers := map[winKey]map[string]bool{}, map[winKey]map[string]bool{}
	for i := range recs {
		customer := fmt.Sprintf("c-%d", gen.IntN(300))
		product := fmt.Sprintf("p-%02d", gen.IntN(60))
		amount := 1 + gen.IntN(100)
		ts := workload.DefaultStartTS + int64(i)
		recs[i] = &kgo.Record{Key: []byte(customer), Partition: int32(gen.IntN(countDistinctParts)), Timestamp: time.UnixMilli(ts),
			Value: fmt.Appendf(nil, `{"customer_id":%q,"product":%q,"amount":%d,"ts":%d}`, customer, product, amount, ts)}
		starts := []int64{0} // without windows, one result per product
		if windowed {
			last := ts - ts%advance
			starts = starts[:0]
			for start := last - countDistinctWindowMS + advance; start <= last; start += advance {
				starts = append(starts, start)
			}
		}
		for _, start := range starts {
			k := winKey{key: product, start: start}
			w := want[k]
			if w == nil {
				w = &distinctRow{}
				want[k] = w
				buyers[k], cheapBuyers[k] = map[string]bool{}, map[string]bool{}
			}
			w.orders++
			buyers[k][customer] = true
			w.lastBuyer = max(w.lastBuyer, customer)
			if amount < 30 {
				w.cheap++
				cheapBuyers[k][customer] = true
			}
		}
	}
	for k, w := range want {
		w.buyers, w.cheapBuyers = int64(len(buyers[k])), int64(len(cheapBuyers[k]))
	}
	first, second := recs[:n/2], recs[n/2:]
	// Windowed: one order per partition far ahead in event time, on a product of its own (left
	// out of the oracle): the watermark it brings closes every window of the others.
	var closing []*kgo.Record
	for part := range int32(countDistinctParts) {
		if !windowed {
			break
		}
		ts := workload.DefaultStartTS + int64(n) + 10*countDistinctWindowMS
		closing = append(closing, &kgo.Record{Key: []byte("c-closing"), Partition: part, Timestamp: time.UnixMilli(ts),
			Value: fmt.Appendf(nil, `{"customer_id":"c-closing","product":"zz-closing","amount":1,"ts":%d}`, ts)})
	}

	prod := kafkatest.Client(t, p.brokers, append(workload.ProducerOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err := produceRecords(ctx, prod, p.topic, first); err != nil {
		t.Fatal(err)
	}
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true)}
	k := &killer{ctx: ctx, t: t, rng: rng}
	ins[0].start()
	if kills && mode == "never" {
		k.randomMoment()
		k.killRestart(ins[0], "random moment, streaming the backlog")
	} else if kills {
		k.killRestart(ins[0], k.inBacklog(ins[0]))
	}
	ins[1].start()
	produced := make(chan error, 1)
	go func() { produced <- producePaced(ctx, prod, p.topic, second, 10, 200*time.Millisecond) }()
	if kills {
		k.randomMoment()
		k.killRestart(ins[rng.IntN(len(ins))], "random moment, while producing")
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	if err := produceRecords(ctx, prod, p.topic, closing); err != nil {
		t.Fatal(err)
	}

	var diff []string
	pollf(ctx, t, func() string { return "the rows per product to be the oracle's: " + strings.Join(diff, "; ") }, 500*time.Millisecond, func() (bool, error) {
		for _, in := range ins {
			in.checkAlive()
		}
		got, err := readCommitted(ctx, p.brokers, p.sink)
		if err != nil {
			return false, err
		}
		diff = diffDistinctRows(want, got, windowed, 5)
		return diff == nil, nil
	})
	ids := termAll(ins)
	p.checkTransactions(ctx, ids...)
	if windowed { // and no final written twice once every instance has stopped
		got, err := readCommitted(ctx, p.brokers, p.sink)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffDistinctRows(want, got, windowed, 5); d != nil {
			t.Errorf("after the instances stopped: %s", strings.Join(d, "; "))
		}
	}
	dlq, err := readCommitted(ctx, p.brokers, p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(dlq) > 0 {
		t.Errorf("%d dead letters, want none; the first: %s %v", len(dlq), dlq[0].Value, dlq[0].Headers)
	}
	if !t.Failed() {
		what := "products"
		if windowed {
			what = "(product, window) finals"
		}
		t.Logf("mode %s: %d orders, %d %s verified (counts, where, count_distinct, max over strings); %d kills; took %v",
			mode, n, len(want), what, k.kills, time.Since(began).Round(time.Millisecond))
	}
}

// diffDistinctRows compares the latest row per product (windowed: every final per product and
// window, each read once, with its window's end) read from the sink with the oracle's; it
// returns at most limit differences (nil: equal).
func diffDistinctRows(want map[winKey]*distinctRow, recs []*kgo.Record, windowed bool, limit int) []string {
	var parser fastjson.Parser
	got := map[winKey]distinctRow{}
	var bad []string
	for _, r := range recs { // one product's rows are in one partition, in order
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			bad = append(bad, fmt.Sprintf("undecodable row %q: %v", r.Value, err))
			continue
		}
		k := winKey{key: string(v.GetStringBytes("key"))}
		if windowed {
			if k.key == "zz-closing" {
				continue
			}
			k.start = v.GetInt64("window_start")
			if end := v.GetInt64("window_end"); end != k.start+countDistinctWindowMS {
				bad = append(bad, fmt.Sprintf("%s@%d: window_end %d", k.key, k.start, end))
			}
			if _, dup := got[k]; dup {
				bad = append(bad, fmt.Sprintf("%s@%d read twice", k.key, k.start))
			}
		}
		got[k] = distinctRow{
			orders: v.GetInt64("orders"), cheap: v.GetInt64("cheap"), buyers: v.GetInt64("buyers"),
			cheapBuyers: v.GetInt64("cheap_buyers"), lastBuyer: string(v.GetStringBytes("last_buyer")),
		}
	}
	for k, w := range want {
		if g, ok := got[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s@%d missing", k.key, k.start))
		} else if g != *w {
			bad = append(bad, fmt.Sprintf("%s@%d: got %+v, want %+v", k.key, k.start, g, *w))
		}
	}
	for k := range got {
		if want[k] == nil {
			bad = append(bad, fmt.Sprintf("%s@%d not expected", k.key, k.start))
		}
	}
	slices.Sort(bad)
	return bad[:min(len(bad), limit)]
}
