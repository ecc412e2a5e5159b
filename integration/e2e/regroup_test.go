package e2e

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestRegroupWindowsKill9 is the kill -9 scenario of event-time windows after a re-key
// (group_by) against the real broker: orders keyed by customer, most of them on one partition,
// every partition spanning the same event time, re-keyed by product into tumbling windows and
// session windows (two aggregates, two repartition topics). The upstream tasks write into the
// repartition topics at very different speeds in event time, so a reader that took its records'
// times as its watermark would close windows the slow partition still writes to. Whatever the
// backlog mode (never, always, auto) and the kills, every (product, window) and every
// (product, session) final must be read exactly once with the exact count and sum computed here
// from the orders, and no order, each on time at its source, may be a dead letter.
//
// A CI run of an earlier build (mode auto) stopped short of the expected finals (8,447 of 8,984
// windows; 1,610 sessions for 1,500): a rebalance's abort rewound the re-keying writers' offsets
// but not their watermark, so after the rewind they announced the watermark of records they had
// not written again yet (testdata/join/rekey_abort). TestRegroupWindows found it without kills.
func TestRegroupWindowsKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, mode := range []string{"auto", "never", "always"} {
		t.Run(mode, func(t *testing.T) {
			regroupScenario(t, brokers, mode, regroupSize{orders: 60_000, products: 150, enterLag: 2000, exitLag: 200, kills: true})
		})
	}
}

// TestRegroupWindowsKill9Fake is TestRegroupWindowsKill9 in mode auto, smaller, against an
// in-process kfake cluster.
func TestRegroupWindowsKill9Fake(t *testing.T) {
	brokers := kafkatest.Fake(t, regroupParts)
	regroupScenario(t, brokers, "auto", regroupSize{orders: 30_000, products: 100, enterLag: 1000, exitLag: 100, kills: true})
}

// TestRegroupWindows is the regroup scenario without kills, in every backlog mode, against the
// real broker (two instances, the backlog then live traffic): before event time crossed the
// repartition topic, most finals were missing and their records dead-lettered as late; before a
// re-keying writer's watermark went back with its offset on an abort, a rebalance's abort made
// records late now and then.
func TestRegroupWindows(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, mode := range []string{"auto", "never", "always"} {
		t.Run(mode, func(t *testing.T) {
			regroupScenario(t, brokers, mode, regroupSize{orders: 60_000, products: 150, enterLag: 2000, exitLag: 200})
		})
	}
}

// TestRegroupWindowsFake is TestRegroupWindows in mode auto, smaller, against kfake.
func TestRegroupWindowsFake(t *testing.T) {
	brokers := kafkatest.Fake(t, regroupParts)
	regroupScenario(t, brokers, "auto", regroupSize{orders: 30_000, products: 100, enterLag: 1000, exitLag: 100})
}

// regroupSize sizes one regroup scenario.
type regroupSize struct {
	orders, products  int
	enterLag, exitLag int64
	kills             bool // kill -9 instances during the backlog and while orders arrive
}

// Event time of the regroup scenario, in ms: every partition spans the same time, in bursts of
// regroupBurstMS followed by regroupQuietMS without orders (so sessions close), one order per
// partition at a time, in order (max_delay 0: none is late at its source).
const (
	regroupParts    = 8
	regroupSkew     = 0.8 // the share of the orders on partition 0
	regroupBurstMS  = 6000
	regroupQuietMS  = 4000
	regroupActiveMS = 60_000 // total burst time the orders span
	regroupWindowMS = 1000   // tumbling window
	regroupGapMS    = 2000   // session gap
	regroupClosing  = "zz-closing"
)

// regroupOrder is one generated order: its partition and event time, the product it is re-keyed
// by, and its amount.
type regroupOrder struct {
	part    int32
	ts      int64
	product string
	amount  int64
	rec     *kgo.Record
}

// regroupOrders generates n orders, regroupSkew of them on partition 0 and the rest spread over
// the others, each partition's in event-time order over the same span.
func regroupOrders(rng *rand.Rand, n, products int) []regroupOrder {
	per := make([]int, regroupParts)
	per[0] = int(float64(n) * regroupSkew)
	for i := per[0]; i < n; i++ {
		per[1+(i%(regroupParts-1))]++
	}
	var out []regroupOrder
	for p := range int32(regroupParts) {
		for i := range per[p] {
			a := int64(i) * regroupActiveMS / int64(per[p]) // active time offset
			ts := workload.DefaultStartTS + a/regroupBurstMS*(regroupBurstMS+regroupQuietMS) + a%regroupBurstMS
			o := regroupOrder{part: p, ts: ts, product: fmt.Sprintf("p-%04d", rng.IntN(products)), amount: 1 + rng.Int64N(100)}
			o.rec = regroupRecord(o, fmt.Sprintf("c-%d-%d", p, rng.IntN(500)))
			out = append(out, o)
		}
	}
	return out
}

func regroupRecord(o regroupOrder, customer string) *kgo.Record {
	v := fmt.Appendf(nil, `{"customer_id":%q,"product":%q,"amount":%d,"ts":%d}`, customer, o.product, o.amount, o.ts)
	return &kgo.Record{Key: []byte(customer), Value: v, Partition: o.part, Timestamp: time.UnixMilli(o.ts)}
}

// regroupFinal is one final of the oracle or the output: a window's or a session's count and
// sum.
type regroupFinal struct {
	end    int64
	orders int64
	amount string
}

// regroupOracle computes, from the orders alone, every tumbling-window final and every session
// final per product. The closing orders (product regroupClosing) hold windows open and are left
// out.
func regroupOracle(orders []regroupOrder) (windows, sessions map[winKey]regroupFinal) {
	windows, sessions = map[winKey]regroupFinal{}, map[winKey]regroupFinal{}
	byProduct := map[string][]regroupOrder{}
	for _, o := range orders {
		if o.product == regroupClosing {
			continue
		}
		start := o.ts - o.ts%regroupWindowMS
		k := winKey{key: o.product, start: start}
		f := windows[k]
		f.end, f.orders = start+regroupWindowMS, f.orders+1
		f.amount = addInt(f.amount, o.amount)
		windows[k] = f
		byProduct[o.product] = append(byProduct[o.product], o)
	}
	for product, os := range byProduct {
		slices.SortStableFunc(os, func(a, b regroupOrder) int { return int(a.ts - b.ts) })
		var cur *regroupFinal
		var start, last int64
		flush := func() {
			if cur != nil {
				cur.end = last + regroupGapMS
				sessions[winKey{key: product, start: start}] = *cur
			}
		}
		for _, o := range os {
			if cur == nil || o.ts-last >= regroupGapMS {
				flush()
				cur, start = &regroupFinal{}, o.ts
			}
			last = o.ts
			cur.orders++
			cur.amount = addInt(cur.amount, o.amount)
		}
		flush()
	}
	return windows, sessions
}

// addInt adds n to the decimal integer s ("" = 0).
func addInt(s string, n int64) string {
	var v big.Int
	if s != "" {
		v.SetString(s, 10)
	}
	return v.Add(&v, big.NewInt(n)).String()
}

func regroupScenario(t *testing.T, brokers, mode string, size regroupSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	began := time.Now()
	seed, rng := scenarioSeed(t)
	sessionSink := kafkatest.UniqueName(t, "sessions")
	p := configuredPipeline(t, brokers, regroupParts, "windows", "commit_interval: 100ms",
		fmt.Sprintf("enter_lag: %d, exit_lag: %d, checkpoint_interval: 0s", size.enterLag, size.exitLag), func(p *pipeline) string {
			return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: 0s}}
operators:
  - name: per_second
    aggregate:
      input: orders
      group_by: product
      window: {tumbling: %dms}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: windows_out
  - name: sessions
    aggregate:
      input: orders
      group_by: product
      window: {session: %dms}
      emit: final
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: sessions_out
sinks:
  windows_out: {topic: %s, format: json}
  sessions_out: {topic: %s, format: json}
`, p.topic, regroupWindowMS, regroupGapMS, p.sink, sessionSink)
		})
	p.env = []string{"SLUICE_BACKLOG__MODE=" + mode}

	orders := regroupOrders(rand.New(rand.NewPCG(uint64(seed), 0x5e9)), size.orders, size.products)
	// The first half of event time is the backlog; the second arrives while instances run.
	cut := workload.DefaultStartTS + (regroupActiveMS/2/regroupBurstMS)*(regroupBurstMS+regroupQuietMS)
	var first, second []*kgo.Record
	for _, o := range orders {
		if o.ts < cut {
			first = append(first, o.rec)
		} else {
			second = append(second, o.rec)
		}
	}
	// One order per partition far ahead in event time, on a product of its own: the watermark
	// it brings closes every window and session of the others.
	var closing []*kgo.Record
	for part := range int32(regroupParts) {
		o := regroupOrder{part: part, ts: workload.DefaultStartTS + 10*regroupActiveMS, product: regroupClosing, amount: 1}
		o.rec = regroupRecord(o, fmt.Sprintf("c-%d-closing", part))
		orders = append(orders, o)
		closing = append(closing, o.rec)
	}
	wantWindows, wantSessions := regroupOracle(orders)
	t.Logf("mode %s: %d orders (%.0f%% on partition 0), %d window finals, %d session finals expected",
		mode, size.orders, 100*regroupSkew, len(wantWindows), len(wantSessions))

	prod := kafkatest.Client(t, p.brokers, append(workload.ProducerOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err := produceRecords(ctx, prod, p.topic, first); err != nil {
		t.Fatal(err)
	}
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true)}
	k := &killer{ctx: ctx, t: t, rng: rng}
	ins[0].start()
	if size.kills {
		if mode == "never" {
			k.randomMoment()
			k.killRestart(ins[0], "random moment, phase 1, streaming the backlog")
		} else {
			k.killRestart(ins[0], k.inBacklog(ins[0]))
		}
		k.randomMoment()
		k.killRestart(ins[0], "random moment, phase 1")
	}
	ins[1].start()
	var producing atomic.Bool
	producing.Store(true)
	produced := make(chan error, 1)
	go func() {
		err := producePaced(ctx, prod, p.topic, second, 10, 200*time.Millisecond)
		producing.Store(false)
		produced <- err
	}()
	for range 2 {
		if !size.kills {
			break
		}
		k.randomMoment()
		why := "random moment, phase 2, while producing"
		if !producing.Load() {
			why = "random moment, phase 2, production done"
		}
		k.killRestart(ins[rng.IntN(len(ins))], why)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	if err := produceRecords(ctx, prod, p.topic, closing); err != nil {
		t.Fatal(err)
	}

	// Wait until every final is read (or more: the diff reports duplicates); at the deadline,
	// go on and report what differs rather than only that it timed out.
	wait, stop := context.WithTimeout(ctx, 120*time.Second)
	defer stop()
	for {
		for _, in := range ins {
			in.checkAlive()
		}
		gotW, errW := readCommitted(ctx, p.brokers, p.sink)
		gotS, errS := readCommitted(ctx, p.brokers, sessionSink)
		if errW == nil && errS == nil && len(gotW) >= len(wantWindows) && len(gotS) >= len(wantSessions) {
			break
		}
		select {
		case <-wait.Done():
			t.Errorf("after 120 s: %d window finals in %s and %d session finals in %s (read_committed), want %d and %d (errors %v, %v)",
				len(gotW), p.sink, len(gotS), sessionSink, len(wantWindows), len(wantSessions), errW, errS)
		case <-time.After(300 * time.Millisecond): // the next look
			continue
		}
		break
	}
	ids := termAll(ins)
	p.checkTransactions(ctx, ids...)
	gotW, err := readCommitted(ctx, p.brokers, p.sink)
	if err != nil {
		t.Fatal(err)
	}
	gotS, err := readCommitted(ctx, p.brokers, sessionSink)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffRegroup(wantWindows, gotW, 10); d != nil {
		t.Errorf("tumbling finals after group_by differ from the oracle (%d expected, %d read):\n%s", len(wantWindows), len(gotW), strings.Join(d, "\n"))
	}
	if d := diffRegroup(wantSessions, gotS, 10); d != nil {
		t.Errorf("session finals after group_by differ from the oracle (%d expected, %d read):\n%s", len(wantSessions), len(gotS), strings.Join(d, "\n"))
	}
	dlq, err := readCommitted(ctx, p.brokers, p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(dlq) > 0 {
		t.Errorf("%d dead letters, want none (every order is on time at its source); the first: %s %v", len(dlq), dlq[0].Value, dlq[0].Headers)
	}
	if !t.Failed() {
		t.Logf("verified %d window and %d session finals exactly once, no dead letter; %d kills; took %v",
			len(gotW), len(gotS), k.kills, time.Since(began).Round(time.Millisecond))
	}
}

// diffRegroup compares finals read from a sink with the oracle's: each exactly once, with the
// same end, count and sum. It returns at most limit lines, with the totals first.
func diffRegroup(want map[winKey]regroupFinal, recs []*kgo.Record, limit int) []string {
	var parser fastjson.Parser
	got := map[winKey]regroupFinal{}
	var bad []string
	dups := 0
	for _, r := range recs {
		v, err := parser.ParseBytes(r.Value)
		if err != nil {
			bad = append(bad, fmt.Sprintf("undecodable final %q: %v", r.Value, err))
			continue
		}
		k := winKey{key: string(v.GetStringBytes("key")), start: v.GetInt64("window_start")}
		f := regroupFinal{end: v.GetInt64("window_end"), orders: v.GetInt64("orders"), amount: v.Get("amount").String()}
		if _, ok := got[k]; ok {
			dups++
			bad = append(bad, fmt.Sprintf("%s@%d read twice", k.key, k.start))
		}
		got[k] = f
	}
	missing, wrong := 0, 0
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
			bad = append(bad, fmt.Sprintf("%s@%d missing (want %+v)", k.key, k.start, w))
		case g != w:
			wrong++
			bad = append(bad, fmt.Sprintf("%s@%d: got %+v, want %+v", k.key, k.start, g, w))
		}
	}
	extra := 0
	for k, g := range got {
		if _, ok := want[k]; !ok {
			extra++
			bad = append(bad, fmt.Sprintf("%s@%d not expected (got %+v)", k.key, k.start, g))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	head := fmt.Sprintf("%d missing, %d wrong, %d unexpected, %d duplicates", missing, wrong, extra, dups)
	return append([]string{head}, bad[:min(limit, len(bad))]...)
}
