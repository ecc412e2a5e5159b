package consumer_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/state"
)

// diskFull makes writes to files whose path contains part fail with ENOSPC while on.
type diskFull struct {
	part string
	on   atomic.Bool
	hits atomic.Int64
}

func (f *diskFull) String() string { return "disk full on *" + f.part + "*" }

func (f *diskFull) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || !strings.Contains(op.Path, f.part) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileFlush:
		f.hits.Add(1)
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

// TestStateDiskFull fills the disk under the state store, where it hurts most: the write-ahead
// log of a real-time checkpoint's batch (after the transaction committed), and the bulk load
// of a backlog's fold (before it commits). Each time Run returns an error naming the state dir
// and ENOSPC (sluice exits 1), no transaction is left open, what the group committed is exactly
// the output of the input offsets it committed (nothing committed beyond what the changelog
// holds), and an engine started again on a store with room (kept, or rebuilt from the
// changelog) ends with exact totals.
func TestStateDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		part string // the files that fail: the log, or the loader's sstables
		opts pipelineOpts
		in   orders
		keep bool // restart on the same store (else a new one, restored from the changelog)
	}{
		{name: "WAL", part: ".log", in: orders{n: 2000, keys: 200, seed: 21}},
		// Above the 20,000 keys per task from which a fold writes through the bulk loader.
		{name: "FoldLoader", part: "/ingest/", opts: pipelineOpts{enterLag: 1000, exitLag: 100}, in: orders{n: 50_000, keys: 50_000, seed: 22}, keep: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			brokers := c.ListenAddrs()
			adm := admin(t, brokers)
			dir := t.TempDir()
			full := &diskFull{part: tc.part}
			// Synced commits: the log's write error reaches the batch that wrote it.
			db, err := state.Open(state.Options{Dir: dir, CacheSize: 1 << 20, Sync: true, FS: errorfs.Wrap(vfs.Default, full)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			cfg := newConfig(t, brokers, tc.opts)
			e := newEngine(t, cfg, db)
			first := orders{}
			if tc.opts.enterLag == 0 {
				// Real time: commits with room, then the disk fills under a running engine. The
				// state stays far below Pebble's first memtable (256 KiB), so the failing write is
				// the batch's own and not a log rotation's (a log that cannot be closed there is
				// beyond recovery: see state/fault.go).
				first = orders{n: 200, keys: 20, seed: 20}
				e.start(t)
				produce(t, brokers, first)
				waitCaughtUp(t, e, adm)
				full.on.Store(true)
				produce(t, brokers, tc.in)
			} else {
				// A backlog that folds with the disk full.
				full.on.Store(true)
				produce(t, brokers, tc.in)
				e.start(t)
			}
			select {
			case <-e.done:
			case <-time.After(60 * time.Second):
				t.Fatal("Run did not fail within 60s of the disk filling")
			}
			if full.hits.Load() == 0 {
				t.Fatal("no write hit the full disk")
			}
			for _, want := range []string{dir, "no space left on device"} {
				if e.err == nil || !strings.Contains(e.err.Error(), want) {
					t.Errorf("Run = %v, want an error naming %q", e.err, want)
				}
			}
			t.Logf("Run = %v", e.err)
			txns, err := adm.DescribeTransactions(t.Context(), cfg.TransactionalID())
			if err != nil {
				t.Fatal(err)
			}
			for _, tx := range txns {
				if tx.State == "Ongoing" {
					t.Errorf("transaction %s still Ongoing after Run returned", tx.TxnID)
				}
			}
			_, committed, err := offsets(t.Context(), adm, cfg.Group)
			if err != nil {
				t.Fatal(err)
			}
			checkTotals(t, inputTotals(t, brokers, committed), readTotals(t, brokers))
			t.Logf("committed input offsets when Run returned: %v", committed)
			if tc.keep && len(committed) > 0 {
				t.Errorf("committed input offsets %v: the fold that could not be written must not commit", committed)
			}

			full.on.Store(false)
			var store state.Store = state.NewMem()
			if tc.keep {
				store = db
			} else if !errors.Is(e.err, state.ErrFailed) {
				t.Errorf("Run = %v, want state.ErrFailed (the store cannot go on after its log failed)", e.err)
			}
			e2 := newEngine(t, cfg, store)
			e2.start(t)
			waitCaughtUp(t, e2, adm)
			checkTotals(t, expected(first, tc.in), readTotals(t, brokers))
			e2.stopClean(t)
		})
	}
}

// TestKafkaUnreachableAtStart: an engine whose brokers do not answer waits for them: it logs a
// WARN line naming the brokers and how long it has waited, Readiness says why it is not ready,
// and once a broker listens on that address it joins and processes exactly.
func TestKafkaUnreachableAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	cfg := newConfig(t, []string{addr}, pipelineOpts{})
	e := newEngine(t, cfg, nil)
	e.start(t)
	waitFor(t, 20*time.Second, "a retry logged and Readiness to say it waits for Kafka", func() (bool, error) {
		ok, why := e.Readiness()
		logged := strings.Contains(e.logs.tail(20), "kafka unreachable") && strings.Contains(e.logs.tail(20), addr)
		return !ok && strings.Contains(why, "waiting for Kafka") && strings.Contains(why, addr) && logged, e.failed()
	})
	_, why := e.Readiness()
	t.Logf("not ready: %s", why)

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(partitions, inputTopic))
	if err != nil {
		t.Fatalf("kfake on %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	in := orders{n: 300, keys: 30, seed: 23}
	produce(t, c.ListenAddrs(), in)
	waitFor(t, 30*time.Second, "Ready()", func() (bool, error) { return e.Ready(), e.failed() })
	waitCaughtUp(t, e, admin(t, c.ListenAddrs()))
	checkTotals(t, expected(in), readTotals(t, c.ListenAddrs()))
	if !strings.Contains(e.logs.tail(1000), "kafka reachable") {
		t.Error(`no "kafka reachable" line after the broker came up`)
	}
	e.stopClean(t)
}

// TestMissingSourceTopic: a source whose topic the brokers do not have stops the engine at
// start with a config error naming the source's key and the topic (not the changelog code
// that found it missing).
func TestMissingSourceTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "some-other-topic"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := newEngine(t, newConfig(t, c.ListenAddrs(), pipelineOpts{}), nil)
	e.start(t)
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop on a missing source topic")
	}
	var ce *configs.Error
	if !errors.As(e.err, &ce) || ce.Key != "sources.orders.topic" || !strings.Contains(e.err.Error(), inputTopic) {
		t.Fatalf("Run = %v, want a config error for sources.orders.topic naming %s", e.err, inputTopic)
	}
}
