package task

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// FuzzRestoredState: a task starts over any stored state that the changelog restore would have
// accepted (its StateChecks.Valid, a watermark of 8 bytes), for a plain, a windowed and a
// session aggregate, then streams a record of the key, checkpoints and ends its input. Every step
// may fail with an error (a key that is not a window key, say); none may panic. This is the
// runtime's side of the state encodings: cache loads, the keyed timer prefix, window keys, the
// stored watermark, the timers rebuilt from the states, rendering.
func FuzzRestoredState(f *testing.F) {
	const t0 = int64(1_767_225_600_000)
	plans := []*plan.Plan{
		mustPlan(f, testConfig("never", 50, 10, 100)),
		mustPlan(f, windowSpec{size: 60_000, advance: 20_000, grace: 1000, final: true}.config("never", 50, 10, 100, "0s")),
		mustPlan(f, sessionSpec{gap: 30_000, grace: 1000}.config("never", 50, 10, 100, "0s")),
		mustPlan(f, wtopSpec{n: 1, desc: true, ties: true, size: 60_000, advance: 20_000, grace: 1000}.config("never", 50, 10, 100, "0s")),
	}
	// Seeds: the states a real task stores for one record of c-1, for each plan.
	for kind, plan := range plans {
		st := state.NewMem()
		tk := newTestTask(f, plan, st, 1<<20, 0)
		tk.Observe(testTopic, 0, 0)
		if err := tk.Process(testTopic, []*kgo.Record{order(0, "c-1", "2.5")}); err != nil {
			f.Fatal(err)
		}
		if err := commitCheckpoint(tk, newFakeProducer()); err != nil {
			f.Fatal(err)
		}
		wm, _, _ := st.Get(codec.WatermarkNamespace(state.Namespace{Operator: testOp}), codec.WatermarkKey, nil)
		_ = st.Scan(state.Namespace{Operator: testOp}, func(k, v []byte) error {
			f.Add(uint8(kind), append([]byte(nil), k...), append([]byte(nil), v...), wm)
			return nil
		})
	}
	f.Add(uint8(1), []byte("c"), make([]byte, 60), binary.BigEndian.AppendUint64(nil, 1<<63-1))
	f.Add(uint8(2), []byte("c-1"), []byte{1, 0x80, 0, 0, 0, 0, 0, 0, 0}, []byte(nil))
	f.Fuzz(func(t *testing.T, kind uint8, key, value, wm []byte) {
		plan := plans[int(kind)%len(plans)]
		checks, err := NewStateChecks(plan)
		if err != nil {
			t.Fatal(err)
		}
		if !checks.Valid(testOp, value) || len(wm) != 0 && len(wm) != 8 {
			return // the restore refuses it
		}
		ns := state.Namespace{Operator: testOp}
		st := state.NewMem()
		b := st.NewBatch()
		if err := b.Set(ns, key, value); err != nil {
			t.Fatal(err)
		}
		if len(wm) == 8 {
			if err := b.Set(codec.WatermarkNamespace(ns), codec.WatermarkKey, wm); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		tk, err := New(plan, testTopic, 0, Deps{Store: st, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Logger: discardLogger(),
			Clock: (&stepClock{now: time.Unix(1_700_000_000, 0)}).Now})
		if err != nil {
			return // refused at start: a *LayoutError, a key that is not a window key, ...
		}
		defer tk.Close()
		group := key
		if int(kind)%len(plans) == 1 { // the windowed aggregate: window keys
			group, _, _ = codec.SplitWindowKey(key)
		}
		rec := &kgo.Record{Topic: testTopic, Offset: 0, Key: group, Timestamp: time.UnixMilli(t0),
			Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":1,"ts":%d}`, group, t0)}
		tk.Observe(testTopic, 0, 0)
		if err := tk.Process(testTopic, []*kgo.Record{rec}); err != nil {
			return
		}
		prod := newFakeProducer()
		if err := commitCheckpoint(tk, prod); err != nil {
			return
		}
		if err := tk.EndInput(testTopic); err != nil {
			return
		}
		_ = commitCheckpoint(tk, prod)
	})
}
