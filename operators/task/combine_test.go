package task

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// The operators a re-keying writer combines for (combine.go), each grouped by a field of the
// orders, so that their records cross the repartition topic meta-totals-repartition.
const (
	combineAggregate = `  - name: totals
    aggregate:
      input: orders
      group_by: region
      fields:
        n: {count: {}}
        total: {sum: amount}
        cheap: {count: {}, where: "amount < 100"}
        top_id: {max: order_id, type: string}
        low: {min: amount}
    output: out
`
	combineDistinct = `  - name: totals
    distinct:
      input: orders
      group_by: region, customer_id
      flags: {any: "true", cheap: "amount < 100", big: "amount >= 500"}
    output: out
`
	combineTop = `  - name: totals
    top: {input: orders, group_by: region, n: 2, by: amount}
    output: out
`
	combineWindowTop = `  - name: totals
    top: {input: orders, group_by: region, n: 1, ties: true, by: amount, window: {tumbling: 500ms}}
    output: out
`
	// A keyed operator whose results only a top reads, after a filter (the writer filters its
	// results for it: plan.filtersOutput; Nexmark q9's shape): each order joined with its
	// customer's latest record, and per customer the two largest orders from 50 to 800.
	combineJoinTop = `  - name: pairs
    join: {left: orders, right: customers, unique: right}
  - name: big
    filter: {input: pairs, expr: "orders.amount > 50 && orders.amount < 800"}
  - name: totals
    top: {input: big, n: 2, by: orders.amount}
    output: out
`
	// The same with the join's columns and a top by one of them, without a filter between: the
	// writer's filter answers the join before it writes a row (operators.ResultFilter).
	combineJoinColumnsTop = `  - name: pairs
    join:
      left: orders
      right: customers
      unique: right
      select: [{order: orders.order_id}, {amount: orders.amount}, {tier: customers.tier}]
  - name: totals
    top: {input: pairs, n: 2, by: amount}
    output: out
`
	// A keyed operator whose results a re-keying chain sends, through a filter and a map, to an
	// aggregate of each key's best value (the writer filters its results for it:
	// plan.filtersOutput; Nexmark q4's shape): per (region, tier), over the results of every
	// customer, the largest order under 700 (a filter against the bound's direction: a larger
	// value must not enter it).
	combineJoinMax = `  - name: pairs
    join:
      left: orders
      right: customers
      unique: right
      select: [{cust: orders.customer_id}, {tier: customers.tier}, {amount: orders.amount}, {region: orders.region}]
  - name: under
    filter: {input: pairs, expr: "amount < 700"}
  - name: slim
    map: {input: under, select: [region, tier, amount]}
  - name: totals
    aggregate: {input: slim, group_by: "region, tier", fields: {best: {max: amount}}}
    output: out
`
	// The same read by the results' own key, after a filter: per customer the smallest order
	// over 100.
	combineJoinMin = `  - name: pairs
    join: {left: orders, right: customers, unique: right}
  - name: small
    filter: {input: pairs, expr: "orders.amount > 100"}
  - name: totals
    aggregate: {input: small, fields: {least: {min: orders.amount}}}
    output: out
`
	// Nexmark q4's shape: the aggregate re-keys the join's rows by columns of the unique side
	// alone, so every row of a customer re-keys alike and the join's filter asks of a row
	// before it is written (operators.RegularJoin.SameUnderKey).
	combineJoinUnderKey = `  - name: pairs
    join:
      left: orders
      right: customers
      unique: right
      select: [{cust: customers.id}, {tier: customers.tier}, {amount: orders.amount}]
  - name: totals
    aggregate: {input: pairs, group_by: "cust, tier", fields: {best: {max: amount}}}
    output: out
`
	// Windowed aggregates, emitting finals (the same whatever the checkpoints' timing while no
	// order is late; TestProjectedDeadLettersWhole makes many late): a re-keying writer
	// combines its records into partial windows or sessions for tumbling windows and sessions
	// (combine.go), and projects them for hopping windows (project.go).
	combineWindowAgg = `  - name: totals
    aggregate:
      input: orders
      group_by: region
      window: {tumbling: 500ms}
      emit: final
      fields: {n: {count: {}}, total: {sum: amount}, cheap: {count: {}, where: "amount < 100 && customer_id != 'c3'"}, top_id: {max: order_id, type: string}}
    output: out
`
	combineHoppingAgg = `  - name: totals
    aggregate:
      input: orders
      group_by: region
      window: {hopping: 1s, advance: 250ms}
      emit: final
      fields: {n: {count: {}}, total: {sum: amount}, cheap: {count: {}, where: "amount < 100 && customer_id != 'c3'"}}
    output: out
`
	combineSessionAgg = `  - name: totals
    aggregate:
      input: orders
      group_by: region
      window: {session: 30ms}
      emit: final
      fields: {n: {count: {}}, total: {sum: amount}}
    output: out
`
	// An aggregate's window finals that a re-keying chain sends, through a map, to a top over
	// windows (the aggregate filters its finals for it: plan.filtersOutput; Nexmark q5's
	// shape): per hopping window, the customers with the most orders (ties kept, and frequent).
	combineFinalsTop = `  - name: counts
    aggregate:
      input: orders
      window: {hopping: 1s, advance: 250ms}
      emit: final
      fields: {n: {count: {}}, total: {sum: amount}}
  - name: counted
    map: {input: counts, select: [{customer: key}, n, total, window_start, window_end]}
  - name: totals
    top: {input: counted, by: n, n: 1, ties: true, group_by: window_start, window: {tumbling: 250ms}}
    output: out
`
	combineHoppingTop = `  - name: totals
    top: {input: orders, group_by: region, n: 2, by: amount, order: asc, window: {hopping: 1s, advance: 250ms, grace: 100ms}}
    output: out
`
)

func combineConfig(op, mode string, combine bool, cacheKeys int) string {
	return fmt.Sprintf(`kafka: {brokers: [127.0.0.1:9092]}
group: %s
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d, combine_before_rekey: %v}
backlog: {enter_lag: 20, exit_lag: 5, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts, watermark: {max_delay: 2s}}
%soperators:
%ssinks:
  out: {topic: %s, format: json}
`, testGroup, cacheKeys, combine, mode, testTopic, customersSource(op), op, testSink)
}

// combineJoinColumnsTopOne is combineJoinColumnsTop with a top of one (Nexmark q9's shape): a
// fold holds each row that raised its key's best until the next one does (emitTo), and the top
// gets about one row per key.
var combineJoinColumnsTopOne = strings.Replace(combineJoinColumnsTop, "n: 2", "n: 1", 1)

// holdsBest names TestCombineOneAnswer's operators whose writer's fold holds each key's best
// result so far (emitTo): a top of one, a max, a min.
var holdsBest = map[string]bool{"join columns top one": true, "join max": true, "join min": true, "join max under key": true}

// combineCustomers is the topic of the customers a join reads beside the orders.
const combineCustomers = "customers"

// customersSource is the source of the customers when the operators op read it.
func customersSource(op string) string {
	if !strings.Contains(op, "customers") {
		return ""
	}
	return "  customers: {topic: " + combineCustomers + ", format: json, key: id, timestamp: ts}\n"
}

// genJoinCustomers returns n versions of the customers of genCombineOrders, in partition 0;
// one in eight without a tier (the rows of a customer whose first version has none are dead
// letters of a re-key by tier).
func genJoinCustomers(rng *rand.Rand, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id, ts := fmt.Sprintf("c%d", rng.IntN(12)), int64(1_700_000_000_000+i*40)
		v := fmt.Appendf(nil, `{"id":%q,"tier":%d,"ts":%d}`, id, rng.IntN(3), ts)
		if rng.IntN(8) == 0 {
			v = fmt.Appendf(nil, `{"id":%q,"ts":%d}`, id, ts)
		}
		recs[i] = &kgo.Record{Topic: combineCustomers, Offset: int64(i), Key: []byte(id), Timestamp: time.UnixMilli(ts), Value: v}
	}
	return recs
}

// genCombineOrders returns n orders of partition 0 over a few regions and customers, some of
// them without a region (dead letters of the re-key) or without an amount (dead letters of the
// aggregate's projection, which a combining writer leaves to the reader).
func genCombineOrders(rng *rand.Rand, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		cust := fmt.Sprintf("c%d", rng.IntN(12))
		ts := int64(1_700_000_000_000 + i*10)
		if rng.IntN(8) == 0 {
			ts -= rng.Int64N(1500) // out of order, within the source's max_delay
		}
		region := fmt.Sprintf(`"region":"r%d",`, rng.IntN(5))
		amount := fmt.Sprintf(`"amount":%d.%02d,`, rng.IntN(900), rng.IntN(100))
		if rng.IntN(2) == 0 {
			amount = fmt.Sprintf(`"amount":%d,`, 50*rng.IntN(18)) // ties
		}
		switch rng.IntN(40) {
		case 0:
			region = ""
		case 1:
			amount = ""
		}
		recs[i] = &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(cust), Timestamp: time.UnixMilli(ts),
			Value: fmt.Appendf(nil, `{%s%s"order_id":"o%05d","customer_id":%q,"ts":%d}`, region, amount, rng.IntN(100000), cust, ts)}
	}
	return recs
}

// combineRun is what a run committed: the sink's records in order, the dead letters (sorted),
// and how many records the repartition topic got, how many of them partial states.
type combineRun struct {
	out      []string
	dlq      []string
	repart   int
	partials int
	// maxPartial is the largest partial's key and value, in bytes.
	maxPartial int
	bytes      int           // the repartition topic's records' values
	prod       *fakeProducer // every topic's committed records
}

// runCombine runs the inputs (by topic, partition 0: orders in testTopic, and a join's other
// side) through a writer task and its reader task (the writer's repartition or output topic),
// playing the consumer of one process: random batches of either, lags that move the tasks in
// and out of backlog (mode auto), and checkpoints of both into one transaction that abort at
// random (both tasks rewind: records the writer produced since the last commit die with it);
// with restarts, the writer task is replaced at times by a new one resuming from its commit.
// It ends when everything is read and committed.
func runCombine(t *testing.T, seed uint64, doc string, inputs map[string][]*kgo.Record, restarts bool) combineRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	newTask, prod, hops := combineTasks(t, doc)
	repart := hops[0]
	topics := slices.Sorted(maps.Keys(inputs))
	w, r := newTask(topics...), newTask(hops...)
	rNext := map[string]int64{}
	// The next offset the writer reads of each topic; its last committed offset and its
	// metadata's progress, from which a new writer task (its partition's next owner) starts;
	// where the writer task started (it fetches nothing before).
	wNext, wDone, wStart := map[string]int64{}, map[string]int64{}, map[string]int64{}
	wProgress := map[string]map[string]int64{}
	// checkpoint checkpoints both tasks into one transaction and commits it (again while either
	// asks for it), or with mayAbort aborts one in five; it reports whether it committed.
	checkpoint := func(mayAbort bool) bool {
		for range 3 {
			var pds []*Pending
			failed := false
			for _, tk := range []*Task{w, r} {
				pd := checkpointTask(t, tk, prod)
				failed = failed || pd.Err() != nil
				pds = append(pds, pd)
			}
			if failed || mayAbort && rng.IntN(5) == 0 {
				prod.abort()
				seek := w.Aborted(pds[0])
				for _, topic := range topics {
					wNext[topic] = wStart[topic] // a writer task that read nothing yet names no offset
					if off, ok := seek[topic]; ok {
						wNext[topic] = off
					}
				}
				rSeek := r.Aborted(pds[1])
				for _, topic := range hops {
					rNext[topic] = rSeek[topic] // 0 when it read nothing yet
				}
				return false
			}
			prod.commit()
			for i, tk := range []*Task{w, r} {
				if err := tk.Committed(pds[i]); err != nil {
					t.Fatal(err)
				}
			}
			for _, topic := range topics {
				if off, ok := pds[0].Offsets[topic]; ok {
					wDone[topic], wProgress[topic] = off, pds[0].Progress[topic]
				}
			}
			if !w.NeedsCheckpoint() && !r.NeedsCheckpoint() && !w.WantsFold() && !r.WantsFold() {
				break
			}
		}
		return true
	}
	feed := func(tk *Task, topic string, recs []*kgo.Record, lag int64) {
		if slices.Contains(hops, topic) {
			tk.ReadAttributes(topic, recs)
		}
		if tk.BeforeBatch(topic, Lag{Before: lag, After: lag - int64(len(recs))}) {
			checkpoint(false)
		}
		if err := tk.Process(topic, recs); err != nil {
			t.Fatal(err)
		}
		tk.AfterBatch(topic, Lag{After: lag - int64(len(recs))})
	}
	for clean := false; ; {
		var in []*kgo.Record // the committed records of a hop from its rNext
		hop := hops[rng.IntN(len(hops))]
		for _, h := range append([]string{hop}, hops...) {
			for _, rec := range prod.committed(h) {
				if rec.Offset >= rNext[h] {
					in = append(in, rec)
				}
			}
			if len(in) > 0 {
				hop = h
				break
			}
		}
		var left []string // the writer's topics with records still to read
		for _, topic := range topics {
			if int(wNext[topic]) < len(inputs[topic]) {
				left = append(left, topic)
			}
		}
		switch {
		case len(left) == 0 && len(in) == 0:
			if clean {
				goto done
			}
			clean = checkpoint(false)
			continue
		case len(left) > 0 && (len(in) == 0 || rng.IntN(2) == 0):
			topic := left[rng.IntN(len(left))]
			recs := inputs[topic]
			n := min(1+rng.IntN(30), len(recs)-int(wNext[topic]))
			if rng.IntN(4) == 0 {
				wNext[topic] = max(wStart[topic], wNext[topic]-int64(rng.IntN(5))) // a fetch again from before the task's next: it skips what it has done
			}
			batch := recs[wNext[topic] : int(wNext[topic])+n]
			feed(w, topic, batch, int64(len(recs))-wNext[topic])
			wNext[topic] += int64(len(batch))
			if len(wDone) == 0 && wNext[topic] >= int64(len(recs)/4) {
				// A commit before most of the input: a schedule that aborted every checkpoint
				// until the end (seed 1796627606950590013) leaves the writer no committed
				// watermark to combine or project by, and the run shows nothing of them.
				checkpoint(false)
			}
		default:
			n := min(1+rng.IntN(20), len(in))
			feed(r, hop, in[:n], int64(len(in)))
			rNext[hop] = in[n-1].Offset + 1
		}
		clean = false
		if rng.IntN(3) == 0 {
			clean = checkpoint(true)
		}
		if clean && restarts && rng.IntN(10) == 0 {
			// The writer's partition moves to a new owner, which resumes from the commit.
			w.Close()
			w = newTask(topics...)
			for _, topic := range topics {
				if w.Branches(topic) {
					w.SetProgress(topic, wDone[topic], wProgress[topic])
				}
				wNext[topic], wStart[topic] = wDone[topic], wDone[topic]
			}
		}
	}
done:
	res := combineRun{prod: prod}
	for _, rec := range prod.committed(testSink) {
		res.out = append(res.out, fmt.Sprintf("%s %s", rec.Key, rec.Value))
	}
	for _, rec := range prod.committed(testGroup + "-dlq") {
		// By operator and record: a dead letter of the reader has another offset when the
		// repartition topic holds partial states before it.
		res.dlq = append(res.dlq, fmt.Sprintf("%s %s: %s", hdr(rec, codec.HeaderOperator), rec.Key, rec.Value))
	}
	slices.Sort(res.dlq)
	for _, rec := range prod.committed(repart) {
		if rec.Key == nil && rec.Value == nil {
			continue // an attribute record
		}
		res.repart++
		res.bytes += len(rec.Value)
		if _, ok := codec.PartialOf(rec.Headers); ok {
			res.partials++
			res.maxPartial = max(res.maxPartial, len(rec.Key)+len(rec.Value))
		}
	}
	return res
}

// combineTasks returns, for the config doc of a writer reading testTopic and its readers, a
// function making the task of topics of partition 0 (the writer's: testTopic; the readers':
// the hops, the writer's repartition or output topic and, when its reader re-keys them again,
// that repartition topic), all sharing one store and the producer prod.
func combineTasks(t *testing.T, doc string) (newTask func(topics ...string) *Task, prod *fakeProducer, hops []string) {
	pl := mustPlan(t, doc)
	store := state.NewMem()
	prod = newFakeProducer()
	for _, c := range pl.Chains {
		if c.Source.Topic == testTopic && (c.Rekey != "" || c.Output) {
			hops = []string{c.SinkTopic}
		}
	}
	for _, c := range pl.Chains {
		if c.Source.Topic == hops[0] && c.Rekey != "" {
			hops = append(hops, c.SinkTopic)
		}
	}
	internal := map[string]int32{}
	for _, h := range hops {
		internal[h] = 1
	}
	newTask = func(topics ...string) *Task {
		clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
		tk, err := NewGroup(pl, topics, 0, Deps{Store: store, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Producer: prod,
			Clock: clk.Now, Logger: discardLogger(), InternalPartitions: internal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tk.Close)
		return tk
	}
	return newTask, prod, hops
}

// lastPerKey is each key's last output: an aggregate's final result.
func lastPerKey(out []string) []string {
	m := map[string]string{}
	for _, line := range out {
		k, _, _ := strings.Cut(line, " ")
		m[k] = line
	}
	var lines []string
	for _, l := range m {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	return lines
}

// upserted is what a consumer that upserts sessions' updates by (key, window_start) and
// deletes on a retraction holds at the end, sorted.
func upserted(out []string) []string {
	m := map[string]string{}
	for _, line := range out {
		k, v, _ := strings.Cut(line, " ")
		var row struct {
			Start   int64 `json:"window_start"`
			Retract bool  `json:"retract"`
		}
		if err := json.Unmarshal([]byte(v), &row); err != nil {
			m[line] = line // not an update: kept as it is, to differ
			continue
		}
		id := k + "@" + strconv.FormatInt(row.Start, 10)
		if row.Retract {
			delete(m, id)
		} else {
			m[id] = line
		}
	}
	return slices.Sorted(maps.Values(m))
}

// sorted is the records sorted: the rows of a top over windows, each written once.
func sorted(out []string) []string { return slices.Sorted(slices.Values(out)) }

// perKey is the records of each key in their order, keys sorted: a distinct's outputs, whose
// order across keys is its mode's (arrival in real time, key order from a sorted backlog).
func perKey(out []string) []string {
	out = slices.Clone(out)
	slices.SortStableFunc(out, func(a, b string) int {
		ka, _, _ := strings.Cut(a, " ")
		kb, _, _ := strings.Cut(b, " ")
		return strings.Compare(ka, kb)
	})
	return out
}

// withAskBeforeWriting runs f with askBeforeWriting set to ask (the tests run one seed at a
// time).
func withAskBeforeWriting[T any](ask bool, f func() T) T {
	defer func(old bool) { askBeforeWriting = old }(askBeforeWriting)
	askBeforeWriting = ask
	return f()
}

// withFilterBeforeSorting runs f with filterBeforeSorting set to on.
func withFilterBeforeSorting[T any](on bool, f func() T) T {
	defer func(old bool) { filterBeforeSorting = old }(filterBeforeSorting)
	filterBeforeSorting = on
	return f()
}

// withHoldBest runs f with holdBest set to hold.
func withHoldBest[T any](hold bool, f func() T) T {
	defer func(old bool) { holdBest = old }(holdBest)
	holdBest = hold
	return f()
}

// withFilterWindow runs f with the distinct filter's window set to w.
func withFilterWindow[T any](w int64, f func() T) T {
	defer func(old int64) { filterWindow = old }(filterWindow)
	filterWindow = w
	return f()
}

// TestCombineOneAnswer: a writer that combines gives the answer of one that does not, in every
// mode, with aborts on both sides of the repartition topic and with a table smaller than the
// keys (some records go as they are): an aggregate's final results (counts, exact sums,
// filtered counts, string and number extremes), a distinct's records (the same, in the same
// order per key) and the same dead letters; and fewer records cross the repartition topic.
// The aggregate's results are also checked against the orders themselves (checkCombineOracle).
func TestCombineOneAnswer(t *testing.T) {
	eachSeed(t, seedCounts{normal: 8, short: 3, long: 60}, func(t *testing.T, seed uint64, _ int) {
		orders := genCombineOrders(rand.New(rand.NewPCG(seed, 1)), 400)
		customers := genJoinCustomers(rand.New(rand.NewPCG(seed, 2)), 30)
		for _, op := range []struct {
			name, doc string
			final     func([]string) []string
			delay     string // the source's max_delay, when not 2s
		}{
			{"aggregate", combineAggregate, lastPerKey, ""},
			{"distinct", combineDistinct, perKey, ""},
			{"top", combineTop, lastPerKey, ""},
			{"window top", combineWindowTop, sorted, ""},
			{"hopping top", combineHoppingTop, sorted, ""},
			{"finals top", combineFinalsTop, sorted, ""},
			{"join top", combineJoinTop, lastPerKey, ""},
			{"join columns top", combineJoinColumnsTop, lastPerKey, ""},
			{"join columns top one", combineJoinColumnsTopOne, lastPerKey, ""},
			{"join max", combineJoinMax, lastPerKey, ""},
			{"join min", combineJoinMin, lastPerKey, ""},
			{"join max under key", combineJoinUnderKey, lastPerKey, ""},
			{"window aggregate", combineWindowAgg, sorted, ""},
			{"hopping aggregate", combineHoppingAgg, sorted, ""},
			{"session aggregate", combineSessionAgg, sorted, ""},
			{"session updates", strings.Replace(combineSessionAgg, "emit: final", "emit: updates", 1), upserted, ""},
		} {
			config := func(mode string, combine bool, cacheKeys int) string {
				doc := combineConfig(op.doc, mode, combine, cacheKeys)
				if op.delay != "" {
					doc = strings.Replace(doc, "max_delay: 2s", "max_delay: "+op.delay, 1)
				}
				return doc
			}
			// A hopping aggregate's writer projects its records; over tumbling windows or
			// sessions it combines them. (The aggregate of "finals top" reads its input as it
			// is: it filters its results.)
			projected := strings.Contains(op.doc, "hopping:") && strings.Contains(op.doc, "aggregate:") && op.doc != combineFinalsTop
			inputs := map[string][]*kgo.Record{testTopic: orders}
			if customersSource(op.doc) != "" {
				inputs[combineCustomers] = customers
			}
			for _, mode := range []string{"never", "always", "auto"} {
				want := runCombine(t, seed, config(mode, false, 1000), inputs, false)
				if len(want.out) == 0 || len(want.dlq) == 0 {
					t.Fatalf("%s: the plain run wrote %d results and %d dead letters", op.name, len(want.out), len(want.dlq))
				}
				for _, v := range []struct {
					cacheKeys int
					window    int64 // a distinct filter's: 8 lets it pass records unexamined at times
				}{{1000, filterWindow}, {2, filterWindow}, {1000, 8}} {
					if v.window != filterWindow && op.name == "aggregate" {
						continue
					}
					name := fmt.Sprintf("%s mode=%s cache_keys=%d filter_window=%d", op.name, mode, v.cacheKeys, v.window)
					before := joinFiltered.Load()
					got := withFilterWindow(v.window, func() combineRun {
						return runCombine(t, seed, config(mode, true, v.cacheKeys), inputs, true)
					})
					filtered := joinFiltered.Load() - before
					// exact is a run whose records crossing the output topic are a function of
					// the schedule: got, or for a join with a filter before its sorter, a run
					// without it. That filter does not judge the keys the real-time cache holds
					// (joinKey), and the cache evicts at random (makeRoom): the records that
					// cross may differ by a few between two runs of the same schedule (seed
					// 1796628328849775305), never the results.
					exact, exactFilter := got, true
					// run is exact's run with holding (emitTo) and asking before writing as told.
					run := func(hold, ask bool) combineRun {
						return withHoldBest(hold, func() combineRun {
							return withAskBeforeWriting(ask, func() combineRun {
								return withFilterBeforeSorting(exactFilter, func() combineRun {
									return withFilterWindow(v.window, func() combineRun {
										return runCombine(t, seed, config(mode, true, v.cacheKeys), inputs, true)
									})
								})
							})
						})
					}
					if op.doc == combineJoinColumnsTop || op.doc == combineJoinColumnsTopOne || op.doc == combineJoinUnderKey {
						// The join drops before its sorter the orders whose rows could not enter
						// the top or change the max (joinFilter): the same answers and dead
						// letters as sorting them.
						exactFilter = false
						exact = run(true, true)
						if g, w := op.final(exact.out), op.final(got.out); !slices.Equal(g, w) || !slices.Equal(exact.dlq, got.dlq) {
							t.Errorf("seed %d, %s: results or dead letters differ without the filter before the sorter:\n%s", seed, name, diffOutputs(g, w))
						}
						if mode == "always" && filtered == 0 {
							t.Errorf("seed %d, %s: the join's filter before its sorter dropped nothing", seed, name)
						}
						// The join asks the filter before it writes a row: the same records
						// reach the output topic as when the filter judges every row written.
						late := run(true, false)
						if !slices.Equal(exact.out, late.out) || !slices.Equal(exact.dlq, late.dlq) || exact.repart != late.repart {
							t.Errorf("seed %d, %s: asked before writing, %d records crossed the output topic, %d results, %d dead letters; asked as produced, %d, %d, %d",
								seed, name, exact.repart, len(exact.out), len(exact.dlq), late.repart, len(late.out), len(late.dlq))
						}
					}
					if holdsBest[op.name] {
						// A fold holds each result that replaced its key's one value, and drops it
						// when the next replaces it (emitTo): the same answers, fewer records.
						all := run(false, true)
						if g, w := op.final(all.out), op.final(want.out); !slices.Equal(g, w) {
							t.Errorf("seed %d, %s: without holding, results differ from the plain run's:\n%s", seed, name, diffOutputs(w, g))
						}
						// No more: while the filter examines every record (with a short filter
						// window the replaced results it counts as dropped move the windows it lets
						// through unexamined, either way). Not always fewer: when no key of the
						// writer has a result replaced (each join key one pair, as seed
						// 1796564957814936672 draws), holding has nothing to drop;
						// TestEmitToHoldsEachKeysBest shows the records it saves.
						if v.window == filterWindow && exact.repart > all.repart {
							t.Errorf("seed %d, %s: %d records crossed the output topic holding the replaced results, %d without", seed, name, exact.repart, all.repart)
						}
					}
					if g, w := op.final(got.out), op.final(want.out); !slices.Equal(g, w) {
						t.Errorf("seed %d, %s: results differ from the plain run's:\n%s", seed, name, diffOutputs(w, g))
					}
					if !slices.Equal(got.dlq, want.dlq) {
						t.Errorf("seed %d, %s: dead letters differ from the plain run's:\n%s", seed, name, diffOutputs(want.dlq, got.dlq))
					}
					if projected {
						// Every record crosses, most with only the members the aggregate reads.
						if got.repart != want.repart || got.bytes >= want.bytes {
							t.Errorf("seed %d, %s: %d records of %d bytes crossed the repartition topic, against %d of %d without projecting", seed, name, got.repart, got.bytes, want.repart, want.bytes)
						}
					} else if strict := v.cacheKeys > 2 && v.window == filterWindow; got.repart > want.repart || strict && got.repart == want.repart {
						t.Errorf("seed %d, %s: %d records crossed the repartition topic, as many as without combining (%d)", seed, name, got.repart, want.repart)
					}
					if op.name == "aggregate" {
						checkCombineOracle(t, name, orders, lastPerKey(got.out))
					}
					if op.doc == combineJoinUnderKey {
						checkJoinMaxOracle(t, name, orders, customers, lastPerKey(got.out))
					}
					if op.name == "aggregate" && got.partials == 0 {
						t.Errorf("seed %d, %s: no partial state crossed the repartition topic", seed, name)
					}
				}
			}
		}
	})
}

// TestProjectedDeadLettersWhole: a writer that projects its records for a hopping aggregate
// (project.go), or combines them into partial windows or sessions for one over tumbling windows
// or sessions (combine.go),
// sends a record the reader might dead-letter as it is: with a source watermark that leaves
// many orders late for the reader, every dead letter of the reader is an order exactly as it
// was read, late ones among them; and fewer bytes cross the repartition topic.
func TestProjectedDeadLettersWhole(t *testing.T) {
	eachSeed(t, seedCounts{normal: 4, short: 2, long: 30}, func(t *testing.T, seed uint64, _ int) {
		orders := genCombineOrders(rand.New(rand.NewPCG(seed, 1)), 400)
		whole := map[string]bool{}
		missing := 0 // orders the reader's projection refuses (no amount), of a region
		for _, o := range orders {
			whole[string(o.Value)] = true
			if !strings.Contains(string(o.Value), `"amount"`) && strings.Contains(string(o.Value), `"region"`) {
				missing++
			}
		}
		for _, op := range []struct{ name, doc string }{{"window aggregate", combineWindowAgg}, {"hopping aggregate", combineHoppingAgg}, {"session aggregate", combineSessionAgg}} {
			for _, mode := range []string{"never", "always", "auto"} {
				doc := strings.Replace(combineConfig(op.doc, mode, true, 1000), "max_delay: 2s", "max_delay: 100ms", 1)
				got := runCombine(t, seed, doc, map[string][]*kgo.Record{testTopic: orders}, true)
				plain := runCombine(t, seed, strings.Replace(doc, "combine_before_rekey: true", "combine_before_rekey: false", 1),
					map[string][]*kgo.Record{testTopic: orders}, true)
				late := 0
				for _, d := range got.dlq {
					who, rest, _ := strings.Cut(d, " ")
					if who != "totals" {
						continue
					}
					_, value, _ := strings.Cut(rest, ": ")
					if !whole[value] {
						t.Errorf("seed %d, %s mode=%s: a dead letter of the reader is not an order as it was read: %s", seed, op.name, mode, value)
					}
					late++
				}
				if late -= missing; late <= 0 {
					t.Errorf("seed %d, %s mode=%s: no order was late for the reader: the check is idle", seed, op.name, mode)
				}
				if got.bytes >= plain.bytes {
					t.Errorf("seed %d, %s mode=%s: %d bytes crossed the repartition topic, %d without projecting", seed, op.name, mode, got.bytes, plain.bytes)
				}
			}
		}
	})
}

// checkJoinMaxOracle checks combineJoinUnderKey's final results (lastPerKey lines) against the
// orders and customers themselves: per customer id and the tier of that customer's first record,
// the largest amount of the customer's orders (an order without an amount is a dead letter).
func checkJoinMaxOracle(t *testing.T, name string, orders, customers []*kgo.Record, finals []string) {
	t.Helper()
	tier := map[string]int{}
	for _, r := range customers {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tier[string(v.GetStringBytes("id"))]; !ok {
			tier[string(v.GetStringBytes("id"))] = v.GetInt("tier")
			if !v.Exists("tier") {
				tier[string(v.GetStringBytes("id"))] = -1 // its rows are dead letters of the re-key
			}
		}
	}
	want := map[string]*big.Rat{}
	for _, r := range orders {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		cust, amt := string(v.GetStringBytes("customer_id")), v.Get("amount")
		tr, ok := tier[cust]
		if !ok || amt == nil || tr < 0 {
			continue
		}
		a, ok := new(big.Rat).SetString(amt.String())
		if !ok {
			t.Fatalf("amount %s", amt)
		}
		k := fmt.Sprintf("%s/%d", cust, tr)
		if w := want[k]; w == nil || a.Cmp(w) > 0 {
			want[k] = a
		}
	}
	if len(finals) != len(want) {
		t.Errorf("%s: %d (customer, tier) keys in the results, want %d", name, len(finals), len(want))
	}
	for _, line := range finals {
		_, value, _ := strings.Cut(line, " ")
		v, err := fastjson.Parse(value)
		if err != nil {
			t.Fatalf("%s: result %s: %v", name, line, err)
		}
		k := fmt.Sprintf("%s/%d", v.GetStringBytes("cust"), v.GetInt("tier"))
		best, ok := new(big.Rat).SetString(v.Get("best").String())
		if w := want[k]; w == nil || !ok || best.Cmp(w) != 0 {
			t.Errorf("%s: result %s, want best %v for %s", name, line, w, k)
		}
	}
}

// checkCombineOracle checks combineAggregate's final results (lastPerKey lines) against the
// orders themselves: per region, over the orders with a region and an amount, the count, the
// exact sum, the count under 100, the largest order id and the smallest amount.
func checkCombineOracle(t *testing.T, name string, orders []*kgo.Record, finals []string) {
	t.Helper()
	type agg struct {
		n, cheap int
		total    *big.Rat
		low      *big.Rat
		top      string
	}
	want := map[string]*agg{}
	for _, r := range orders {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		region, amt := v.GetStringBytes("region"), v.Get("amount")
		if region == nil || amt == nil {
			continue // a dead letter of the re-key or of the aggregate
		}
		a, ok := new(big.Rat).SetString(amt.String())
		if !ok {
			t.Fatalf("amount %s", amt)
		}
		w := want[string(region)]
		if w == nil {
			w = &agg{total: new(big.Rat), low: a}
			want[string(region)] = w
		}
		w.n++
		w.total.Add(w.total, a)
		if a.Cmp(big.NewRat(100, 1)) < 0 {
			w.cheap++
		}
		if a.Cmp(w.low) < 0 {
			w.low = a
		}
		w.top = max(w.top, string(v.GetStringBytes("order_id")))
	}
	if len(finals) != len(want) {
		t.Errorf("%s: %d regions in the results, want %d", name, len(finals), len(want))
	}
	for _, line := range finals {
		key, val, _ := strings.Cut(line, " ")
		v, err := fastjson.Parse(val)
		if err != nil {
			t.Fatalf("%s: %s: %v", name, line, err)
		}
		w := want[key]
		if w == nil {
			t.Errorf("%s: a result for region %q, which no good order has", name, key)
			continue
		}
		total, _ := new(big.Rat).SetString(v.Get("total").String())
		low, _ := new(big.Rat).SetString(v.Get("low").String())
		if v.GetInt("n") != w.n || v.GetInt("cheap") != w.cheap || total == nil || total.Cmp(w.total) != 0 ||
			low == nil || low.Cmp(w.low) != 0 || string(v.GetStringBytes("top_id")) != w.top {
			t.Errorf("%s: region %s: %s, want n %d, total %s, cheap %d, top_id %s, low %s", name, key, val,
				w.n, w.total.FloatString(2), w.cheap, w.top, w.low.FloatString(2))
		}
	}
}

// diffOutputs lists the lines only one of want and got holds (-: want's, +: got's), at most 10,
// or, when they hold the same lines, the first place their order differs.
func diffOutputs(want, got []string) string {
	n := map[string]int{}
	for _, l := range want {
		n[l]++
	}
	for _, l := range got {
		n[l]--
	}
	var lines []string
	for _, l := range slices.Sorted(maps.Keys(n)) {
		for ; n[l] > 0; n[l]-- {
			lines = append(lines, "- "+l)
		}
		for ; n[l] < 0; n[l]++ {
			lines = append(lines, "+ "+l)
		}
	}
	if len(lines) == 0 {
		for i := range min(len(want), len(got)) {
			if want[i] != got[i] {
				lines = append(lines, fmt.Sprintf("first out of order at %d:", i), "- "+want[i], "+ "+got[i])
				break
			}
		}
	}
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("... %d more", len(lines)-10))
	}
	return fmt.Sprintf("%d lines against %d:\n%s", len(got), len(want), strings.Join(lines, "\n"))
}

// TestRekeyProgressIDs: forks that re-key one input for different operators resume each from
// its own progress (a combining one holds its offset while the others go on), and a commit of
// a sluice before their own IDs (both named by their source then, at one progress) still
// gives them theirs.
func TestRekeyProgressIDs(t *testing.T) {
	pl := mustPlan(t, combineConfig(combineAggregate+`  - name: firsts
    distinct:
      input: orders
      group_by: region, customer_id
      flags: {any: "true"}
    output: out
`, "auto", true, 1000))
	next := func(progress map[string]int64) map[string]int64 {
		tk, err := New(pl, testTopic, 0, Deps{Store: state.NewMem(), Producer: newFakeProducer(), Logger: discardLogger(),
			InternalPartitions: map[string]int32{testGroup + "-totals-repartition": 1, testGroup + "-firsts-repartition": 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Close()
		tk.SetProgress(testTopic, 10, progress)
		out := map[string]int64{}
		for _, c := range tk.chains {
			if c.plan.Source.Topic == testTopic {
				out[c.plan.ID()] = c.next
			}
		}
		return out
	}
	meta, err := DecodeProgress(EncodeProgress(map[string]int64{"rekey:totals": 20}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := next(meta), map[string]int64{"rekey:totals": 20, "rekey:firsts": 10}; !maps.Equal(got, want) {
		t.Errorf("progress %v: chains at %v, want %v", meta, got, want)
	}
	if got, want := next(map[string]int64{"orders": 20}), map[string]int64{"rekey:totals": 20, "rekey:firsts": 20}; !maps.Equal(got, want) {
		t.Errorf("legacy progress: chains at %v, want %v", got, want)
	}
}

// TestTopBoundAfterRestart: a writer filtering for a top over windows drops no record that is
// late at the reader, after its partition moved to a new owner too. The first owner's records
// move the watermark past a window, which the reader then closes; the new owner's source
// watermark starts over, below that window's end, so that only what the first owner committed
// of its announcements (SetProgress) tells it that the reader may have closed the window: its
// records for it go on, and the reader dead-letters each as late, none dropped on the way.
func TestTopBoundAfterRestart(t *testing.T) {
	g := newRestartRig(t, `  - name: totals
    top: {input: orders, group_by: region, n: 1, by: amount, window: {tumbling: 100ms}}
    output: out
`)
	g.step(restartOrder(0, 10, 500), restartOrder(1, 1000, 1)) // the window [0, 100) closes at the reader
	g.restart()
	g.step(restartOrder(2, 20, 10))
	g.step(restartOrder(3, 30, 5), restartOrder(4, 40, 1), restartOrder(5, 1100, 7))
	if late, want := g.deadLetters(), []string{`late "order_id":"o2"`, `late "order_id":"o3"`, `late "order_id":"o4"`}; !slices.Equal(late, want) {
		t.Errorf("dead letters %q, want %q", late, want)
	}
	if n := len(g.prod.committed(testSink)); n != 2 {
		t.Errorf("%d rows, want 2 (the closed windows')", n)
	}
}

// TestPartialSessionsAfterRestart: a writer combining records into partial sessions takes up,
// as its partition's next owner, the watermark its predecessor announced, which its reader holds:
// a record late by it goes as it is (the reader dead-letters it), and one on time is folded and
// merged, not lost in a partial judged late by an earlier record.
func TestPartialSessionsAfterRestart(t *testing.T) {
	g := newRestartRig(t, combineSessionAgg)                 // sessions of a 30ms gap
	g.step(restartOrder(0, 10, 1), restartOrder(1, 1000, 1)) // the reader's watermark: 1000
	g.restart()
	g.step(restartOrder(2, 20, 1))                           // late: 20 + 30 <= 1000
	g.step(restartOrder(3, 960, 1), restartOrder(4, 985, 1)) // 960 late, 985 on time, within the gap
	g.step(restartOrder(5, 2000, 1))                         // closes [10, 40) and [985, 1030)
	if late, want := g.deadLetters(), []string{`late "order_id":"o2"`, `late "order_id":"o3"`}; !slices.Equal(late, want) {
		t.Errorf("dead letters %q, want %q", late, want)
	}
	var rows []string
	for _, r := range g.prod.committed(testSink) {
		rows = append(rows, string(r.Value))
	}
	const base = 1_700_000_000_000
	want := []string{
		fmt.Sprintf(`{"key":"r0","window_start":%d,"window_end":%d,"n":1,"total":1}`, base+10, base+40),
		fmt.Sprintf(`{"key":"r0","window_start":%d,"window_end":%d,"n":2,"total":2}`, base+985, base+1030),
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

// restartOrder is an order of region r0 at base + ts.
func restartOrder(off, ts int64, amount int) *kgo.Record {
	const base = 1_700_000_000_000
	return &kgo.Record{Topic: testTopic, Offset: off, Key: []byte("c1"), Timestamp: time.UnixMilli(base + ts),
		Value: fmt.Appendf(nil, `{"region":"r0","amount":%d,"order_id":"o%d","customer_id":"c1","ts":%d}`, amount, off, base+ts)}
}

// restartRig runs a combining writer (max_delay 0s, in real time) and its reader over the
// operator op step by step, and restarts the writer as its partition's next owner, which takes
// up its committed progress.
type restartRig struct {
	t         *testing.T
	newTask   func(topics ...string) *Task
	prod      *fakeProducer
	repart    string
	w, r      *Task
	wDone     int64
	wProgress map[string]int64
	rNext     int64
}

func newRestartRig(t *testing.T, op string) *restartRig {
	doc := strings.Replace(combineConfig(op, "never", true, 1000), "max_delay: 2s", "max_delay: 0s", 1)
	newTask, prod, hops := combineTasks(t, doc)
	g := &restartRig{t: t, newTask: newTask, prod: prod, repart: hops[0]}
	g.w, g.r = newTask(testTopic), newTask(g.repart)
	return g
}

func (g *restartRig) process(tk *Task, topic string, recs []*kgo.Record) {
	if topic == g.repart {
		tk.ReadAttributes(topic, recs)
	}
	tk.BeforeBatch(topic, Lag{Before: int64(len(recs)), After: 0})
	if err := tk.Process(topic, recs); err != nil {
		g.t.Fatal(err)
	}
	tk.AfterBatch(topic, Lag{})
}

func (g *restartRig) commit() {
	for _, tk := range []*Task{g.w, g.r} {
		pd := checkpointTask(g.t, tk, g.prod)
		g.prod.commit()
		if err := tk.Committed(pd); err != nil {
			g.t.Fatal(err)
		}
		if off, ok := pd.Offsets[testTopic]; ok && tk == g.w {
			g.wDone, g.wProgress = off, pd.Progress[testTopic]
		}
	}
}

// step writes recs through the writer, commits, and lets the reader read what came of them.
func (g *restartRig) step(recs ...*kgo.Record) {
	g.process(g.w, testTopic, recs)
	g.commit()
	var in []*kgo.Record
	for _, rec := range g.prod.committed(g.repart) {
		if rec.Offset >= g.rNext {
			in = append(in, rec)
		}
	}
	if len(in) > 0 {
		g.process(g.r, g.repart, in)
		g.rNext = in[len(in)-1].Offset + 1
	}
	g.commit()
}

// restart makes a new owner of the writer's partition, from its committed offset and progress.
func (g *restartRig) restart() {
	g.w.Close()
	g.w = g.newTask(testTopic)
	if !g.w.Branches(testTopic) {
		g.t.Fatal("a writer whose filter or combining rests on its announcements does not ask for its committed progress")
	}
	if len(g.wProgress) == 0 {
		g.t.Fatalf("the writer committed offset %d with progress %v, want its announcement", g.wDone, g.wProgress)
	}
	g.w.SetProgress(testTopic, g.wDone, g.wProgress)
}

// deadLetters returns each dead letter's reason and order id.
func (g *restartRig) deadLetters() []string {
	var out []string
	for _, rec := range g.prod.committed(testGroup + "-dlq") {
		what := fmt.Sprintf("not an order: %x", rec.Value)
		if i := strings.Index(string(rec.Value), `"order_id"`); i >= 0 {
			what = string(rec.Value[i:][:15])
		}
		out = append(out, hdr(rec, codec.HeaderError)+" "+what)
	}
	return out
}

// TestHostilePartials: a partial state on a repartition topic that its reader cannot merge (a
// window start that is not one of its windows, bytes too short for a start, a state of the wrong
// size, bytes that are not a partial session, a window the reader's watermark has closed) is a
// dead letter with its reason, and the records around it are merged; a partial under another
// layout fails the task. The partials are a combining writer's own, then altered.
func TestHostilePartials(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		alter     func(v []byte) []byte
		late      bool   // a watermark announcement past the window's close comes first
		reason    string // "": merged
	}{
		{"window as written", combineWindowAgg, nil, false, ""},
		{"window start not a window's", combineWindowAgg, func(v []byte) []byte {
			binary.BigEndian.PutUint64(v, binary.BigEndian.Uint64(v)+1)
			return v
		}, false, "does not start with the start of one of totals's windows"},
		{"window too short", combineWindowAgg, func(v []byte) []byte { return v[:7] }, false, "does not start with the start"},
		{"window state cut", combineWindowAgg, func(v []byte) []byte { return v[:len(v)-1] }, false, "a partial state of"},
		{"window closed", combineWindowAgg, nil, true, "late"},
		{"sessions as written", combineSessionAgg, nil, false, ""},
		{"sessions cut", combineSessionAgg, func(v []byte) []byte { return v[:len(v)-1] }, false, "not a partial state of totals"},
		{"sessions none", combineSessionAgg, func(v []byte) []byte { return []byte{0, 0, 0, 0} }, false, "not a partial state of totals"},
		{"window start beyond the years", combineWindowAgg, func(v []byte) []byte {
			binary.BigEndian.PutUint64(v, uint64(math.MaxInt64/500*500)) // its windows' arithmetic would overflow
			return v
		}, false, "does not start with the start"},
		{"sessions beyond the years", combineSessionAgg, func(v []byte) []byte {
			first := int64(math.MinInt64 + 1)
			binary.BigEndian.PutUint64(v[4:], uint64(first))
			binary.BigEndian.PutUint64(v[12:], math.MaxInt64)
			return v
		}, false, "not a partial state of totals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := combineConfig(tc.doc, "never", true, 1000)
			newTask, prod, hops := combineTasks(t, doc)
			hop := hops[0]
			// A writer in real time combines once it has committed an announcement of its
			// watermark: one batch, a checkpoint, then the rest.
			w := newTask(testTopic)
			orders := genCombineOrders(rand.New(rand.NewPCG(3, 1)), 60)
			for _, batch := range [][]*kgo.Record{orders[:10], orders[10:]} {
				processCommitted(t, w, prod, testTopic, batch)
			}
			var partial *kgo.Record
			for _, r := range prod.committed(hop) {
				if _, ok := codec.PartialOf(r.Headers); ok && partial == nil {
					partial = r
				}
			}
			if partial == nil {
				t.Fatal("the writer wrote no partial state")
			}
			bad := *partial
			bad.Value = slices.Clone(partial.Value)
			if tc.alter != nil {
				bad.Value = tc.alter(bad.Value)
			}
			var in []*kgo.Record
			if tc.late {
				in = append(in, &kgo.Record{Topic: hop, Headers: codec.MarkHeaders(codec.AppendMark(nil, math.MaxInt64/2), 0)})
			}
			in = append(in, &bad)
			for i, r := range in {
				r.Topic, r.Offset = hop, int64(i)
			}
			before := len(prod.committed(testGroup + "-dlq")) // the writer's (an order without a region)
			processCommitted(t, newTask(hop), prod, hop, in)
			dead := prod.committed(testGroup + "-dlq")[before:]
			if tc.reason == "" {
				if len(dead) != 0 {
					reason, _ := header(dead[0], codec.HeaderError)
					t.Fatalf("%d dead letters (%s), want the partial merged", len(dead), reason)
				}
				return
			}
			if len(dead) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dead))
			}
			if reason, _ := header(dead[0], codec.HeaderError); !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", reason, tc.reason)
			}
			if !bytes.Equal(dead[0].Value, bad.Value) {
				t.Errorf("dead letter %x, want the partial as read %x", dead[0].Value, bad.Value)
			}
		})
	}
	t.Run("another layout", func(t *testing.T) {
		newTask, _, hops := combineTasks(t, combineConfig(combineSessionAgg, "never", true, 1000))
		r := newTask(hops[0])
		in := []*kgo.Record{{Topic: hops[0], Key: []byte("r1"), Value: []byte{0, 0, 0, 0}, Headers: codec.PartialHeaders("not this layout")}}
		r.ReadAttributes(hops[0], in)
		r.BeforeBatch(hops[0], Lag{})
		err := r.Process(hops[0], in)
		var le *LayoutError
		if !errors.As(err, &le) {
			t.Fatalf("Process: %v, want a layout error", err)
		}
	})
}

// processCommitted processes recs of topic through tk in real time, as one batch, and commits a
// checkpoint of it.
func processCommitted(t *testing.T, tk *Task, prod *fakeProducer, topic string, recs []*kgo.Record) {
	t.Helper()
	tk.ReadAttributes(topic, recs)
	tk.BeforeBatch(topic, Lag{})
	if err := tk.Process(topic, recs); err != nil {
		t.Fatal(err)
	}
	tk.AfterBatch(topic, Lag{})
	pd := checkpointTask(t, tk, prod)
	prod.commit()
	if err := tk.Committed(pd); err != nil {
		t.Fatal(err)
	}
}

// TestPartialSessionsBounded: a key with more sessions than a partial of boundedRecord bytes
// holds (orders of one region further apart than the gap, read as one backlog) crosses in
// several partials, each small enough for any repartition topic, and the sessions are the plain
// run's.
func TestPartialSessionsBounded(t *testing.T) {
	orders := make([]*kgo.Record, 600)
	for i := range orders {
		orders[i] = restartOrder(int64(i), int64(i)*100, i%7) // 100ms apart: a session each
	}
	inputs := map[string][]*kgo.Record{testTopic: orders}
	for _, mode := range []string{"always", "auto"} {
		want := runCombine(t, 1, combineConfig(combineSessionAgg, mode, false, 1000), inputs, false)
		got := runCombine(t, 1, combineConfig(combineSessionAgg, mode, true, 1000), inputs, false)
		if !slices.Equal(sorted(got.out), sorted(want.out)) || len(want.out) < 500 {
			t.Fatalf("%s: %d sessions, the plain run %d:\n%s", mode, len(got.out), len(want.out), diffOutputs(sorted(want.out), sorted(got.out)))
		}
		if got.partials < 2 || got.maxPartial > boundedRecord {
			t.Errorf("%s: %d partials, the largest %d bytes, want several of at most %d", mode, got.partials, got.maxPartial, boundedRecord)
		}
	}
}

// TestWindowTopFilterBeforeAnnouncing: a writer filtering for a top over windows that never
// announces idleness (no watermark.idle_after) filters from its first record, before it has
// announced anything (its reader, not having heard from it, takes nothing as late: Nexmark q5's
// writer reads windows' finals, whose watermark comes only after them all); one that may
// announce idleness lets records go unexamined until it has a committed announcement.
func TestWindowTopFilterBeforeAnnouncing(t *testing.T) {
	orders := genCombineOrders(rand.New(rand.NewPCG(1, 1)), 400)
	crossed := func(combine bool, idle string) int {
		doc := combineConfig(combineWindowTop, "never", combine, 1000)
		if idle != "" {
			doc = strings.Replace(doc, "max_delay: 2s", "max_delay: 2s, idle_after: "+idle, 1)
		}
		newTask, prod, hops := combineTasks(t, doc)
		w := newTask(testTopic)
		if err := w.Process(testTopic, orders); err != nil {
			t.Fatal(err)
		}
		checkpointTask(t, w, prod)
		prod.commit()
		n := 0
		for _, r := range prod.committed(hops[0]) {
			if len(r.Headers) == 0 { // not an announcement
				n++
			}
		}
		return n
	}
	plain := crossed(false, "")
	if got := crossed(true, ""); got >= plain/2 {
		t.Errorf("without idle_after: %d of the %d orders that re-key crossed before the writer announced anything; want the filter to drop most", got, plain)
	}
	if got := crossed(true, "1s"); got != plain {
		t.Errorf("with idle_after: %d of the %d orders that re-key crossed before the writer's first committed announcement; want all, unexamined", got, plain)
	}
}

// TestEmitToHoldsEachKeysBest: a fold's emission (emitTo) for a top of one holds each key's
// best result so far and writes it when a result of another key, one the filter does not
// examine, or the end of the fold (release) comes; a result that replaces it drops it; after the
// filter's slots are reset, the first result of a key replaces nothing, and the one held goes
// first. The topic gets the results it would get without holding, less the replaced ones, in
// the same order.
func TestEmitToHoldsEachKeysBest(t *testing.T) {
	top, err := operators.NewTop("best", configs.Top{N: 1, By: "amount"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct{ key, value string } // value "": a tombstone
	for _, tc := range []struct {
		name  string
		limit int // the filter's keys before its slots are reset
		in    []result
		want  []string // key=amount as produced, in order
	}{
		{
			name:  "replaced within a key",
			limit: 100,
			in: []result{
				{"a", `{"amount":1}`}, {"a", `{"amount":5}`}, {"a", `{"amount":3}`}, {"a", `{"amount":7}`},
				{"b", `{"amount":2}`}, {"b", ""}, {"b", `{"amount":4}`},
				{"a", `{"amount":6}`}, {"a", `{"amount":8}`}, {"c", `{"amount":"x"}`}, {"c", `{"amount":9}`},
			},
			// a:1 and a:5 replaced, a:3 beaten; b:2 released by the tombstone, which the filter
			// does not examine; b:4 replaces b:2's value, but b:2 was written: b:4 is held;
			// a:6 beaten by a:7; a:8 held after b:4; c's unreadable value goes as it is.
			want: []string{"a=7", "b=2", "b=", "b=4", "a=8", `c="x"`, "c=9"},
		},
		{
			name:  "slots reset",
			limit: 1,
			in:    []result{{"a", `{"amount":5}`}, {"a", `{"amount":8}`}, {"a", `{"amount":9}`}},
			// Each result finds the slots full (one key) and reset: none replaces anything.
			want: []string{"a=5", "a=8", "a=9"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := top.Bound()
			cb := &combiner{bound: b, best: newSlotSet(b.SlotSize()), limit: tc.limit}
			cb.slot, cb.slotN = cb.best.slot, cb.best.add
			c := &chain{plan: plan.ChainPlan{SinkTopic: "out"}, comb: cb}
			p := newFakeProducer()
			out := 0
			emit, release := (&Task{}).emitTo(c, p, &Pending{}, &out)
			for _, r := range tc.in {
				var v []byte
				if r.value != "" {
					v = []byte(r.value)
				}
				emit([]byte(r.key), v, 0)
			}
			release()
			var got []string
			for _, r := range p.txn {
				amount := strings.TrimSuffix(strings.TrimPrefix(string(r.Value), `{"amount":`), "}")
				got = append(got, string(r.Key)+"="+amount)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("produced %q, want %q", got, tc.want)
			}
			if out != len(tc.want) || c.recordsOut != int64(len(tc.want)) {
				t.Errorf("counted %d (chain %d), produced %d", out, c.recordsOut, len(tc.want))
			}
		})
	}
}
