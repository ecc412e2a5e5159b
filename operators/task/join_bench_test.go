package task

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// BenchmarkJoinLookup: orders joined with a loaded table of 125k rows (a task's share of 1M) in
// Pebble, per order: decode, the row's lookup, the joined value, the output record.
func BenchmarkJoinLookup(b *testing.B) {
	const rows = 125_000
	db, err := state.Open(state.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	plan := mustPlan(b, joinConfig("inner", false, "", "never", 100, 10, 1000, "0s", ""))
	tk, err := NewGroup(plan, plan.CoPartitioned()[0], 0, Deps{Store: db, Budget: sorter.NewBudget(64 << 20), SortDir: b.TempDir(), Producer: &discardProducer{}, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer tk.Close()
	tk.SetTableCommitted(joinTable, -1)
	tk.SetTableEnd(joinTable, 0, rows)
	var batch []*kgo.Record
	for i := range rows {
		batch = append(batch, customerRec(int64(i), fmt.Sprintf("c%07d", i), fmt.Sprintf(`{"customer_id":"c%07d","region":"r-%02d","tier":"gold"}`, i, i%16)))
		if len(batch) == 1000 {
			if err := tk.ProcessTable(joinTable, batch, -1); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	pool := make([]*kgo.Record, 50_000)
	for i := range pool {
		k := (i * 7919) % rows
		pool[i] = orderRec(int64(i), fmt.Sprintf("c%07d", k), "12.5", 1_700_000_000_000+int64(i), "")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 500 {
		buf := make([]*kgo.Record, 0, 500)
		for j := i; j < i+500 && j < b.N; j++ {
			r := pool[j%len(pool)]
			r.Offset = int64(j)
			buf = append(buf, r)
		}
		if err := tk.Process(testTopic, buf); err != nil {
			b.Fatal(err)
		}
	}
}
