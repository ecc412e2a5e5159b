package operators

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

// windowTops returns a top over tumbling windows with ties (n: 1, largest) and one over hopping
// windows without (n: 2, smallest).
func windowTops(tb testing.TB) []*WindowTop {
	var ops []*WindowTop
	for _, cfg := range []configs.Top{
		{Input: "orders", N: 1, By: "amount", Ties: true, Window: &configs.Window{Tumbling: 10 * time.Second, Grace: time.Second}},
		{Input: "orders", N: 2, By: "amount", Order: configs.OrderAsc, Window: &configs.Window{Hopping: 10 * time.Second, Advance: 5 * time.Second}},
	} {
		w, err := NewWindowTop("top", cfg)
		if err != nil {
			tb.Fatal(err)
		}
		ops = append(ops, w)
	}
	return ops
}

// FuzzWindowTopState: any stored bytes are a window top's state or not (ValidState, the
// restore's check); Process refuses bytes not laid out as windows of rows with an error; on a
// valid state, Process and OnTimer keep it valid (windows in start order, rows in rank order,
// no more than n plus the ties of the n-th) and emit JSON objects when the stored records are
// (rows are the records as they came, which the restore does not parse again).
func FuzzWindowTopState(f *testing.F) {
	ops := windowTops(f)
	src := mustSource(f, configs.Source{Topic: "t"})
	project := func(tb testing.TB, w *WindowTop, amount string) []byte {
		var r Record
		if err := src.Decode([]byte("c-1"), []byte(`{"amount":`+amount+`}`), 7, &r); err != nil {
			tb.Fatal(err)
		}
		in, err := w.Project(0, &r, nil)
		if err != nil {
			tb.Fatal(err)
		}
		return in
	}
	// Seeds: no state, windows of one row, of ties, of several windows; bytes that are none.
	f.Add([]byte{}, int64(1_000), int64(0), int64(5))
	for _, w := range ops {
		c := &sessCtx{}
		for i, ts := range []int64{1_000, 2_000, 12_000, 13_000} {
			if err := w.Process(c.at(0), []byte("c-1"), ts, project(f, w, []string{"5", "5.0", "7", "1"}[i])); err != nil {
				f.Fatal(err)
			}
			f.Add(bytes.Clone(c.state), int64(15_000), int64(11_000), int64(6))
		}
	}
	f.Add([]byte{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, int64(0), int64(0), int64(0))
	f.Add([]byte{1, 0xff, 0xff}, int64(math.MaxInt64), int64(math.MinInt64), int64(-3))
	f.Fuzz(func(t *testing.T, st []byte, ts, wm, amount int64) {
		for _, w := range ops {
			in := project(t, w, strconv.FormatInt(amount%10, 10))
			c := &sessCtx{state: bytes.Clone(st)}
			if len(st) == 0 {
				c.state = nil
			}
			valid := len(st) == 0 || w.ValidState(st)
			d := &WindowTop{top: w.top, win: w.win, ties: w.ties}
			laidOut := d.decode(st)
			objects := true
			for _, r := range d.arena {
				objects = objects && json.Valid(r.rec)
			}
			ts = min(max(ts, MinTime), MaxTime) // Source.Decode's range
			err := w.Process(c.at(min(wm, ts)), []byte("c-1"), ts, in)
			switch {
			case !laidOut && err == nil:
				t.Fatalf("ties=%v: Process accepted state %x, which is not laid out as windows", w.ties, st)
			case valid && err != nil:
				t.Fatalf("ties=%v: Process on a valid state %x: %v", w.ties, st, err)
			case !valid:
				continue // decodable but not valid: the restore refuses it; Process must only not panic
			}
			if c.state != nil && !w.ValidState(c.state) {
				t.Fatalf("ties=%v: Process made state %x of %x", w.ties, c.state, st)
			}
			if err := w.OnTimer(c.at(wm), []byte("c-1"), wm); err != nil {
				t.Fatalf("OnTimer: %v", err)
			}
			if c.state != nil && !w.ValidState(c.state) {
				t.Fatalf("ties=%v: OnTimer made state %x", w.ties, c.state)
			}
			for _, o := range c.outs {
				if objects && !json.Valid(o) {
					t.Fatalf("output %s is not JSON", o)
				}
			}
		}
	})
}
