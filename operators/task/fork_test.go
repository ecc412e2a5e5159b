package task

import (
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// testConfigForks reads the orders with nine operators in a tree of six chains, five of them
// forks: of the first, sharing none, one or two of its stages (a select that fails on records
// without an amount, a filter), and of another fork, sharing three stages with it. They end
// stateless, keyed, windowed (whose late records depend on the times of the records the shared
// filter dropped) and re-keyed.
func testConfigForks(mode string, cacheKeys int) string {
	// Without combining, the repartitioned records are the tiers' inputs in order.
	head := strings.Replace(testHeader(mode, 50, 10, cacheKeys, "0s"), "cache_keys:", "combine_before_rekey: false, cache_keys:", 1)
	return head + fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: 300ms}}
operators:
  - name: priced
    map:
      input: orders
      select: [order_id, customer_id, amount, ts, {cents: "amount * 100"}, {tier: "amount >= 100 ? 'big' : 'small'"}]
  - name: big
    filter:
      input: priced
      expr: amount >= 100
  - name: %s
    aggregate:
      input: big
      fields:
        n: {count: {}}
        total: {sum: amount}
    output: out
  - name: big-cents
    map:
      input: big
      select: [order_id, cents]
    output: cents
  - name: big-ids
    filter:
      input: big-cents
      expr: order_id endsWith "3"
    output: threes
  - name: big-ids-again
    map:
      input: big-cents
      select: [order_id]
    output: ids
  - name: per-half-second
    aggregate:
      input: big
      window: {tumbling: 500ms}
      emit: final
      fields:
        n: {count: {}}
    output: halves
  - name: tiers
    aggregate:
      input: priced
      group_by: tier
      fields:
        n: {count: {}}
    output: tiers
  - name: sevens
    filter:
      input: orders
      expr: order_id endsWith "7"
    output: sevens
sinks:
  out: {topic: %s, format: json}
  cents: {topic: cents, format: json}
  threes: {topic: threes, format: json}
  ids: {topic: ids, format: json}
  tiers: {topic: tiers, format: json}
  halves: {topic: halves, format: json}
  sevens: {topic: sevens, format: json}
`, testTopic, testOp, testSink)
}

// newForkTask returns the task of doc's orders, partition 0, producing to prod.
func newForkTask(t *testing.T, doc string, prod *fakeProducer) *Task {
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	tk, err := New(mustPlan(t, doc), testTopic, 0, Deps{Store: state.NewMem(), Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(),
		Producer: prod, Clock: clk.Now, Logger: discardLogger(), InternalPartitions: map[string]int32{testGroup + "-tiers-repartition": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tk.Close)
	return tk
}

// TestForkSnapshots: forks that start from their provider's snapshot (fork.go) commit what
// forks that decode and run the shared stages themselves commit, record for record (outputs,
// repartitioned records, changelog, dead letters, in order), in every mode, with rewinds,
// aborts and bad records; and they do start from it.
func TestForkSnapshots(t *testing.T) {
	eachSeed(t, seedCounts{normal: 10, short: 3, long: 100}, func(t *testing.T, seed uint64, _ int) {
		in := genRecords(rand.New(rand.NewPCG(seed, 1)), []int{20, 300, 2000}[seed%3])
		for _, mode := range []string{"never", "always", "auto"} {
			run := func(snapshots bool) ([]string, int64) {
				defer func(old bool) { forkSnapshots = old }(forkSnapshots)
				forkSnapshots = snapshots
				rng := rand.New(rand.NewPCG(seed, 2))
				prod := newFakeProducer()
				tk := newForkTask(t, testConfigForks(mode, []int{2, 100000}[rng.IntN(2)]), prod)
				lag := int64(0)
				d := &driver{t: t, rng: rng, task: tk, prod: prod, input: in.recs,
					maxBatch: []int{1, 7, 50, 300}[rng.IntN(4)], pCkpt: 0.2, pAbort: 0.2, maxAborts: 6,
					lag: func(d *driver, end int) int64 {
						if d.rng.IntN(4) == 0 {
							lag = []int64{0, 9, 11, 49, 51, 1 << 40}[d.rng.IntN(6)]
						}
						return lag
					}}
				d.run()
				checkForkOracle(t, mode, snapshots, in, d.prod)
				// Each topic's records: stateless outputs and repartitioned records (not the
				// announcements between them) in order, dead letters sorted (each chain holds its
				// own until a checkpoint) and windows' finals sorted, an aggregate's results the
				// last per key (which of its keys a flush or an eviction takes first is not fixed).
				byTopic := map[string][]string{}
				last := map[string]string{}
				for _, r := range d.prod.log {
					if r.Key == nil && r.Value == nil || strings.HasSuffix(r.Topic, "-changelog") {
						continue // a writer's announcement; the state, whose records follow the cache's order
					}
					var hs []string
					for _, h := range r.Headers {
						hs = append(hs, h.Key+"="+string(h.Value))
					}
					line := fmt.Sprintf("%s/%d %s %s [%s]", r.Topic, r.Partition, r.Key, r.Value, strings.Join(hs, " "))
					if r.Topic == testSink {
						last[r.Topic+" "+string(r.Key)] = line
						continue
					}
					byTopic[r.Topic] = append(byTopic[r.Topic], line)
				}
				slices.Sort(byTopic[testGroup+"-dlq"])
				slices.Sort(byTopic["halves"])
				var log []string
				for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
					log = append(log, byTopic[topic]...)
				}
				for _, k := range slices.Sorted(maps.Keys(last)) {
					log = append(log, last[k])
				}
				var used int64
				for _, c := range tk.chains {
					if c.from != nil {
						used += c.from.used
					}
				}
				return log, used
			}
			want, none := run(false)
			got, used := run(true)
			if none != 0 {
				t.Errorf("mode %s: forks started from snapshots %d times with snapshots off", mode, none)
			}
			if len(in.recs) > 50 && used == 0 {
				t.Errorf("mode %s: no fork started from a snapshot", mode)
			}
			if !slices.Equal(got, want) {
				t.Errorf("mode %s: forks from snapshots committed otherwise (%d records, want %d):\n%s", mode, len(got), len(want), diffOutputs(want, got))
			}
		}
	})
}

// TestForkLinks: each fork of testConfigForks starts from the snapshot of the first chain that
// shares its stages, at their depth: a fork of a fork from the fork when it shares more with it.
func TestForkLinks(t *testing.T) {
	tk := newForkTask(t, testConfigForks("auto", 100), newFakeProducer())
	got := map[string]string{}
	for _, c := range tk.chains {
		for _, p := range tk.chains {
			if c.from != nil && slices.Contains(p.snaps, c.from) {
				got[c.plan.ID()] = fmt.Sprintf("%s@%d", p.plan.ID(), c.from.depth)
			}
		}
	}
	want := map[string]string{
		"sevens":          "totals@0", // the source's records as decoded
		"rekey:tiers":     "totals@1", // after priced
		"per-half-second": "totals@2", // after priced and big
		"big-ids":         "totals@2",
		"big-ids-again":   "big-ids@3", // after big-cents, which big-ids taps
	}
	if !maps.Equal(got, want) {
		t.Errorf("forks start from %v, want %v", got, want)
	}
}

// checkForkOracle checks two forks of testConfigForks against the input itself: sevens (a fork
// of none of the first chain's stages) writes, in offset order and once each, every record the
// source can decode whose order id ends in 7; threes (a fork sharing two stages, and a fork of
// a fork) every good record's order id that ends in 3 with an amount of at least 100.
func checkForkOracle(t *testing.T, mode string, snapshots bool, in genInput, prod *fakeProducer) {
	t.Helper()
	undecodable := map[string]bool{"json": true, "no-ts": true, "mismatch": true, "nokey": true, "no-key-field": true}
	var wantSevens, wantThrees []string
	for i, r := range in.recs {
		kind := in.bad[int64(i)]
		id := fmt.Sprintf("o-%d", i)
		if !undecodable[kind] && strings.HasSuffix(id, "7") {
			wantSevens = append(wantSevens, id)
		}
		if kind != "" || !strings.HasSuffix(id, "3") {
			continue
		}
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		amount, ok := new(big.Rat).SetString(v.Get("amount").String())
		if !ok {
			t.Fatalf("amount of %s: %s", id, r.Value)
		}
		if amount.Cmp(big.NewRat(100, 1)) >= 0 {
			wantThrees = append(wantThrees, id)
		}
	}
	ids := func(topic string, keep func(id string) bool) []string {
		var out []string
		for _, r := range prod.committed(topic) {
			v, err := fastjson.ParseBytes(r.Value)
			if err != nil {
				t.Fatalf("%s: %q: %v", topic, r.Value, err)
			}
			if id := string(v.GetStringBytes("order_id")); keep(id) {
				out = append(out, id)
			}
		}
		return out
	}
	good := func(id string) bool {
		off, _ := strconv.ParseInt(strings.TrimPrefix(id, "o-"), 10, 64)
		return in.bad[off] == "" // a bad record with an amount may pass the filter or not: not judged
	}
	if got := ids("sevens", func(string) bool { return true }); !slices.Equal(got, wantSevens) {
		t.Errorf("mode %s, snapshots %v: sevens wrote %d ids, want %d:\n%s", mode, snapshots, len(got), len(wantSevens), diffOutputs(wantSevens, got))
	}
	if got := ids("threes", good); !slices.Equal(got, wantThrees) {
		t.Errorf("mode %s, snapshots %v: threes wrote %d ids of good records, want %d:\n%s", mode, snapshots, len(got), len(wantThrees), diffOutputs(wantThrees, got))
	}
}
