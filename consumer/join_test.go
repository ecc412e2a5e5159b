package consumer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/state"
)

// The engine tests of stream-table joins: orders left-joined with the customers table, the
// joined orders written to the sink. What is checked is what users see: the committed sink,
// the committed dead letters of the table's bad rows (exactly once each), the group's offsets.

const tableTopic = "customers"

// newJoinCluster is newCluster with the customers topic (compacted, as many partitions as
// orders).
func newJoinCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c := newCluster(t)
	adm := admin(t, c.ListenAddrs())
	resp, err := adm.CreateTopic(t.Context(), partitions, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, tableTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", tableTopic, err)
	}
	return c
}

func newJoinConfig(t *testing.T, brokers []string) *configs.Config {
	t.Helper()
	doc := fmt.Sprintf(`
kafka: {brokers: [%s]}
group: g
instance_id: i-0
processing: {guarantee: exactly_once, commit_interval: 30ms, state_dir: %q}
backlog: {enter_lag: 1000000, exit_lag: 100, sort_memory: 4MiB, mode: auto, progress_interval: 0s}
http: {listen: "off"}
sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
tables:
  customers: {topic: %s, key: customer_id}
operators:
  - name: enriched
    join: {stream: orders, table: customers, type: left}
    output: out
sinks:
  out: {topic: %s, format: json}
`, strings.Join(brokers, ", "), t.TempDir(), inputTopic, tableTopic, sinkTopic)
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// produceCustomers writes one row per customer c-000..c-(n-1) and then a row of c-003 that is
// not JSON (a dead letter of the table), and returns the end offsets of the customers topic.
func produceCustomers(t *testing.T, brokers []string, n int) map[int32]int64 {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		k := fmt.Sprintf("c-%03d", i)
		recs = append(recs, &kgo.Record{Topic: tableTopic, Key: []byte(k), Value: fmt.Appendf(nil, `{"customer_id":%q,"region":"r%d"}`, k, i%4)})
	}
	recs = append(recs, &kgo.Record{Topic: tableTopic, Key: []byte("c-003"), Value: []byte(`{"customer_id":"c-003","region":`)})
	produceRecords(t, brokers, recs...)
	ends, err := admin(t, brokers).ListEndOffsets(t.Context(), tableTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// tableDeadLetters returns the committed dead letters of the customers topic, by their source
// offset ("partition/offset" -> count).
func tableDeadLetters(t *testing.T, brokers []string, cfg *configs.Config) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range readCommitted(t, brokers, cfg.DLQTopic()) {
		if header(r, "sluice.source.topic") == tableTopic {
			out[header(r, "sluice.source.partition")+"/"+header(r, "sluice.source.offset")]++
		}
	}
	return out
}

// committedTable returns the group's committed offsets of the customers topic.
func committedTable(t *testing.T, adm *kadm.Client, group string) map[int32]int64 {
	t.Helper()
	fo, err := adm.FetchOffsets(t.Context(), group)
	if err != nil {
		return nil // the group is forming
	}
	out := map[int32]int64{}
	fo.Each(func(o kadm.OffsetResponse) {
		if o.Topic == tableTopic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// TestJoinAbortDoesNotReadTableAgain: an abort after the table's snapshot was loaded and
// committed (its dead letter with it) must not read the table again from the start. Today
// Task.Aborted names a table only when it moved since the last commit, and the consumer
// rewinds every other partition it dispatched since the assignment to the first offset it
// dispatched (runner.first): the whole table is read again while the orders stream on (they
// join older row versions meanwhile), and every dead letter of the table is committed again.
//
// Fix (operators/task/checkpoint.go, Aborted): name every table in the seeks, at its committed
// offset (tb.committed >= 0) in the general path and at tb.next in the untouched-backlog path
// (which keeps its dead letters); or have the consumer never apply runner.first to a table.
func TestJoinAbortDoesNotReadTableAgain(t *testing.T) {
	c := newJoinCluster(t)
	brokers := c.ListenAddrs()
	ends := produceCustomers(t, brokers, 10)
	cfg := newJoinConfig(t, brokers)
	e := newEngine(t, cfg, nil)
	e.start(t)
	adm := admin(t, brokers)
	waitFor(t, 20*time.Second, "the table's offsets (and its dead letter) to be committed", func() (bool, error) {
		got := committedTable(t, adm, cfg.Group)
		for p, end := range ends {
			if end > 0 && got[p] != end {
				return false, e.failed()
			}
		}
		return true, e.failed()
	})
	if dl := tableDeadLetters(t, brokers, cfg); len(dl) != 1 {
		t.Fatalf("table dead letters %v after the load, want one", dl)
	}
	// The first checkpoint with joined orders aborts.
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: sinkTopic, Err: kerr.InvalidRecord})
	in := orders{n: 40, keys: 10, seed: 3}
	produce(t, brokers, in)
	waitFor(t, 20*time.Second, "the fault to hit", func() (bool, error) { return fault.Hits() == 1, e.failed() })
	waitCaughtUp(t, e, adm)
	if n := e.metric(t, "sluice_txn_aborts_total"); n < 1 {
		t.Fatalf("sluice_txn_aborts_total = %v, want >= 1", n)
	}
	if out := readCommitted(t, brokers, sinkTopic); len(out) != in.n {
		t.Errorf("%d joined orders committed, want %d", len(out), in.n)
	}
	dl := tableDeadLetters(t, brokers, cfg)
	for at, n := range dl {
		if n != 1 {
			t.Errorf("the dead letter of customers %s was committed %d times, want once (the abort read the table again)", at, n)
		}
	}
	if !strings.Contains(e.logs.tail(200), "checkpoint aborted") {
		t.Logf("log:\n%s", e.logs.tail(50))
	}
	e.stopClean(t)
}

// TestTableDeadLetterSurvivesRestart: a table row that is a dead letter is applied (skipped) and
// its offset recorded in the store at once, but its dead letter waits for the next checkpoint.
// When the process ends before that checkpoint commits (here: every checkpoint fails until it
// gives up; a kill -9 does the same), the next start reads the table from the store's offset,
// past the row, and its dead letter is never written: bad input silently lost. The group's
// committed offset of the table, which moves only with the table's dead letters, is still
// before the row.
//
// Fix (consumer/runner.go startTables, operators/task/table.go): read a table from the
// smaller of the store's offset and the group's committed offset (kadm FetchOffsets; rows
// applied twice change nothing), and produce dead letters only for offsets at or past the
// group's committed offset, so that a fresh or lagging store does not commit them twice.
func TestTableDeadLetterSurvivesRestart(t *testing.T) {
	c := newJoinCluster(t)
	brokers := c.ListenAddrs()
	produceCustomers(t, brokers, 10)
	cfg := newJoinConfig(t, brokers)
	cfg.Processing.MaxCheckpointFailures = 3
	store := state.NewMem()
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.DLQTopic(), Err: kerr.InvalidRecord, Count: -1})
	e := newEngine(t, cfg, store)
	e.start(t)
	select {
	case <-e.done:
		t.Logf("first run ended: %v", e.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the first run did not give up on its failing checkpoints")
	}
	fault.Remove()

	e2 := newEngine(t, cfg, store)
	e2.start(t)
	in := orders{n: 20, keys: 10, seed: 4}
	produce(t, brokers, in)
	adm := admin(t, brokers)
	waitCaughtUp(t, e2, adm)
	dl := tableDeadLetters(t, brokers, cfg)
	if len(dl) != 1 {
		t.Errorf("table dead letters %v, want the bad row of c-003 once (committed table offsets: %v)", dl, committedTable(t, adm, cfg.Group))
	}
	e2.stopClean(t)
}

// TestRepartitionPurgedUpToCommitted: orders joined with customers and summed by
// customers.region go through the repartition topic; the totals per region are exact, and
// the records of the repartition topic are deleted (DeleteRecords) only below the offsets the
// group committed for it.
func TestRepartitionPurgedUpToCommitted(t *testing.T) {
	c := newJoinCluster(t)
	brokers := c.ListenAddrs()
	produceCustomers(t, brokers, 10) // c-i in region r(i mod 4); c-003's bad row leaves its row
	cfg := newJoinConfig(t, brokers)
	cfg.Operators = []configs.Operator{
		{Name: "enriched", Join: &configs.Join{Stream: "orders", Table: "customers", Type: configs.JoinInner, AsOf: "processing"}},
		{Name: "by_region", Aggregate: &configs.Aggregate{Input: "enriched", GroupBy: "customers.region",
			Fields: map[string]map[string]any{"amount": {"sum": "amount"}, "orders": {"count": map[string]any{}}}}, Output: "out"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	repart := cfg.RepartitionTopic("by_region")
	in := orders{n: 400, keys: 12, seed: 7} // c-010 and c-011 have no row: dropped by the inner join
	produce(t, brokers, in)
	e := newEngine(t, cfg, nil)
	e.start(t)
	adm := admin(t, brokers)
	waitCaughtUp(t, e, adm)
	want := map[string]total{}
	in.each(func(key string, cents, _ int64) {
		var i int
		fmt.Sscanf(key, "c-%d", &i)
		if i >= 10 {
			return
		}
		r := fmt.Sprintf("r%d", i%4)
		tt := want[r]
		tt.cents += cents
		tt.count++
		want[r] = tt
	})
	waitFor(t, 20*time.Second, "the region totals", func() (bool, error) {
		got := readTotals(t, brokers)
		if len(got) != len(want) {
			return false, e.failed()
		}
		for k, w := range want {
			if got[k] != w {
				return false, e.failed()
			}
		}
		return true, e.failed()
	})
	// The member consumes the orders, the table and the repartition topic, every partition of
	// each (sluice run sets its memory limit by this count).
	if got, want := e.partitions.Load(), int64(3*partitions); got != want {
		t.Errorf("Options.Partitions reported %d topic-partitions consumed, want %d (orders, %s, %s)", got, want, tableTopic, repart)
	}
	var purged bool
	waitFor(t, 20*time.Second, "the repartition topic purged up to its committed offsets", func() (bool, error) {
		starts, err := adm.ListStartOffsets(t.Context(), repart)
		if err != nil || starts.Error() != nil {
			return false, e.failed()
		}
		fo, err := adm.FetchOffsets(t.Context(), cfg.Group)
		if err != nil {
			return false, e.failed()
		}
		committed := map[int32]int64{}
		fo.Each(func(o kadm.OffsetResponse) {
			if o.Topic == repart {
				committed[o.Partition] = o.At
			}
		})
		purged = false
		var bad error
		starts.Each(func(o kadm.ListedOffset) {
			if o.Offset > committed[o.Partition] {
				bad = fmt.Errorf("%s[%d] starts at %d, past the committed offset %d", repart, o.Partition, o.Offset, committed[o.Partition])
			}
			if o.Offset > 0 {
				purged = true
			}
		})
		if bad != nil {
			return false, bad
		}
		return purged, e.failed()
	})
	e.stopClean(t)
}

// TestTableDeadLetterOnceOnFreshStore: a task that starts without the table in its store (a
// partition moved to a new instance when the group scales out, a lost state dir) reads the
// table from its log start, and commits again every dead letter of the table that the
// previous owner committed: the group's committed offset of the table says they were. Same
// fix as TestTableDeadLetterSurvivesRestart.
func TestTableDeadLetterOnceOnFreshStore(t *testing.T) {
	c := newJoinCluster(t)
	brokers := c.ListenAddrs()
	ends := produceCustomers(t, brokers, 10)
	cfg := newJoinConfig(t, brokers)
	adm := admin(t, brokers)
	e := newEngine(t, cfg, nil)
	e.start(t)
	waitFor(t, 20*time.Second, "the table's offsets (and its dead letter) to be committed", func() (bool, error) {
		got := committedTable(t, adm, cfg.Group)
		for p, end := range ends {
			if end > 0 && got[p] != end {
				return false, e.failed()
			}
		}
		return true, e.failed()
	})
	e.stopClean(t)

	e2 := newEngine(t, cfg, nil) // another instance's store
	e2.start(t)
	produce(t, brokers, orders{n: 20, keys: 10, seed: 5})
	waitCaughtUp(t, e2, adm)
	for at, n := range tableDeadLetters(t, brokers, cfg) {
		if n != 1 {
			t.Errorf("the dead letter of customers %s was committed %d times, want once", at, n)
		}
	}
	e2.stopClean(t)
}
