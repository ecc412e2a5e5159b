package operators

import (
	"math"

	"github.com/sluice-dev/sluice/changelog/codec"
)

// Mergeable is the other capability a keyed operator may offer the runtime (operators/task),
// beside Keyed: an operator whose state depends only on the multiset of its inputs, so the
// runtime may fold them in any order and pre-aggregate them in memory. Aggregate is the one
// operator with it, windowed or not (cogroup included). Both modes use the same methods: in
// real time the runtime folds each record into its cached state and writes the states a commit
// changed (Result for each); in backlog it folds what fits in a table of partial states, sorts
// the rest, and at the fold merges both with the stored state, one write per state key.
//
// A record folds into one or more state keys (Assign): the group key itself, or one per window
// of its event time still open at the watermark, the window's start appended
// (codec.AppendWindowKey). A state key that Closes closes when the watermark reaches CloseAt:
// the runtime keeps a timer for it, and at the commit that closes it writes its final Result
// and deletes it. The runtime knows nothing more of windows: their sizes, alignment, grace and
// columns are the operator's.
//
// Not safe for concurrent use; Layout, ValidState and CloseAt are.
type Mergeable interface {
	Operator
	// Emit is "updates" (a state key's current result at most once per commit) or "final"
	// (one result per state key, when it closes).
	Emit() string

	// StateSize is the size of an empty state in bytes; InitState writes an empty one. A state
	// is that size, or (ValidSize) longer when it holds strings.
	StateSize() int
	ValidSize(n int) bool
	InitState(dst []byte)
	// ProjectInput appends what a decoded record of input (its index among the operator's
	// inputs) contributes to dst; a bad record is an *Error.
	ProjectInput(input int, r *Record, dst []byte) ([]byte, error)
	// Fold folds one projected input into state; Merge merges the state src into dst. Both
	// give the same bytes whatever order they are applied in. Each returns the state, as append
	// does: the same slice, in place, unless it had to grow past its capacity (only a state
	// with strings grows).
	Fold(state, input []byte) []byte
	Merge(dst, src []byte) []byte

	// Assign calls fn with each state key a record of key with event time ts folds into at
	// watermark wm (dst: scratch for the key, which fn must copy to keep), and reports whether
	// the record is late: it has windows, all of them closed.
	// It returns dst grown, to be passed again.
	Assign(dst, key []byte, ts, wm int64, fn func(sk []byte) error) (grown []byte, late bool, err error)
	// AssignFinal is Assign for a record that is the final of one of the operator's windows, at
	// its end - 1 (a windowed distinct's first): it folds into that window alone, the earliest
	// containing ts, not into every hopping window containing ts.
	AssignFinal(dst, key []byte, ts, wm int64, fn func(sk []byte) error) (grown []byte, late bool, err error)
	// Closes reports whether state keys close (windows); CloseAt is the watermark at which sk
	// closes (ok false: sk is not a state key that closes).
	Closes() bool
	CloseAt(sk []byte) (at int64, ok bool)
	// Result appends the result of state key sk to dst: its value, and its Kafka key, which is
	// sk[:keyLen]; ts is its event time for later operators that read it by event time
	// (math.MinInt64: none).
	Result(sk, state, dst []byte) (value []byte, keyLen int, ts int64)
	// OutputLag is how far behind the operator's watermark the event time of a result it emits
	// later can lie (a window's grace).
	OutputLag() int64
	// Window describes its windows for the status page ("" when it has none).
	Window() string
}

var _ Mergeable = (*Aggregate)(nil)

// Assign: the key itself, unwindowed; one window key per open window of ts, windowed.
func (a *Aggregate) Assign(dst, key []byte, ts, wm int64, fn func(sk []byte) error) ([]byte, bool, error) {
	if a.windows == nil {
		return dst, false, fn(key)
	}
	var err error
	open := 0
	a.windows.Assign(ts, wm, func(start int64) {
		if err != nil {
			return
		}
		open++
		dst = codec.AppendWindowKey(dst[:0], key, start)
		err = fn(dst)
	})
	return dst, open == 0 && err == nil, err
}

// AssignFinal: the key itself, unwindowed; windowed, the window key of the earliest window
// containing ts (for a record at a window's end - 1, that window), late if it is closed.
func (a *Aggregate) AssignFinal(dst, key []byte, ts, wm int64, fn func(sk []byte) error) ([]byte, bool, error) {
	if a.windows == nil {
		return dst, false, fn(key)
	}
	start := floorDiv(ts, a.windows.Advance)*a.windows.Advance - a.windows.Size + a.windows.Advance
	if a.windows.Close(start) <= wm {
		return dst, true, nil
	}
	dst = codec.AppendWindowKey(dst[:0], key, start)
	return dst, false, fn(dst)
}

// Slices returns the aggregate's windows when a backlog may fold its records by slice
// (Windows.Sliced: hopping windows, each the union of Size/Advance slices), else nil. A window's
// state is then the Merge of its slices' states: Merge is exact for every aggregate field.
func (a *Aggregate) Slices() *Windows {
	if !a.windows.Sliced() {
		return nil
	}
	return a.windows
}

// Closes reports whether the aggregate is windowed (tumbling or hopping).
func (a *Aggregate) Closes() bool { return a.windows != nil }

// CloseAt is the window's end plus grace (not ok unwindowed, or for a key too short to be a
// window key).
func (a *Aggregate) CloseAt(sk []byte) (int64, bool) {
	if a.windows == nil {
		return 0, false
	}
	_, start, ok := codec.SplitWindowKey(sk)
	if !ok {
		return 0, false
	}
	return a.windows.Close(start), true
}

// Result renders the state (Render; RenderWindow for a window key, whose event time is the
// window's end - 1, its last instant, which no result of a window still open at the announced
// output watermark precedes).
func (a *Aggregate) Result(sk, state, dst []byte) ([]byte, int, int64) {
	if a.windows == nil {
		return a.Render(sk, state, dst), len(sk), math.MinInt64
	}
	gk, start, _ := codec.SplitWindowKey(sk)
	end := start + a.windows.Size
	return a.RenderWindow(gk, start, end, state, dst), len(gk), end - 1
}

// OutputLag is the windows' grace (0 unwindowed).
func (a *Aggregate) OutputLag() int64 {
	if a.windows == nil {
		return 0
	}
	return a.windows.Grace
}

// Window describes the windows ("tumbling 1m0s grace 10s"; "" unwindowed).
func (a *Aggregate) Window() string {
	if a.windows == nil {
		return ""
	}
	return a.windows.String()
}
