package task

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// TestCacheKeepsWhatFits: in real-time mode the write-back cache keeps every key while they fit
// processing.cache_keys (no eviction below the bound), and holds at most the bound above it.
func TestCacheKeepsWhatFits(t *testing.T) {
	for _, tc := range []struct{ keys, capacity int }{{50, 100}, {100, 100}, {300, 100}} {
		t.Run(fmt.Sprintf("%d keys, cache %d", tc.keys, tc.capacity), func(t *testing.T) {
			tk := newTestTask(t, mustPlan(t, testConfig("never", 50, 10, tc.capacity)), state.NewMem(), 1<<20, 0)
			var recs []*kgo.Record
			for i := range 3 * tc.keys {
				k := fmt.Sprintf("c-%d", i%tc.keys)
				recs = append(recs, &kgo.Record{Topic: testTopic, Offset: int64(i), Key: []byte(k),
					Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":1,"ts":%d}`, k, i), Timestamp: time.UnixMilli(int64(i))})
			}
			tk.BeforeBatch(testTopic, Lag{})
			for len(recs) > 0 {
				n := min(len(recs), 64)
				if err := tk.Process(testTopic, recs[:n]); err != nil {
					t.Fatal(err)
				}
				recs = recs[n:]
				pd, err := tk.Checkpoint(newFakeProducer())
				if err != nil {
					t.Fatal(err)
				}
				if err := tk.Committed(pd); err != nil {
					t.Fatal(err)
				}
			}
			got := len(tk.chains[0].cache)
			if want := min(tc.keys, tc.capacity); tc.keys <= tc.capacity && got != want || got > tc.capacity {
				t.Fatalf("cache holds %d keys, want %d (bound %d)", got, want, tc.capacity)
			}
		})
	}
}
