package consumer_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/state"
)

// TestEngineProcessesBacklogExactly: an engine started over a backlog processes all of it. The
// output it commits (read_committed) holds each customer's exact total, the group's committed
// offsets reach the input's end offsets, and Run returns nil when its context is cancelled.
func TestEngineProcessesBacklogExactly(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 600, keys: 40, seed: 1}
	produce(t, brokers, in)

	e := newEngine(t, newConfig(t, brokers, pipelineOpts{}), nil)
	e.start(t)
	adm := admin(t, brokers)
	waitCaughtUp(t, e, adm)
	e.stopClean(t)

	ends, committed, err := offsets(t.Context(), adm, e.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range ends {
		if committed[p] != end || end == 0 {
			t.Errorf("partition %d: committed offset %d, end offset %d; want equal and > 0", p, committed[p], end)
		}
	}
	checkTotals(t, expected(in), readTotals(t, brokers))
	if n := e.metric(t, "sluice_commits_total"); n < 1 {
		t.Errorf("sluice_commits_total = %v, want >= 1", n)
	}
}

// TestShutdownCheckpoints: with a commit interval that never elapses, nothing is committed while the engine runs, and cancelling Run's context commits everything it processed: the committed
// offsets reach the end offsets and the output holds the exact totals.
func TestShutdownCheckpoints(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 300, keys: 25, seed: 2}
	produce(t, brokers, in)

	e := newEngine(t, newConfig(t, brokers, pipelineOpts{commitInterval: "1m"}), nil)
	e.start(t)
	adm := admin(t, brokers)
	waitProcessed(t, e, in.n)
	_, committed, err := offsets(t.Context(), adm, e.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) != 0 {
		t.Fatalf("offsets %v committed before the commit interval elapsed or Run ended", committed)
	}

	if err := e.stopAndWait(t); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	ok, err := caughtUp(t.Context(), adm, e.cfg.Group)
	if err != nil || !ok {
		ends, committed, _ := offsets(t.Context(), adm, e.cfg.Group)
		t.Fatalf("after a clean shutdown: committed %v, end offsets %v (err %v); want equal", committed, ends, err)
	}
	checkTotals(t, expected(in), readTotals(t, brokers))
}

// TestCommitOnCatchUp: with processing.commit_on_catch_up a caught-up engine
// commits as soon as it has processed what it fetched, long before a commit interval that never
// elapses: the offsets reach the end and the outputs hold the exact totals while Run goes on.
func TestCommitOnCatchUp(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 300, keys: 25, seed: 3}
	produce(t, brokers, in)
	e := newEngine(t, newConfig(t, brokers, pipelineOpts{commitInterval: "1m", catchUp: true}), nil)
	e.start(t)
	adm := admin(t, brokers)
	waitCaughtUp(t, e, adm)
	checkTotals(t, expected(in), readTotals(t, brokers))
	more := orders{n: 100, keys: 25, seed: 4}
	produce(t, brokers, more)
	waitCaughtUp(t, e, adm)
	checkTotals(t, expected(in, more), readTotals(t, brokers))
}

// TestCancelDuringCheckpoint: cancelling Run's context while a checkpoint is committing is
// still a clean shutdown: Run returns nil, the checkpoint's outcome is settled (no transaction
// left open), and the committed output holds the exact totals of the committed input offsets.
func TestCancelDuringCheckpoint(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 200, keys: 20, seed: 12}
	produce(t, brokers, in)
	cfg := newConfig(t, brokers, pipelineOpts{})
	e := newEngine(t, cfg, nil)

	// Hold the first EndTxn(commit) in the broker until Run's context is cancelled and Run has
	// returned (or a second has passed, if Run rightly waits for the commit).
	held, cancelled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req := r.(*kmsg.EndTxnRequest); !req.Commit || req.TransactionalID != cfg.TransactionalID() {
			return nil, nil, false
		}
		once.Do(func() {
			close(held)
			c.SleepControl(func() {
				<-cancelled
				select {
				case <-e.done:
				case <-time.After(time.Second):
				}
			})
		})
		c.DropControl()
		return nil, nil, false
	})
	e.start(t)
	waitFor(t, 20*time.Second, "a checkpoint to commit", func() (bool, error) {
		select {
		case <-held:
			return true, nil
		default:
			return false, e.failed()
		}
	})
	e.stop()
	close(cancelled)
	if err := e.stopAndWait(t); err != nil {
		t.Errorf("Run cancelled during a checkpoint = %v, want nil", err)
	}
	adm := admin(t, brokers)
	txns, err := adm.DescribeTransactions(t.Context(), cfg.TransactionalID())
	if err != nil {
		t.Fatal(err)
	}
	for _, tx := range txns {
		if tx.State == "Ongoing" {
			t.Errorf("transaction %s still Ongoing (partitions %v) after Run returned", tx.TxnID, tx.Topics)
		}
	}
	// Whatever was processed, the output committed matches the input offsets committed.
	_, committed, err := offsets(t.Context(), adm, cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	checkTotals(t, inputTotals(t, brokers, committed), readTotals(t, brokers))
}

// TestBacklogSwitchesToRealtime: a backlog above backlog.enter_lag puts each task in backlog
// mode; once it has caught up the task folds the backlog, switches to real-time (counted in
// sluice_backlog_switches_total{direction="to_realtime"}) and stays there for live input. The
// totals are exact across the switch.
func TestBacklogSwitchesToRealtime(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	backlog := orders{n: 1000, keys: 50, seed: 3} // ~500 a partition, enter_lag 100
	produce(t, brokers, backlog)
	adm := admin(t, brokers)
	ends, err := adm.ListEndOffsets(t.Context(), inputTopic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets: %v %v", err, ends.Error())
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset <= 100 {
			t.Fatalf("partition %d holds %d records: not a backlog above enter_lag 100", o.Partition, o.Offset)
		}
	})

	e := newEngine(t, newConfig(t, brokers, pipelineOpts{enterLag: 100, exitLag: 10}), nil)
	e.start(t)
	sawBacklog := false
	waitFor(t, 20*time.Second, "every task to switch to real-time", func() (bool, error) {
		if err := e.failed(); err != nil {
			return false, err
		}
		m := e.modes()
		sawBacklog = sawBacklog || slices.Contains(m, "backlog")
		return e.metric(t, "sluice_backlog_switches_total", "direction=to_realtime") >= partitions, nil
	})
	waitCaughtUp(t, e, adm)
	t.Logf("a poll of Status saw a task in backlog mode: %v", sawBacklog) // a small backlog may switch between polls
	checkTotals(t, expected(backlog), readTotals(t, brokers))

	// Live input below enter_lag is streamed: no switch back.
	live := orders{n: 60, keys: 50, seed: 4}
	produce(t, brokers, live)
	waitCaughtUp(t, e, adm)
	checkTotals(t, expected(backlog, live), readTotals(t, brokers))
	if m := e.modes(); len(m) != partitions || slices.ContainsFunc(m, func(s string) bool { return s != "real-time" }) {
		t.Errorf("modes after the live input = %v, want every task real-time", m)
	}
	if n := e.metric(t, "sluice_backlog_switches_total", "direction=to_backlog"); n != 0 {
		t.Errorf(`sluice_backlog_switches_total{direction="to_backlog"} = %v after small live input, want 0`, n)
	}
	e.stopClean(t)
}

// TestAbortedCheckpointIsRedone: a checkpoint whose transaction fails is aborted
// (sluice_txn_aborts_total), every task rewinds to its last commit and processes its input
// again; under read_committed nothing is lost and nothing counted twice, including the input
// that arrives after the abort. The first checkpoint with records fails: in real-time mode it
// carries the first outputs; over a backlog, the fold of the switch to real-time.
func TestAbortedCheckpointIsRedone(t *testing.T) {
	faults := []struct {
		name  string
		fault func(txnID string) kfake.Fault
	}{
		{"EndTxnCommitFails", func(txnID string) kfake.Fault {
			// The broker answers the commit with an error without committing: the outcome is
			// unknown to the client, which must treat it as an abort.
			return kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: txnID, Err: kerr.UnknownServerError,
				When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit }}
		}},
		{"SinkProduceRejected", func(string) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: sinkTopic, Err: kerr.InvalidRecord}
		}},
		{"TxnOffsetCommitFails", func(txnID string) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, TxnID: txnID, Err: kerr.UnknownServerError}
		}},
	}
	modes := []struct {
		name string
		opts pipelineOpts
	}{
		{"Realtime", pipelineOpts{}},
		{"Backlog", pipelineOpts{enterLag: 100, exitLag: 10}}, // ~200 records a partition
	}
	for _, m := range modes {
		for _, f := range faults {
			t.Run(m.name+"/"+f.name, func(t *testing.T) {
				c := newCluster(t)
				brokers := c.ListenAddrs()
				first := orders{n: 400, keys: 30, seed: 5}
				produce(t, brokers, first)
				cfg := newConfig(t, brokers, m.opts)
				fault := c.Fault(f.fault(cfg.TransactionalID())) // once: the first checkpoint with records

				e := newEngine(t, cfg, nil)
				e.start(t)
				adm := admin(t, brokers)
				waitFor(t, 20*time.Second, "the fault to hit", func() (bool, error) { return fault.Hits() == 1, e.failed() })
				second := orders{n: 200, keys: 30, seed: 6}
				produce(t, brokers, second)
				waitCaughtUp(t, e, adm)

				if n := e.metric(t, "sluice_txn_aborts_total"); n < 1 {
					t.Errorf("sluice_txn_aborts_total = %v, want >= 1", n)
				}
				checkTotals(t, expected(first, second), readTotals(t, brokers))
				e.stopClean(t)
			})
		}
	}
}

// TestRewoundBacklogIsSortedAgain: when the checkpoint that folds a backlog aborts, the task
// rewinds to its last commit with a fresh backlog detector; the input it reads again is still a
// backlog (lag above enter_lag including the batch), so it is sorted again and the task switches
// to real-time once that fold commits: every task's backlog ends with a switch.
func TestRewoundBacklogIsSortedAgain(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 400, keys: 30, seed: 11}
	produce(t, brokers, in)
	cfg := newConfig(t, brokers, pipelineOpts{enterLag: 100, exitLag: 10}) // ~200 records a partition
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: cfg.TransactionalID(), Err: kerr.UnknownServerError,
		When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit }})

	e := newEngine(t, cfg, nil)
	e.start(t)
	waitCaughtUp(t, e, admin(t, brokers))
	if fault.Hits() != 1 {
		t.Fatalf("the fold's commit was not failed (fault hits %d)", fault.Hits())
	}
	checkTotals(t, expected(in), readTotals(t, brokers))
	if n := e.metric(t, "sluice_backlog_switches_total", "direction=to_realtime"); n < partitions {
		t.Errorf(`sluice_backlog_switches_total{direction="to_realtime"} = %v, want >= %d (each task's backlog, sorted again after the abort, ends with a switch)`, n, partitions)
	}
}

// TestReady: Ready is false before the member has joined and while an assigned task is still
// restoring its state (Status says "restoring"), and true once every task is restored.
func TestReady(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 100, keys: 10, seed: 7}
	produce(t, brokers, in)
	cfg := newConfig(t, brokers, pipelineOpts{})
	// Hold every restore: listing the changelog's offsets fails (retriably) until removed.
	hold := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: cfg.ChangelogTopic(operator),
		Err: kerr.UnknownTopicOrPartition, Count: -1})

	e := newEngine(t, cfg, nil)
	if e.Ready() {
		t.Fatal("Ready() = true before Run")
	}
	e.start(t)
	waitFor(t, 20*time.Second, "both tasks to be assigned and restoring", func() (bool, error) {
		m := e.modes()
		return len(m) == partitions && !slices.ContainsFunc(m, func(s string) bool { return s != "restoring" }), e.failed()
	})
	waitFor(t, 20*time.Second, "a restore to be held", func() (bool, error) { return hold.Hits() > 0, nil })
	if e.Ready() {
		t.Fatalf("Ready() = true while every task is restoring (modes %v)", e.modes())
	}

	hold.Remove()
	waitFor(t, 20*time.Second, "Ready()", func() (bool, error) { return e.Ready(), e.failed() })
	if m := e.modes(); slices.Contains(m, "restoring") {
		t.Errorf("Ready() is true but modes are %v", m)
	}
	waitCaughtUp(t, e, admin(t, brokers))
	checkTotals(t, expected(in), readTotals(t, brokers))
}

// TestRestoreFromChangelog: a second engine of the same group that lost the first one's state
// (a new, empty store) restores it from the changelog (sluice_restored_records_total counts
// the replayed records), and its totals after more input continue the first engine's exactly.
// With the state kept, it replays nothing and continues just the same. With changelog: output
// the changelog is the sink topic (no changelog topic exists), whether the first engine wrote
// its results in real time or by folding a backlog.
func TestRestoreFromChangelog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keep      bool // the second engine reopens the first one's state dir
		changelog string
		enterLag  int64 // of the first engine (0: it stays in real time)
	}{
		{name: "StateLost", keep: false},
		{name: "StateKept", keep: true},
		{name: "OutputStateLost", keep: false, changelog: configs.ChangelogOutput},
		{name: "OutputStateKept", keep: true, changelog: configs.ChangelogOutput},
		{name: "OutputBacklogStateLost", keep: false, changelog: configs.ChangelogOutput, enterLag: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			brokers := c.ListenAddrs()
			dir := t.TempDir()
			first := orders{n: 500, keys: 40, seed: 8}
			produce(t, brokers, first)

			// The first engine commits only when it stops (a commit interval that never
			// elapses), so its last checkpoint is certain to be applied to its state.
			db := openState(t, dir)
			o1 := pipelineOpts{commitInterval: "1m", changelog: tc.changelog}
			if tc.enterLag > 0 {
				o1.enterLag, o1.exitLag = tc.enterLag, 10
			}
			e1 := newEngine(t, newConfig(t, brokers, o1), db)
			e1.start(t)
			adm := admin(t, brokers)
			waitProcessed(t, e1, first.n)
			if err := e1.stopAndWait(t); err != nil {
				t.Fatalf("first engine: Run after cancel = %v, want nil", err)
			}
			if ok, err := caughtUp(t.Context(), adm, e1.cfg.Group); err != nil || !ok {
				t.Fatalf("first engine did not commit its input when it stopped (err %v)", err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			var store state.Store = state.NewMem()
			if tc.keep {
				store = openState(t, dir)
			}
			e2 := newEngine(t, newConfig(t, brokers, pipelineOpts{changelog: tc.changelog}), store)
			e2.start(t)
			waitFor(t, 20*time.Second, "the second engine to be ready", func() (bool, error) { return e2.Ready(), e2.failed() })
			second := orders{n: 300, keys: 40, seed: 9}
			produce(t, brokers, second)
			waitCaughtUp(t, e2, adm)
			checkTotals(t, expected(first, second), readTotals(t, brokers))

			restored := e2.metric(t, "sluice_restored_records_total")
			keys := float64(len(expected(first)))
			switch {
			case tc.keep && restored != 0:
				t.Errorf("sluice_restored_records_total = %v with the state kept, want 0", restored)
			case !tc.keep && restored < keys:
				t.Errorf("sluice_restored_records_total = %v with the state lost, want >= %v (one per key at least)", restored, keys)
			}
			if tc.changelog == configs.ChangelogOutput {
				topics, err := adm.ListTopics(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if topics.Has(e2.cfg.ChangelogTopic(operator)) {
					t.Errorf("changelog: output created the changelog topic %s", e2.cfg.ChangelogTopic(operator))
				}
			}
			e2.stopClean(t)
		})
	}
}

// TestTopRestoreFromOutput: a top whose rows are its changelog (changelog: output). A second
// engine of the same group that lost the first one's state gathers each customer's rows back
// from the sink (sluice_restored_records_total counts them), and its rows after more input are
// the 3 largest orders per customer of both batches exactly, whether the first engine wrote its
// rows in real time or by folding a backlog. No changelog topic is created.
func TestTopRestoreFromOutput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		enterLag int64 // of the first engine (0: it stays in real time)
	}{{name: "Realtime"}, {name: "Backlog", enterLag: 50}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			brokers := c.ListenAddrs()
			first := orders{n: 500, keys: 40, seed: 8}
			produce(t, brokers, first)
			o1 := pipelineOpts{commitInterval: "1m", top: 3, changelog: configs.ChangelogOutput}
			if tc.enterLag > 0 {
				o1.enterLag, o1.exitLag = tc.enterLag, 10
			}
			e1 := newEngine(t, newConfig(t, brokers, o1), nil)
			e1.start(t)
			adm := admin(t, brokers)
			waitProcessed(t, e1, first.n)
			if err := e1.stopAndWait(t); err != nil {
				t.Fatalf("first engine: Run after cancel = %v, want nil", err)
			}

			e2 := newEngine(t, newConfig(t, brokers, pipelineOpts{top: 3, changelog: configs.ChangelogOutput}), nil)
			e2.start(t)
			waitFor(t, 20*time.Second, "the second engine to be ready", func() (bool, error) { return e2.Ready(), e2.failed() })
			second := orders{n: 300, keys: 40, seed: 9}
			produce(t, brokers, second)
			waitCaughtUp(t, e2, adm)

			got := map[string]string{}
			readSink(t, brokers, func(r *kgo.Record) {
				if k := codec.Header(r, codec.HeaderKey); k == nil || !strings.Contains(string(r.Key), string(k)) {
					t.Fatalf("row %s=%s has key header %q", r.Key, r.Value, k)
				}
				got[string(r.Key)] = string(r.Value)
			})
			want := topRows(3, first, second)
			if len(got) != len(want) {
				t.Errorf("%d rows, want %d", len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("row %s = %s, want %s", k, got[k], v)
				}
			}
			if restored, keys := e2.metric(t, "sluice_restored_records_total"), float64(len(expected(first))); restored < keys {
				t.Errorf("sluice_restored_records_total = %v with the state lost, want >= %v (a row per key at least)", restored, keys)
			}
			topics, err := adm.ListTopics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if topics.Has(e2.cfg.ChangelogTopic(operator)) {
				t.Errorf("changelog: output created the changelog topic %s", e2.cfg.ChangelogTopic(operator))
			}
			e2.stopClean(t)
		})
	}
}

// topRows returns the rows of a top of n orders by amount per customer over the batches in
// order (ties: the earlier first), by Kafka key {"key":"<customer>","rank":r}.
func topRows(n int, batches ...orders) map[string]string {
	type order struct {
		cents int64
		value string
	}
	tops := map[string][]order{}
	for _, o := range batches {
		i := 0
		o.each(func(key string, cents, ts int64) {
			rows := tops[key]
			at := len(rows)
			for j, r := range rows {
				if cents > r.cents {
					at = j
					break
				}
			}
			rows = slices.Insert(rows, at, order{cents, o.value(i, key, cents, ts)})
			tops[key] = rows[:min(len(rows), n)]
			i++
		})
	}
	out := map[string]string{}
	for key, rows := range tops {
		for j, r := range rows {
			out[fmt.Sprintf(`{"key":%q,"rank":%d}`, key, j+1)] = strings.TrimSuffix(r.value, "}") + fmt.Sprintf(`,"rank":%d}`, j+1)
		}
	}
	return out
}

// openState opens a Pebble store in dir, closed at cleanup (a second Close is harmless).
func openState(t *testing.T, dir string) *state.DB {
	t.Helper()
	db, err := state.Open(state.Options{Dir: dir, CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("state.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestRestoredPartitionFetchedPromptly: once its tasks are restored, an engine starts on its
// input without waiting out an idle fetch.
func TestRestoredPartitionFetchedPromptly(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 200, keys: 20, seed: 10}
	produce(t, brokers, in)
	// The fetch wait sluice runs with (the harness lowers it for speed).
	e := newEngine(t, newConfig(t, brokers, pipelineOpts{}), nil, kgo.FetchMaxWait(producer.DefaultFetchMaxWait))
	e.start(t)
	waitFor(t, 20*time.Second, "Ready()", func() (bool, error) { return e.Ready(), e.failed() })
	start := time.Now()
	waitCaughtUp(t, e, admin(t, brokers))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%d records took %v from Ready to committed; want well under the 5s fetch wait", in.n, d)
	}
}

// TestLostSessionRestarts: a transaction end that cannot reach its coordinator (every EndTxn of
// the engine's transactional id has its connection closed until the engine gives up) leaves the
// outcome unknown. The engine abandons its Kafka session and opens a new one in-process, as a
// crash and restart would (sluice_session_restarts_total), instead of exiting; once the broker
// answers again, the output is exact: nothing of the lost transaction is counted twice.
func TestLostSessionRestarts(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 400, keys: 30, seed: 21}
	produce(t, brokers, in)
	cfg := newConfig(t, brokers, pipelineOpts{})

	var healed atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if r.(*kmsg.EndTxnRequest).TransactionalID != cfg.TransactionalID() || healed.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("injected: the transaction coordinator is gone"), true // closes the connection
	})
	// Few, quick retries: the end gives up in well under a second instead of franz-go's default
	// twenty retries with backoff.
	e := newEngine(t, cfg, nil, kgo.RequestRetries(2), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	e.start(t)
	waitFor(t, 30*time.Second, "the engine to restart its lost session", func() (bool, error) {
		return e.metric(t, "sluice_session_restarts_total") >= 1, e.failed()
	})
	healed.Store(true)
	adm := admin(t, brokers)
	waitCaughtUp(t, e, adm)
	e.stopClean(t)
	checkTotals(t, expected(in), readTotals(t, brokers))
	if !strings.Contains(e.logs.tail(100000), "Kafka session lost") {
		t.Errorf("no \"Kafka session lost\" line in the log")
	}
}

// TestEveryCommitCarriesOffsets: a transaction that commits records also commits offsets, even
// when no task has offsets to commit (a re-keying writer in backlog mode announces its mode at
// its first batch and holds its offsets until the backlog's checkpoint). franz-go ends a
// transaction without offsets as if the broker lacked KIP-447 and then holds its session for
// 500 ms, which stalled the next checkpoint; the engine commits again an offset where a restart
// resumes anyway. The totals are exact.
func TestEveryCommitCarriesOffsets(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	// The input in many small batches, fetched one at a time: the re-keying writers sort their
	// backlog over many checkpoints, the first of which carries their mode's announcements.
	var ins []orders
	for i := range 40 {
		ins = append(ins, orders{n: 100, keys: 50, seed: 100 + i})
		produce(t, brokers, ins[i])
	}
	cfg := newConfig(t, brokers, pipelineOpts{commitInterval: "5ms", enterLag: 100, exitLag: 10, groupBy: "customer_id"})
	cfg.Backlog.CommitInterval = 0 // every checkpoint 5 ms apart, in the backlog too
	txnID := cfg.TransactionalID()

	// Per transaction of the engine's producer: whether it produced and committed offsets.
	var mu sync.Mutex
	var produced, offsetsSent bool
	var withRecords, withoutOffsets int
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := r.(*kmsg.ProduceRequest); req.TransactionID != nil && *req.TransactionID == txnID {
			mu.Lock()
			produced = true
			mu.Unlock()
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := r.(*kmsg.TxnOffsetCommitRequest); req.TransactionalID == txnID && len(req.Topics) > 0 {
			mu.Lock()
			offsetsSent = true
			mu.Unlock()
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.EndTxnRequest)
		if req.TransactionalID != txnID {
			return nil, nil, false
		}
		mu.Lock()
		if req.Commit && produced {
			withRecords++
			if !offsetsSent {
				withoutOffsets++
			}
		}
		produced, offsetsSent = false, false
		mu.Unlock()
		return nil, nil, false
	})

	// Each fetch answered 10 ms late: the writers' backlog spans many 5 ms checkpoints.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(10 * time.Millisecond) })
		return nil, nil, false
	})
	e := newEngine(t, cfg, nil, kgo.FetchMaxPartitionBytes(1))
	e.start(t)
	want := expected(ins...)
	adm := admin(t, brokers)
	waitFor(t, 20*time.Second, "the sink topic", func() (bool, error) {
		ts, err := adm.ListTopics(t.Context(), sinkTopic)
		return err == nil && ts.Has(sinkTopic), e.failed()
	})
	waitFor(t, 30*time.Second, "the exact totals", func() (bool, error) {
		return maps.Equal(readTotals(t, brokers), want), e.failed()
	})
	e.stopClean(t)
	mu.Lock()
	defer mu.Unlock()
	if withRecords == 0 {
		t.Fatal("no transaction committed records")
	}
	if withoutOffsets > 0 {
		t.Errorf("%d of %d transactions committed records without offsets", withoutOffsets, withRecords)
	}
}

// TestFencedBeforeFirstAssignmentRejoins: a member fenced before its session's first assignment
// (its join replaced by another of its own, as when a dying coordinator answered a request that
// was then sent again to the next one) joins again with a new session instead of exiting; the
// output is exact. A member fenced after its assignment (another process has taken its instance
// id over) still exits, naming the error.
func TestFencedBeforeFirstAssignmentRejoins(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 400, keys: 30, seed: 23}
	produce(t, brokers, in)
	cfg := newConfig(t, brokers, pipelineOpts{})

	var fenced atomic.Int32
	c.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.SyncGroupRequest)
		if req.Group != cfg.Group || fenced.Load() >= 2 {
			return nil, nil, false
		}
		fenced.Add(1)
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = kerr.FencedInstanceID.Code
		return resp, nil, true
	})
	e := newEngine(t, cfg, nil)
	e.start(t)
	adm := admin(t, brokers)
	waitCaughtUp(t, e, adm)
	if n := strings.Count(e.logs.tail(100000), "fenced before the first assignment"); n < 1 {
		t.Errorf("%d \"fenced before the first assignment\" lines, want at least 1", n)
	}

	// Now fenced once assigned: another process holds the instance id. The engine exits.
	c.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.HeartbeatRequest)
		if req.Group != cfg.Group {
			return nil, nil, false
		}
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.FencedInstanceID.Code
		return resp, nil, true
	})
	select {
	case <-e.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the engine fenced after its assignment did not exit")
	}
	if e.err == nil || !strings.Contains(e.err.Error(), "FENCED_INSTANCE_ID") {
		t.Fatalf("Run = %v, want the FENCED_INSTANCE_ID error", e.err)
	}
	checkTotals(t, expected(in), readTotals(t, brokers))
}

// TestStaticRestartAssignsOrphanedPartitions: a static member that dies between the two rounds
// of a cooperative rebalance (after revoking partitions, before the rejoin that lets the group
// assign them) leaves those partitions without an owner, and its restart, which replaces it
// without a rebalance (KIP-345), gets back only what it kept. Here the group's leader is a
// client whose first plan with instance i-0 gives it partition 0 and nobody partition 1; the
// member i-0 (the engine's instance id, protocol and join metadata) takes it and stops without
// leaving, as after kill -9. The engine, restarted as i-0, must still process every partition:
// it rejoins once after its first assignment, and the leader's next plan gives it both.
func TestStaticRestartAssignsOrphanedPartitions(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	in := orders{n: 400, keys: 30, seed: 29}
	produce(t, brokers, in)
	cfg := newConfig(t, brokers, pipelineOpts{})
	// The engine's balancer: its pipeline has no joins.
	bs := strings.Join(brokers, ",")
	_, leaderAssigned := kafkatest.Member(t, bs, cfg.Group, inputTopic, "", kafkatest.Withholding(kgo.CooperativeStickyBalancer(), cfg.InstanceID))
	kafkatest.AwaitAssigned(t, "the leader", leaderAssigned, map[string][]int32{}, 20*time.Second)
	pred, predAssigned := kafkatest.Member(t, bs, cfg.Group, inputTopic, cfg.InstanceID, kgo.CooperativeStickyBalancer())
	kafkatest.AwaitAssigned(t, "the predecessor", predAssigned, map[string][]int32{inputTopic: {0}}, 20*time.Second)
	pred.Close() // a static member that owes no rejoin does not leave: the group keeps it

	e := newEngine(t, cfg, nil)
	e.start(t)
	waitCaughtUp(t, e, admin(t, brokers))
	checkTotals(t, expected(in), readTotals(t, brokers))
	if n := strings.Count(e.logs.tail(100000), "rejoining the group once after the session's first assignment"); n != 1 {
		t.Errorf("%d \"rejoining the group once\" lines, want 1", n)
	}
}

// TestBacklogCommitInterval: while every task holds a backlog (the re-keying writers read at
// least enter_lag behind, the aggregate is in backlog mode), the checkpoints come
// backlog.commit_interval apart rather than processing.commit_interval: a checkpoint stops
// every task at its barrier, and nothing waits on it. Once the tasks stream again, a new order's
// total is visible well within backlog.commit_interval, and every total is exact.
func TestBacklogCommitInterval(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	var ins []orders
	for i := range 60 {
		ins = append(ins, orders{n: 100, keys: 50, seed: 200 + i})
		produce(t, brokers, ins[i])
	}
	cfg := newConfig(t, brokers, pipelineOpts{commitInterval: "20ms", enterLag: 100, exitLag: 10, groupBy: "customer_id"})
	const backlogInterval = 5 * time.Second
	cfg.Backlog.CommitInterval = backlogInterval
	// Each fetch answered 100 ms late, with one or two batches of 50 orders a partition: a
	// backlog of a few seconds, which 20 ms checkpoints would cut into a hundred.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(100 * time.Millisecond) })
		return nil, nil, false
	})
	// About one batch a partition per fetch (each produce call writes ~4.5 KB a partition), and
	// every partition in each fetch (a limit of 1 byte would serve the first partition alone).
	e := newEngine(t, cfg, nil, kgo.FetchMaxPartitionBytes(6000))
	start := time.Now()
	e.start(t)
	waitFor(t, 60*time.Second, "the aggregate's tasks to switch to real-time", func() (bool, error) {
		return e.metric(t, "sluice_backlog_switches_total", "direction=to_realtime") >= partitions, e.failed()
	})
	took, ckpts := time.Since(start), e.metric(t, "sluice_checkpoints_total")
	t.Logf("backlog of %d orders processed in %v with %v checkpoints", 60*100, took.Round(time.Millisecond), ckpts)
	if took < 2*time.Second {
		t.Fatalf("the backlog took %v: too short to tell the intervals apart", took)
	}
	// The writers' end of their backlog shortens the interval at once (the poll loop is woken),
	// so the readers' switch does not wait out backlog.commit_interval.
	if took >= backlogInterval {
		t.Errorf("the backlog took %v, as long as backlog.commit_interval: the end of the writers' backlog did not bring the next checkpoint forward", took)
	}
	// processing.commit_interval apart, the checkpoints would be about took/20ms. Those left
	// come before every task holds its backlog (the first fetch is 100 ms away; the readers
	// enter theirs once the writers' announcements are committed) and after a task has caught
	// up (the writers announce real time, the readers' switches).
	if limit := float64(took/cfg.Processing.CommitInterval) / 4; ckpts > limit {
		t.Errorf("%v checkpoints in a backlog of %v, want at most %v, a quarter of what processing.commit_interval (%v) gives", ckpts, took, limit, cfg.Processing.CommitInterval)
	}
	want := expected(ins...)
	waitFor(t, 30*time.Second, "the exact totals", func() (bool, error) {
		return maps.Equal(readTotals(t, brokers), want), e.failed()
	})

	live := orders{n: 10, keys: 50, seed: 300}
	produce(t, brokers, live)
	sent := time.Now()
	want = expected(append(ins, live)...)
	waitFor(t, 30*time.Second, "the live orders' totals", func() (bool, error) {
		return maps.Equal(readTotals(t, brokers), want), e.failed()
	})
	if d := time.Since(sent); d >= backlogInterval/2 {
		t.Errorf("live orders took %v to be visible, want well within backlog.commit_interval %v: the real-time interval is %v", d, backlogInterval, cfg.Processing.CommitInterval)
	}
	e.stopClean(t)
}
