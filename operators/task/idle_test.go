package task

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// TestIdleInputReleasesTheWatermark: a left stream-stream join whose right input (payments)
// never gets a record holds its unmatched orders while payments may still come; with
// watermark.idle_after, once payments has been idle that long the operator's watermark follows
// the orders alone, and the orders whose window closed come out with null. Without it they stay.
func TestIdleInputReleasesTheWatermark(t *testing.T) {
	for _, idle := range []string{"0s", "1s"} {
		t.Run("idle_after="+idle, func(t *testing.T) {
			cfg := strings.Replace(streamJoinConfig("never", "left", 1000, 0, 100, false, false), "payments: {topic: "+cgRefunds+", key: customer_id, timestamp: ts, watermark: {max_delay: 0ms}}",
				"payments: {topic: "+cgRefunds+", key: customer_id, timestamp: ts, watermark: {max_delay: 0ms, idle_after: "+idle+"}}", 1)
			if !strings.Contains(cfg, "idle_after: "+idle) {
				t.Fatalf("config not rewritten:\n%s", cfg)
			}
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { return now }
			tk, err := NewGroup(mustPlan(t, cfg), []string{cgOrders, cgRefunds}, 0, Deps{
				Store: state.NewMem(), Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Clock: clock, Logger: discardLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer tk.Close()
			prod := newFakeProducer()
			base := int64(1_767_225_600_000)
			order := func(i int, ts int64) *kgo.Record {
				return &kgo.Record{Topic: cgOrders, Offset: int64(i), Key: []byte("c-1"), Value: fmt.Appendf(nil, `{"id":%d,"customer_id":"c-1","ts":%d}`, i, ts)}
			}
			feed := func(recs ...*kgo.Record) {
				tk.BeforeBatch(cgOrders, Lag{})
				if err := tk.Process(cgOrders, recs); err != nil {
					t.Fatal(err)
				}
				tk.AfterBatch(cgOrders, Lag{})
				pd, err := tk.Checkpoint(prod)
				if err != nil {
					t.Fatal(err)
				}
				prod.commit()
				if err := tk.Committed(pd); err != nil {
					t.Fatal(err)
				}
			}
			feed(order(0, base), order(1, base+10_000))
			now = now.Add(2 * time.Second) // payments idle for 2 s
			feed(order(2, base+20_000))
			var nulls int
			for _, r := range prod.committed(cgSink) {
				if strings.Contains(string(r.Value), `"payments":null`) {
					nulls++
				}
			}
			// With idleness the watermark is the orders' (base+20000): orders 0 and 1 (dropped at
			// t + 2·1000 + 1) are out; order 2 is not. Without it, nothing.
			want := map[string]int{"0s": 0, "1s": 2}[idle]
			if nulls != want {
				t.Fatalf("%d unmatched orders emitted, want %d: %v", nulls, want, prod.committed(cgSink))
			}
		})
	}
}
