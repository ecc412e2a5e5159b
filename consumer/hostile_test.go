package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
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
				codec.HeaderOriginalValueSize: strconv.Itoa(len(huge)),
				codec.HeaderOriginalKeySize:   "5",
				codec.HeaderSourceTopic:       inputTopic,
				codec.HeaderSourcePartition:   strconv.Itoa(int(recs[2].Partition)),
				codec.HeaderSourceOffset:      strconv.FormatInt(recs[2].Offset, 10),
			} {
				if got := header(dl, k); got != want {
					t.Errorf("dead letter header %s = %q, want %q", k, got, want)
				}
			}
			if r := header(dl, codec.HeaderError); !strings.Contains(r, "unexpected end of input") {
				t.Errorf("dead letter reason %q", r)
			}
			if n := e.metric(t, "sluice_dead_letters_total"); n != 1 {
				t.Errorf("sluice_dead_letters_total = %v, want 1", n)
			}
			if n := e.metric(t, "sluice_txn_aborts_total"); n != 0 {
				t.Errorf("sluice_txn_aborts_total = %v, want 0", n)
			}
			if n := e.metric(t, "sluice_backlog_switches_total", "direction=to_realtime"); m.opts.enterLag > 0 && n < 1 {
				t.Errorf("no task ran in backlog mode (switches to real-time: %v)", n)
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
			// The engine resets the count when it hears the outcome, just after the broker has
			// made the commit visible.
			waitFor(t, 5*time.Second, "sluice_checkpoint_failures_consecutive to be 0 after a commit", func() (bool, error) {
				return e.metric(t, "sluice_checkpoint_failures_consecutive") == 0, e.failed()
			})
			waitFor(t, 5*time.Second, "Ready()", func() (bool, error) { return e.Ready(), e.failed() })
			checkTotals(t, expected(in), readTotals(t, brokers))
			if dead := readCommitted(t, brokers, cfg.DLQTopic()); len(dead) != 1 {
				t.Errorf("%d dead letters, want 1", len(dead))
			}
			e.stopClean(t)
		})
	}
}

// TestCorruptChangelogRefused: a changelog record that does not decode as the operator's state
// (here bytes no sluice wrote) stops the task's restore: Run returns an error wrapping
// changelog.ErrLayout that names the topic, partition and offset and says how to start over. It
// never panics, and never reads the bytes as state.
func TestCorruptChangelogRefused(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	cfg := newConfig(t, brokers, pipelineOpts{})
	adm := admin(t, brokers)
	resp, err := adm.CreateTopic(t.Context(), partitions, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, cfg.ChangelogTopic(operator))
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: cfg.ChangelogTopic(operator), Partition: 1, Key: []byte("c-001"), Value: []byte("\xffnot a state")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, orders{n: 20, keys: 4, seed: 3})
	e := newEngine(t, cfg, nil)
	e.start(t)
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop on a corrupt changelog record")
	}
	if !errors.Is(e.err, changelog.ErrLayout) {
		t.Fatalf("Run = %v, want changelog.ErrLayout", e.err)
	}
	for _, want := range []string{cfg.ChangelogTopic(operator) + "[1] offset 0", "is not a state of operator " + operator, "sluice reset -c FILE --operator " + operator} {
		if !strings.Contains(e.err.Error(), want) {
			t.Errorf("Run = %v\nwant it to say %q", e.err, want)
		}
	}
}

// TestHostileInputEndToEnd: records of every hostile class among good orders, through the
// engine over kfake, in real-time and in backlog mode. Each bad record leaves as one dead letter
// with its reason (matched by its source partition and offset), counted in
// sluice_dead_letters_total; the records documented as processed (a 5 MiB value, bytes that are
// not UTF-8 inside a string) count in their totals; every offset is committed, no checkpoint
// aborts, and the totals are exact.
func TestHostileInputEndToEnd(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	hostile := []struct {
		key, value string
		null       bool   // null key
		tombstone  bool   // null value
		reason     string // "" = processed (amount 1 for its key)
	}{
		{key: "c-001", value: `{"customer_id":"c-001","amount":`, reason: "invalid JSON"},
		{key: "c-002", value: `{"customer_id":"c-002","amount":"12.50","ts":5}`, reason: `field "amount" is a string, want a number`},
		{key: "c-003", value: `{"amount":1,"ts":5}`, reason: `key field "customer_id" missing`},
		{key: "c-004", value: `{"customer_id":"c-004","amount":1}`, reason: `timestamp field "ts" missing`},
		{null: true, value: `{"customer_id":"c-005","amount":1,"ts":5}`, reason: "the record has no key"},
		{key: "c-001", tombstone: true, reason: "empty value"},
		{key: "c-002", value: `{"customer_id":"c-002","amount":1,"ts":5,"pad":"` + strings.Repeat("x", 5<<20) + `"}`},
		{key: "c-003", value: `{"customer_id":"c-003","amount":1,"ts":5,"pad":"` + strings.Repeat("x", 5<<20), reason: "unterminated string"},
		{key: "c-004", value: `{"customer_id":"c-004","amount":1,"ts":5,"x":` + deep + `}`, reason: "nesting too deep"},
		{key: "c-005", value: "{\"customer_id\":\"c-005\",\"amount\":1,\"ts\":5,\"note\":\"\xff\xfe\"}"},
		{key: "c-000", value: "{\"customer_id\":\"c-000\",\xff:1}", reason: "invalid JSON"},
		{key: "c-001", value: `{"customer_id":"c-001","amount":1e30,"ts":5}`, reason: "number out of range"},
		{key: "c-002", value: `{"customer_id":"c-002","amount":NaN,"ts":5}`, reason: "invalid JSON"},
		{key: "c-003", value: `{"customer_id":"c-003","amount":Infinity,"ts":5}`, reason: "invalid JSON"},
		{key: "c-004", value: `{"customer_id":"c-004","amount":1,"ts":1767225600000000000}`, reason: "out of range (years 0000 to 9999)"},
		{key: "c-005", value: `{"customer_id":"c-005","amount":1,"ts":-9223372036854775808}`, reason: "out of range (years 0000 to 9999)"},
	}
	for _, m := range []struct {
		name string
		opts pipelineOpts
	}{
		{"Realtime", pipelineOpts{}},
		{"Backlog", pipelineOpts{enterLag: 20, exitLag: 2}},
	} {
		t.Run(m.name, func(t *testing.T) {
			c := newLargeInputCluster(t)
			brokers := c.ListenAddrs()
			first, second := orders{n: 60, keys: 6, seed: 9}, orders{n: 60, keys: 6, seed: 10}
			produce(t, brokers, first)
			var recs []*kgo.Record
			for _, h := range hostile {
				r := &kgo.Record{Key: []byte(h.key), Value: []byte(h.value), Timestamp: time.UnixMilli(5)}
				if h.null {
					r.Key = nil
				}
				if h.tombstone {
					r.Value = nil
				}
				recs = append(recs, r)
			}
			produceRecords(t, brokers, recs...)
			produce(t, brokers, second)
			want := expected(first, second)
			reasons := map[string]string{} // "partition/offset" -> reason
			for i, h := range hostile {
				if h.reason == "" {
					tot := want[h.key]
					tot.cents += 100
					tot.count++
					want[h.key] = tot
					continue
				}
				reasons[fmt.Sprintf("%d/%d", recs[i].Partition, recs[i].Offset)] = h.reason
			}

			e := newEngine(t, newConfig(t, brokers, m.opts), nil)
			e.start(t)
			waitCaughtUp(t, e, admin(t, brokers))
			checkTotals(t, want, readTotals(t, brokers))
			dead := readCommitted(t, brokers, e.cfg.DLQTopic())
			for _, dl := range dead {
				at := header(dl, codec.HeaderSourcePartition) + "/" + header(dl, codec.HeaderSourceOffset)
				reason, ok := reasons[at]
				if !ok {
					t.Errorf("unexpected (or repeated) dead letter of %s: %.200s", at, header(dl, codec.HeaderError))
					continue
				}
				delete(reasons, at)
				if got := header(dl, codec.HeaderError); !strings.Contains(got, reason) {
					t.Errorf("dead letter of %s: reason %.300q, want it to contain %q", at, got, reason)
				}
			}
			for at, reason := range reasons {
				t.Errorf("no dead letter for the record at %s (%s)", at, reason)
			}
			if n, want := e.metric(t, "sluice_dead_letters_total"), float64(len(dead)); n != want || n == 0 {
				t.Errorf("sluice_dead_letters_total = %v, want %v", n, want)
			}
			if n := e.metric(t, "sluice_txn_aborts_total"); n != 0 {
				t.Errorf("sluice_txn_aborts_total = %v, want 0", n)
			}
			if n := e.metric(t, "sluice_backlog_switches_total", "direction=to_realtime"); m.opts.enterLag > 0 && n < 1 {
				t.Errorf("no task ran in backlog mode (switches to real-time: %v)", n)
			}
			e.stopClean(t)
		})
	}
}
