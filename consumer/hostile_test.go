package consumer_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/operators/task"
)

// This file holds the end-to-end tests of hostile input: bad records of every class, among
// good ones, over kfake; dead letters too large for the dead-letter topic; a checkpoint that
// keeps failing on the same record; a changelog record that does not decode.

// largeInputMax is the input topic's max.message.bytes in these tests: it accepts records far
// larger than the broker's default (1 MiB), which the dead-letter topic keeps.
const largeInputMax = 16 << 20

// newLargeInputCluster starts a one-broker kfake cluster whose input topic accepts records of
// up to largeInputMax bytes.
func newLargeInputCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	adm := admin(t, c.ListenAddrs())
	resp, err := adm.CreateTopic(t.Context(), partitions, 1, map[string]*string{"max.message.bytes": kadm.StringPtr(strconv.Itoa(largeInputMax))}, inputTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", inputTopic, err)
	}
	return c
}

// produceRecords writes recs to the input topic (Topic defaults to it) and waits for them.
func produceRecords(t *testing.T, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(inputTopic), kgo.ProducerBatchMaxBytes(largeInputMax))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d records: %v", len(recs), err)
	}
}

// order is one good order as produce writes it.
func order(key string, cents int64, ts int64) *kgo.Record {
	v := `{"customer_id":"` + key + `","amount":` + strconv.FormatInt(cents/100, 10) + "." + strconv.FormatInt(cents%100/10, 10) + strconv.FormatInt(cents%10, 10) + `,"ts":` + strconv.FormatInt(ts, 10) + `}`
	return &kgo.Record{Key: []byte(key), Value: []byte(v), Timestamp: time.UnixMilli(ts)}
}

// readCommitted returns every committed record of topic (read_committed, once no transaction is
// open on it), in partition and offset order.
func readCommitted(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	adm := admin(t, brokers)
	var ends map[int32]int64
	waitFor(t, 20*time.Second, "no open transaction on "+topic, func() (bool, error) {
		hwm, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwm.Error()
		}
		if err != nil {
			return false, nil // not created yet
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return false, err
		}
		ends = map[int32]int64{}
		settled := true
		hwm.Each(func(o kadm.ListedOffset) {
			ends[o.Partition] = o.Offset
			if l, ok := lso.Lookup(topic, o.Partition); !ok || l.Offset != o.Offset {
				settled = false
			}
		})
		return settled, nil
	})
	want := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			want[p] = kgo.NewOffset().AtStart()
		}
	}
	byPart := map[int32][]*kgo.Record{}
	if len(want) > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for len(want) > 0 {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("reading %s: %v", topic, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset+1 >= ends[r.Partition] {
					delete(want, r.Partition)
				}
				if !r.Attrs.IsControl() && r.Offset < ends[r.Partition] {
					byPart[r.Partition] = append(byPart[r.Partition], r)
				}
			})
		}
	}
	var out []*kgo.Record
	for p := range int32(len(ends)) {
		out = append(out, byPart[p]...)
	}
	return out
}

// header returns the value of r's header key.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestOversizedDeadLetter: an undecodable 5 MiB record (the input topic accepts it; the
// dead-letter topic has the broker's default 1 MiB limit) used to stop every checkpoint
// (MESSAGE_TOO_LARGE, abort, retry, forever). Its dead letter now leaves truncated, with the
// original sizes and the source's coordinates in headers, and the records around it are
// aggregated exactly, in real-time and in backlog mode.
func TestOversizedDeadLetter(t *testing.T) {
	for _, m := range []struct {
		name string
		opts pipelineOpts
	}{
		{"Realtime", pipelineOpts{}},
		{"Backlog", pipelineOpts{enterLag: 3, exitLag: 1}},
	} {
		t.Run(m.name, func(t *testing.T) {
			c := newLargeInputCluster(t)
			brokers := c.ListenAddrs()
			huge := `{"customer_id":"c-001","amount":` + strings.Repeat("7", 5<<20) // unterminated
			recs := []*kgo.Record{
				order("c-001", 150, 1), order("c-002", 250, 2),
				{Key: []byte("c-001"), Value: []byte(huge), Timestamp: time.UnixMilli(3)},
				order("c-001", 1000, 4), order("c-002", 5, 5),
			}
			produceRecords(t, brokers, recs...)
			e := newEngine(t, newConfig(t, brokers, m.opts), nil)
			e.start(t)
			waitCaughtUp(t, e, admin(t, brokers))
			checkTotals(t, map[string]total{"c-001": {1150, 2}, "c-002": {255, 2}}, readTotals(t, brokers))
			dead := readCommitted(t, brokers, e.cfg.DLQTopic())
			if len(dead) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dead))
			}
			dl := dead[0]
			if len(dl.Value) != task.DeadLetterMaxBytes || string(dl.Value) != huge[:task.DeadLetterMaxBytes] || string(dl.Key) != "c-001" {
				t.Errorf("dead letter: key %q, value of %d bytes; want c-001 and the first %d bytes of the record", dl.Key, len(dl.Value), task.DeadLetterMaxBytes)
			}
			for k, want := range map[string]string{
				task.HeaderOriginalValueSize: strconv.Itoa(len(huge)),
				task.HeaderOriginalKeySize:   "5",
				task.HeaderSourceTopic:       inputTopic,
				task.HeaderSourcePartition:   strconv.Itoa(int(recs[2].Partition)),
				task.HeaderSourceOffset:      strconv.FormatInt(recs[2].Offset, 10),
			} {
				if got := header(dl, k); got != want {
					t.Errorf("dead letter header %s = %q, want %q", k, got, want)
				}
			}
			if r := header(dl, task.HeaderError); !strings.Contains(r, "unexpected end of input") {
				t.Errorf("dead letter reason %q", r)
			}
			if n := e.metric(t, "sluice_dead_letters_total"); n != 1 {
				t.Errorf("sluice_dead_letters_total = %v, want 1", n)
			}
			if n := e.metric(t, "sluice_txn_aborts_total"); n != 0 {
				t.Errorf("sluice_txn_aborts_total = %v, want 0", n)
			}
			e.stopClean(t)
		})
	}
}

// TestCheckpointFailuresStop: when the dead-letter topic refuses every record (here a broker
// fault on every produce to it), each checkpoint carrying a dead letter aborts and is redone.
// That must not loop silently: sluice_checkpoint_failures_consecutive counts the aborts; from
// 10 on an ERROR names the failing record and Ready is false; at
// processing.max_checkpoint_failures Run returns an error naming the record (sluice exits 1),
// with nothing committed and no transaction left open. If the fault clears before the limit,
// the next commit resets the count, Ready is true again, and nothing is lost or doubled.
func TestCheckpointFailuresStop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clear bool // remove the fault once the alarm is up
	}{{"GivesUp", false}, {"Recovers", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			brokers := c.ListenAddrs()
			in := orders{n: 40, keys: 5, seed: 21}
			produce(t, brokers, in)
			bad := &kgo.Record{Key: []byte("c-001"), Value: []byte(`{"customer_id":"c-001","amount":`)}
			produceRecords(t, brokers, bad)
			cfg := newConfig(t, brokers, pipelineOpts{commitInterval: "10ms"})
			cfg.Processing.MaxCheckpointFailures = 25
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.DLQTopic(), Err: kerr.InvalidRecord, Count: -1})
			e := newEngine(t, cfg, nil)
			e.start(t)
			waitFor(t, 20*time.Second, "10 checkpoints in a row to fail", func() (bool, error) {
				return e.metric(t, "sluice_checkpoint_failures_consecutive") >= 10, e.failed()
			})
			if ok, why := e.Readiness(); ok || !strings.Contains(why, "checkpoints keep failing") {
				t.Errorf("Readiness() = %v, %q after 10 checkpoints in a row failed; want false, checkpoints keep failing", ok, why)
			}
			logs := e.logs.tail(1000)
			if !strings.Contains(logs, "level=ERROR msg=\"checkpoints keep failing") || !strings.Contains(logs, "the dead letter of "+inputTopic+"[") {
				t.Errorf("no ERROR naming the record after 10 failures:\n%s", e.logs.tail(20))
			}
			adm := admin(t, brokers)
			if !tc.clear {
				select {
				case <-e.done:
				case <-time.After(30 * time.Second):
					t.Fatalf("Run did not give up after processing.max_checkpoint_failures failures")
				}
				err := e.err
				want := []string{"25 checkpoints in a row aborted", "processing.max_checkpoint_failures", "produce to " + cfg.DLQTopic(),
					"the dead letter of " + inputTopic + "[" + strconv.Itoa(int(bad.Partition)) + "] offset " + strconv.FormatInt(bad.Offset, 10), "INVALID_RECORD"}
				for _, w := range want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("Run = %v, want an error containing %q", err, w)
					}
				}
				if !errors.Is(err, kerr.InvalidRecord) {
					t.Errorf("Run = %v, want it to wrap INVALID_RECORD", err)
				}
				if _, committed, err := offsets(t.Context(), adm, cfg.Group); err != nil || committed[bad.Partition] > bad.Offset {
					t.Errorf("committed offsets %v (err %v), want partition %d's at most %d (the bad record never left)", committed, err, bad.Partition, bad.Offset)
				}
				txns, err := adm.DescribeTransactions(t.Context(), cfg.TransactionalID())
				if err != nil {
					t.Fatal(err)
				}
				for _, tx := range txns {
					if tx.State == "Ongoing" {
						t.Errorf("transaction %s still Ongoing after Run returned", tx.TxnID)
					}
				}
				return
			}
			fault.Remove()
			waitCaughtUp(t, e, adm)
			if n := e.metric(t, "sluice_checkpoint_failures_consecutive"); n != 0 {
				t.Errorf("sluice_checkpoint_failures_consecutive = %v after a commit, want 0", n)
			}
			waitFor(t, 5*time.Second, "Ready()", func() (bool, error) { return e.Ready(), e.failed() })
			checkTotals(t, expected(in), readTotals(t, brokers))
			if dead := readCommitted(t, brokers, cfg.DLQTopic()); len(dead) != 1 {
				t.Errorf("%d dead letters, want 1", len(dead))
			}
			e.stopClean(t)
		})
	}
}
