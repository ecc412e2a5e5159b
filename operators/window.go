package operators

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

// Windows assigns records to event-time windows: tumbling (Advance == Size) or hopping
// windows, aligned to the epoch, [start, start+Size). A window closes when the watermark
// reaches its end plus Grace; a record whose every window is closed when it arrives is late.
//
// A windowed operator keeps one state per (key, window). Its state key is the group key
// followed by the window start (changelog/codec.AppendWindowKey): the runtime caches, sorts, pre-aggregates, stores
// and changelogs that composite key like any other, so a windowed aggregate folds exactly as
// an unwindowed one does. Windows is a plain immutable value, safe for concurrent use.
type Windows struct {
	Size    int64 // ms
	Advance int64 // ms; Size for tumbling windows
	Grace   int64 // ms
}

// NewWindows returns the assigner of w, or nil for an unwindowed aggregate (w == nil) and for
// session windows (NewSessions). w must have been validated.
func NewWindows(w *configs.Window) (*Windows, error) {
	switch w.Kind() {
	case "":
		return nil, nil
	case "tumbling":
		size := w.Tumbling.Milliseconds()
		return &Windows{Size: size, Advance: size, Grace: w.Grace.Milliseconds()}, nil
	case "hopping":
		return &Windows{Size: w.Hopping.Milliseconds(), Advance: w.Advance.Milliseconds(), Grace: w.Grace.Milliseconds()}, nil
	case "session":
		return nil, nil // a Keyed operator of its own (NewSessions), not an assignment of keys
	}
	return nil, fmt.Errorf("operators: unknown window kind %q", w.Kind())
}

// String describes the windows ("tumbling 1m0s grace 10s").
func (w *Windows) String() string {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	if w.Advance == w.Size {
		return fmt.Sprintf("tumbling %v grace %v", ms(w.Size), ms(w.Grace))
	}
	return fmt.Sprintf("hopping %v advance %v grace %v", ms(w.Size), ms(w.Advance), ms(w.Grace))
}

// floorDiv is a/b rounded towards -inf (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Close returns the watermark at which the window starting at start closes: end + grace
// (saturating at MaxInt64).
func (w *Windows) Close(start int64) int64 {
	c := start + w.Size + w.Grace
	if c < start { // overflow
		return math.MaxInt64
	}
	return c
}

// Assign calls fn with the start of every window containing ts that is still open at
// watermark wm (Close(start) > wm), in increasing order, and returns how many windows contain
// ts (open or not): fn called fewer times means the record is late for some windows, never
// called means it is late.
func (w *Windows) Assign(ts, wm int64, fn func(start int64)) (windows int) {
	last := floorDiv(ts, w.Advance) * w.Advance
	first := last - w.Size + w.Advance
	for s := first; s <= last; s += w.Advance {
		windows++
		if w.Close(s) > wm {
			fn(s)
		}
	}
	return windows
}

// Sliced reports whether a backlog can fold a record into its slice, the Advance-long interval
// holding it, rather than into each window containing it: hopping windows whose size is a
// multiple of their advance (a window is the union of Size/Advance slices).
func (w *Windows) Sliced() bool {
	return w != nil && w.Advance > 0 && w.Size > w.Advance && w.Size%w.Advance == 0
}

// Slice returns the start of ts's slice, which is also the start of the last window
// containing ts, and whether every window containing ts is still open at watermark wm (else
// the record goes to its open windows one by one: Assign).
func (w *Windows) Slice(ts, wm int64) (start int64, open bool) {
	start = floorDiv(ts, w.Advance) * w.Advance
	return start, w.Close(start-w.Size+w.Advance) > wm
}
