package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/consumer"
	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/sluice-dev/sluice/operators/task"
	"github.com/sluice-dev/sluice/state"
)

// resetConfig is a pipeline with a filter (stateless) and an aggregate totals with the given
// fields, on brokers, keeping its state in dir.
func resetConfig(brokers, dir, fields string) string {
	return fmt.Sprintf(`
kafka: {brokers: [%s]}
group: g
instance_id: i-0
processing: {state_dir: %q, commit_interval: 50ms}
backlog: {mode: never}
http: {listen: "off"}
sources: {orders: {topic: orders, format: json, key: customer_id}}
operators:
  - name: positive
    filter: {input: orders, expr: "amount > 0"}
  - name: totals
    aggregate: {input: positive, fields: {%s}}
    output: out
sinks: {out: {topic: totals-out, format: json}}
`, brokers, dir, fields)
}

const (
	fieldsA = "amount: {sum: amount}, orders: {count: {}}"
	fieldsB = "amount: {sum: amount}, orders: {count: {}}, largest: {max: amount}"
)

func TestResetUsageErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, f, resetConfig("127.0.0.1:9", t.TempDir(), fieldsA))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"reset"}, "reset needs -c FILE"},
		{[]string{"reset", "-c", f}, "reset needs --operator NAME (operators with state: totals)"},
		{[]string{"reset", "-c", f, "--operator", "nope"}, "--operator nope: no such operator (operators with state: totals)"},
		{[]string{"reset", "-c", f, "--operator", "positive"}, "--operator positive: the operator has no state to reset (operators with state: totals)"},
		{[]string{"reset", "-c", f, "--operator", "totals", "extra"}, `unexpected argument "extra"`},
		{[]string{"reset", "-c", filepath.Join(t.TempDir(), "missing.yaml"), "--operator", "totals"}, "missing.yaml"},
	} {
		var out, errb bytes.Buffer
		if code := realMain(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
		if out.Len() > 0 {
			t.Errorf("%v printed %q", c.args, out.String())
		}
	}
}

// TestResetDeletes: a dry run lists the operator's local namespaces and its changelog topic and
// deletes nothing; --yes deletes exactly those (not another operator's, even one whose name
// starts alike); a second run has nothing to delete. A reset while the state dir is in use fails
// (exit 1) before deleting anything.
func TestResetDeletes(t *testing.T) {
	brokers := kafkatest.Fake(t, 2, "orders", "g-totals-changelog", "g-other-changelog")
	dir := t.TempDir()
	f := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, f, resetConfig(brokers, dir, fieldsA))
	mine := []state.Namespace{{Operator: "totals", Partition: 0}, {Operator: "totals", Partition: 1}, {Operator: "totals#layout", Partition: 0},
		{Operator: "totals#layout", Partition: 1}, {Operator: "totals#pending", Partition: 1}}
	others := []state.Namespace{{Operator: "other", Partition: 0}, {Operator: "totals_2", Partition: 0}}
	store, err := state.Open(state.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b := store.NewBatch()
	for _, ns := range append(mine, others...) {
		if err := b.Set(ns, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	if code := realMain([]string{"reset", "-c", f, "--operator", "totals", "--yes"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "stop it before a reset") {
		t.Fatalf("reset while the store is open: exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	topics := func() []string {
		t.Helper()
		// A new client each time: a client answers from its cached metadata for a while.
		td, err := kadm.NewClient(kafkatest.Client(t, brokers)).ListTopics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return td.Names()
	}
	spaces := func() []state.Namespace {
		t.Helper()
		st, err := state.Open(state.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		all, err := st.Namespaces()
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	wantAll := fmt.Sprint(spaces())

	out.Reset()
	errb.Reset()
	if code := realMain([]string{"reset", "-c", f, "--operator", "totals"}, &out, &errb); code != 0 {
		t.Fatalf("dry run: exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{
		"totals (partitions 0-1), totals#layout (partitions 0-1), totals#pending (partition 1)",
		"changelog topic g-totals-changelog: 2 partitions",
		"nothing deleted; run again with --yes",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run does not say %q:\n%s", want, out.String())
		}
	}
	if got := fmt.Sprint(spaces()); got != wantAll {
		t.Fatalf("dry run deleted state: %s, had %s", got, wantAll)
	}
	if !strings.Contains(strings.Join(topics(), " "), "g-totals-changelog") {
		t.Fatal("dry run deleted the changelog topic")
	}

	out.Reset()
	if code := realMain([]string{"reset", "-c", f, "--operator", "totals", "--yes"}, &out, &errb); code != 0 {
		t.Fatalf("reset --yes: exit %d, stderr %s", code, errb.String())
	}
	if got, want := fmt.Sprint(spaces()), fmt.Sprint(others); got != want {
		t.Fatalf("after the reset: namespaces %s, want %s", got, want)
	}
	for _, tp := range topics() {
		if tp == "g-totals-changelog" {
			t.Fatalf("changelog topic not deleted; stdout:\n%s", out.String())
		}
	}
	if !strings.Contains(strings.Join(topics(), " "), "g-other-changelog") {
		t.Fatal("another operator's changelog topic was deleted")
	}

	out.Reset()
	if code := realMain([]string{"reset", "-c", f, "--operator", "totals", "--yes"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "nothing to delete") {
		t.Fatalf("second reset: exit %d, stdout %s, stderr %s", code, out.String(), errb.String())
	}
}

// TestChangedFieldsNeedReset is the user's story, in process against kfake: a pipeline runs
// with one field list; restarted with another, it refuses to start, from its own state dir
// (task.ErrLayout) and from a fresh one restoring the changelog (changelog.ErrLayout); after
// sluice reset it runs, and the new totals count only the records after the group's offset.
func TestChangedFieldsNeedReset(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	brokers := kafkatest.Fake(t, 1, "orders")
	dir := t.TempDir()
	cl := kafkatest.Client(t, brokers, kgo.DefaultProduceTopic("orders"))
	produced := 0
	produce := func(n int) {
		t.Helper()
		for range n {
			v := fmt.Sprintf(`{"customer_id":"c-%d","amount":%d}`, produced%3, 1+produced%5)
			if err := cl.ProduceSync(t.Context(), &kgo.Record{Key: []byte(fmt.Sprintf("c-%d", produced%3)), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			produced++
		}
	}
	// run runs the pipeline until it has committed every produced record (then stops it and
	// returns nil) or fails.
	run := func(fields, stateDir string) error {
		t.Helper()
		cfg, err := configs.Parse([]byte(resetConfig(brokers, stateDir, fields)), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		want := int64(produced)
		done := make(chan error, 1)
		go func() {
			done <- runPipeline(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), runOpts{started: func(eng *consumer.Engine) {
				go func() {
					for ctx.Err() == nil {
						for _, st := range eng.Status() {
							if len(st.Chains) > 0 && st.Chains[0].CommittedOffset >= want {
								cancel()
							}
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}})
		}()
		err = <-done
		if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatal("the pipeline did not commit every record within 60s")
		}
		return err
	}
	produce(30)
	if err := run(fieldsA, dir); err != nil {
		t.Fatalf("first run: %v", err)
	}

	err := run(fieldsB, dir)
	if !errors.Is(err, task.ErrLayout) || !strings.Contains(err.Error(), "added largest=max(amount)") {
		t.Fatalf("changed fields over the old state dir: %v, want task.ErrLayout saying what was added", err)
	}
	err = run(fieldsB, t.TempDir())
	if !errors.Is(err, changelog.ErrLayout) {
		t.Fatalf("changed fields over a fresh state dir: %v, want changelog.ErrLayout", err)
	}

	f := filepath.Join(t.TempDir(), "b.yaml")
	writeFile(t, f, resetConfig(brokers, dir, fieldsB))
	var out, errb bytes.Buffer
	if code := realMain([]string{"reset", "-c", f, "--operator", "totals", "--yes"}, &out, &errb); code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, out.String(), errb.String())
	}
	produce(6) // two orders per customer
	if err := run(fieldsB, dir); err != nil {
		t.Fatalf("run after the reset: %v", err)
	}
	// The newest output of c-0 counts its two orders since the reset.
	rd := kafkatest.Client(t, brokers, kgo.ConsumeTopics("totals-out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	hw, err := kadm.NewClient(rd).ListEndOffsets(t.Context(), "totals-out")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := hw.Lookup("totals-out", 0)
	var last string
	for seen := int64(0); seen < end.Offset; {
		fs := rd.PollFetches(t.Context())
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen = r.Offset + 1
			if !r.Attrs.IsControl() && string(r.Key) == "c-0" {
				last = string(r.Value)
			}
		})
	}
	if !strings.Contains(last, `"orders":2`) || !strings.Contains(last, `"largest":`) {
		t.Fatalf("c-0's last output after the reset: %s; want 2 orders and the new field", last)
	}
}
