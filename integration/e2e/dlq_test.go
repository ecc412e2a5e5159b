package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestBadRecordsGoToDLQ mixes four kinds of bad orders into good ones: every bad one must land
// in <group>-dlq with a sluice.error header, and the good ones' totals must be exact.
func TestBadRecordsGoToDLQ(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	brokers := kafkatest.Fake(t, 4)
	good := workload.Spec{Records: 4_000, Keys: 200, Partitions: 4, Seed: 31}
	p := newPipeline(t, brokers, pipelineOpts{partitions: 4, keys: good.Keys, enterLag: 100_000, exitLag: 500})

	ts := workload.DefaultStartTS
	bad := []struct {
		name, key, value, errHas string
	}{
		{"invalid JSON", "c-0000001", `{"order_id":"bad-1","customer_id":"c-0000001","amount":1.00,`, ""},
		{"missing customer_id", "c-0000002", fmt.Sprintf(`{"order_id":"bad-2","amount":1.00,"ts":%d}`, ts), "customer_id"},
		{"key mismatch", "c-0000003", fmt.Sprintf(`{"order_id":"bad-3","customer_id":"c-0000004","amount":1.00,"ts":%d}`, ts), "differs"},
		{"non-numeric amount", "c-0000005", fmt.Sprintf(`{"order_id":"bad-4","customer_id":"c-0000005","amount":"lots","ts":%d}`, ts), "amount"},
	}
	cl := kafkatest.Client(t, brokers)
	produceBad := func() {
		for _, b := range bad {
			r := &kgo.Record{Topic: p.topic, Key: []byte(b.key), Value: []byte(b.value), Timestamp: time.UnixMilli(ts)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("producing %s: %v", b.name, err)
			}
		}
	}
	// Bad records before the good ones, and again after them while the instance runs.
	produceBad()
	in := p.newInstance("d0", false)
	in.start()
	if err := p.produce(ctx, good); err != nil {
		t.Fatal(err)
	}
	produceBad()
	p.waitCaughtUp(ctx, 60*time.Second, in)
	in.term()

	// The dead letters were committed in sluice's transactions: read them with read_committed
	// until all are there (they are, once the group committed every input offset).
	dlq := p.group + "-dlq"
	c := kafkatest.Client(t, brokers, kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []*kgo.Record
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	for len(got) < 2*len(bad) {
		fs := c.PollFetches(rctx)
		if rctx.Err() != nil {
			break
		}
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", dlq, err)
		}
		got = append(got, fs.Records()...)
	}
	if len(got) != 2*len(bad) {
		t.Errorf("%s holds %d records after 20s, want %d (each bad record twice)", dlq, len(got), 2*len(bad))
	}
	for _, b := range bad {
		same := func(r *kgo.Record) bool { return string(r.Value) == b.value }
		i := slices.IndexFunc(got, same)
		if n := countFunc(got, same); n != 2 {
			t.Errorf("%s: %d times in %s, want 2", b.name, n, dlq)
		}
		if i < 0 {
			continue
		}
		r := got[i]
		if string(r.Key) != b.key {
			t.Errorf("%s: dead letter key %q, want %q", b.name, r.Key, b.key)
		}
		var msg string
		var has bool
		for _, h := range r.Headers {
			if h.Key == "sluice.error" {
				msg, has = string(h.Value), true
			}
		}
		switch {
		case !has || msg == "":
			t.Errorf("%s: dead letter without a sluice.error header; headers %v", b.name, r.Headers)
		case !strings.Contains(msg, b.errHas):
			t.Errorf("%s: sluice.error %q does not mention %q", b.name, msg, b.errHas)
		default:
			t.Logf("%s: sluice.error=%q", b.name, msg)
		}
	}
	p.verify(ctx, p.expected(good), in.id)
}

func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
}
