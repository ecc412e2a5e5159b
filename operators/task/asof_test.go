package task

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The as-of join's metamorphic test: orders joined with the customers row version valid at
// their event time, the table read as a stream of versions (updates and tombstones, out of
// order), in both modes, random interleavings, switches and aborts. The oracle: a table
// version is late when the table's watermark had passed its time, an order when the orders'
// watermark had passed its time + versions; an order is emitted once the smaller watermark
// passed its time, with the last on-time version at or before it (in the table's log order
// among equal times), null (left) or nothing (inner) if none or a tombstone.

// asofSelect is the select of the as-of join's metamorphic test: a member, a member path of the
// row, the key, and a column that fails on a quarter of the records (null there).
const asofSelect = `, select: [id, {region: customers.region}, {k: key}, {n: "id % 4 == 0 ? id % 0 : id + 1"}]`

func asofConfig(mode, typ string, versions, maxDelay int64, cacheKeys int, sel bool) string {
	if sel {
		typ += asofSelect
	}
	return fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: meta
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: ./data, cache_keys: %d}
backlog: {enter_lag: 100, exit_lag: 20, sort_memory: 1MiB, mode: %s, progress_interval: 0s}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts, watermark: {max_delay: %dms}}
tables:
  customers: {topic: %s, key: customer_id, timestamp: ts, versions: %dms, watermark: {max_delay: %dms}}
operators:
  - name: %s
    join: {stream: orders, table: customers, as_of: event_time, type: %s}
    output: out
sinks:
  out: {topic: %s}
`, cacheKeys, mode, cgOrders, maxDelay, cgRefunds, versions, maxDelay, sjOp, typ, cgSink)
}

func TestAsOfJoinOneAnswerTwoModes(t *testing.T) {
	seeds := 15
	if *flagLong {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if *flagSeed != 0 && seed != *flagSeed {
			continue
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { asofOneAnswer(t, seed) })
	}
}

func asofOneAnswer(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 4321))
	maxDelay := []int64{0, 300, 2000}[rng.IntN(3)]
	versions := []int64{0, 500, 100000}[rng.IntN(3)]
	typ := []string{"inner", "left"}[rng.IntN(2)]
	sel := rng.IntN(2) == 0
	n := 150 + rng.IntN(700)
	keys := 1 + rng.IntN([]int{3, 20}[rng.IntN(2)])
	base := int64(1_767_225_600_000)
	jitter := int64(rng.IntN(3)) * 700
	type ev struct {
		key, value string
		ts         int64
		tomb       bool
	}
	var evs [2][]ev
	var inputs [2][]*kgo.Record
	for i := range n {
		side := 0
		if rng.IntN(3) == 0 {
			side = 1
		}
		key := "c-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*40 + rng.Int64N(jitter+1) - jitter/2
		var value []byte
		e := ev{key: key, ts: ts}
		if side == 0 {
			value = fmt.Appendf(nil, `{"id":%d,"customer_id":%q,"ts":%d}`, i, key, ts)
			e.value = string(value)
		} else if rng.IntN(6) == 0 {
			e.tomb = true
		} else {
			value = fmt.Appendf(nil, `{"customer_id":%q,"region":"r-%d","ts":%d}`, key, i, ts)
			e.value = string(value)
		}
		topic := []string{cgOrders, cgRefunds}[side]
		r := &kgo.Record{Topic: topic, Offset: int64(len(inputs[side])), Key: []byte(key), Value: value}
		if e.tomb {
			r.Timestamp = timeMs(ts)
		}
		inputs[side] = append(inputs[side], r)
		evs[side] = append(evs[side], e)
	}
	// The oracle.
	var onTime [2][]ev
	late := 0
	final := [2]int64{math.MinInt64, math.MinInt64}
	for side := range 2 {
		wm := int64(math.MinInt64)
		for _, e := range evs[side] {
			wm = max(wm, e.ts-maxDelay)
			lateBy := e.ts
			if side == 0 {
				lateBy = e.ts + versions
			}
			if wm > lateBy {
				late++
				continue
			}
			onTime[side] = append(onTime[side], e)
		}
		final[side] = wm
	}
	opWM := min(final[0], final[1])
	var want []string
	for _, o := range onTime[0] {
		if opWM <= o.ts {
			continue // still held at the end
		}
		var row *ev
		for i := range onTime[1] {
			v := &onTime[1][i]
			if v.key == o.key && v.ts <= o.ts && (row == nil || v.ts >= row.ts) {
				row = v
			}
		}
		if (row == nil || row.tomb) && typ != "left" {
			continue
		}
		rowJSON := "null"
		if row != nil && !row.tomb {
			rowJSON = row.value
		}
		if !sel {
			want = append(want, o.key+" "+o.value[:len(o.value)-1]+`,"customers":`+rowJSON+`}`)
			continue
		}
		var x struct{ ID int64 }
		var c struct{ Region *string }
		if json.Unmarshal([]byte(o.value), &x) != nil || json.Unmarshal([]byte(rowJSON), &c) != nil {
			t.Fatal("oracle: bad JSON")
		}
		region, n := "null", strconv.FormatInt(x.ID+1, 10)
		if c.Region != nil {
			region = strconv.Quote(*c.Region)
		}
		if x.ID%4 == 0 {
			n = "null"
		}
		want = append(want, o.key+" "+fmt.Sprintf(`{"id":%d,"region":%s,"k":%q,"n":%s}`, x.ID, region, o.key, n))
	}
	sort.Strings(want)
	for run, mode := range []string{"never", "always", "auto", "auto", "auto"} {
		rr := rand.New(rand.NewPCG(seed, uint64(run)+20))
		r := runTwoInputs(t, rr, run, func(cacheKeys int) string { return asofConfig(mode, typ, versions, maxDelay, cacheKeys, sel) }, inputs[0], inputs[1])
		got, dead, d, cacheKeys := r.got, r.dead, r.d, r.cacheKeys
		if !slices.Equal(got, want) {
			t.Fatalf("run %d (%s, %s, select %v, versions %d, max_delay %d, cache %d, aborts %d, backlog %v): outputs differ from the oracle (%d got, %d want):\n%s",
				run, mode, typ, sel, versions, maxDelay, cacheKeys, d.aborts, d.backlogBatches, len(got), len(want), lineDiff(want, got))
		}
		if dead != late {
			t.Fatalf("run %d (%s): %d dead letters, want %d late records", run, mode, dead, late)
		}
	}
}

func timeMs(ms int64) time.Time { return time.UnixMilli(ms) }

// lineDiff lists the lines only in want (-) and only in got (+), at most 12.
func lineDiff(want, got []string) string {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var out []string
	for l, n := range count {
		switch {
		case n > 0:
			out = append(out, fmt.Sprintf("- %dx %s", n, l))
		case n < 0:
			out = append(out, fmt.Sprintf("+ %dx %s", -n, l))
		}
	}
	sort.Strings(out)
	if len(out) > 12 {
		out = append(out[:12], fmt.Sprintf("... %d more", len(out)-12))
	}
	return strings.Join(out, "\n")
}
