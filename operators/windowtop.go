package operators

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/sluice-dev/sluice/configs"
)

// WindowTop is a top-N per key and event-time window (top with window: Flink's window Top-N):
// each (key, window) keeps its n records with the largest (order: desc) or smallest (asc) value
// of a numeric field, and when the window closes (the watermark reaches its end + grace) writes
// them once, ranked, as finals, and forgets them. Without ties the ranks are 1 to n, equal values
// in arrival order (ROW_NUMBER() <= n); with ties a record's rank is 1 + the number of records
// strictly before it (RANK() <= n), and every record whose rank is at most n is kept: with n: 1,
// exactly the records at the window's maximum, all of them. A record that beats the kept ones
// pushes out those whose rank passes n, an equal one joins them, a worse one is dropped, so a
// window holds n records plus those tied with its n-th, never the rest of its input.
//
// Each row is the record with the rank column added, written under the key (the group key) with
// the window's end - 1 as its event time (TimedResults), as an aggregate's finals are: later
// operators may window them. A record whose every window is closed is late (dead-letter topic).
//
// It is a Keyed operator: a key's windows live in one state, its timer the earliest close among
// them. Process puts the record into each of its windows still open at the watermark including
// it; OnTimer closes every window the watermark has reached, in start order. Backlog mode replays
// each key's records in arrival order and fires its timer before the first record that arrived
// past it, real time after the record that moved the watermark there; a record never enters a
// window closed at its own watermark, so both give the same windows and rows.
//
// State: a version byte, the number of windows (uint32, big-endian), then per window in increasing start
// order its start (int64, big-endian), its row count (uint32) and its rows in rank order, each
// its value as a decimal (16 bytes) and its record (uint32 length, bytes). Not safe for
// concurrent use; Layout, ValidState and IsLate are.
type WindowTop struct {
	top  *Top // the ranking: n, by, order, rank column, Project
	win  *Windows
	ties bool

	ws    []topWindow // decoded state, scratch
	arena []topRow    // the decoded windows' rows
	st    []byte
	out   []byte
}

type topWindow struct {
	start int64
	rows  []topRow
}

const windowTopVersion = 1

// NewWindowTop compiles a top over windows (cfg.Window tumbling or hopping); cfg must have been
// validated.
func NewWindowTop(name string, cfg configs.Top) (*WindowTop, error) {
	t, err := NewTop(name, cfg)
	if err != nil {
		return nil, err
	}
	win, err := NewWindows(cfg.Window)
	if err != nil {
		return nil, fmt.Errorf("operators: top %s: window: %w", name, err)
	}
	if win == nil || win.Size <= 0 || win.Advance <= 0 {
		return nil, fmt.Errorf("operators: top %s: window: want tumbling or hopping, got %q", name, cfg.Window.Kind())
	}
	return &WindowTop{top: t, win: win, ties: cfg.Ties}, nil
}

// Name returns the operator name.
func (w *WindowTop) Name() string { return w.top.name }

// Attributes: the operator sorts its input in backlog (by key) and emits finals only.
func (w *WindowTop) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnlyAtEnd: true}
}

// Layout: top's (n and the order) with the windows and whether ties are kept.
func (w *WindowTop) Layout() Layout {
	l := w.top.Layout()
	l.Kind, l.Version = "windowtop", windowTopVersion
	ties := "false"
	if w.ties {
		ties = "true"
	}
	l.Parts = append(l.Parts,
		LayoutPart("window", "ms", strconv.FormatInt(w.win.Size, 10), strconv.FormatInt(w.win.Advance, 10), strconv.FormatInt(w.win.Grace, 10)),
		LayoutPart("ties", "bool", ties))
	return l
}

// OutputLag is how far behind the watermark a final emitted later can lie (TimedResults): a
// window still open at watermark wm closes after it, start + size + grace > wm, so its end - 1
// >= wm - grace.
func (w *WindowTop) OutputLag() int64 { return w.win.Grace }

// Project appends the record's value of the by field (16 bytes) and its JSON (as Top's).
func (w *WindowTop) Project(input int, r *Record, dst []byte) ([]byte, error) {
	return w.top.Project(input, r, dst)
}

// IsLate reports whether every window of a record at ts is closed at wm: the last of them, the
// one starting at or before ts latest, closes at or before wm.
func (w *WindowTop) IsLate(_ int, ts, wm int64) bool {
	return w.win.Close(floorDiv(ts, w.win.Advance)*w.win.Advance) <= wm
}

// better reports whether a ranks strictly before b.
func (w *WindowTop) better(a, b dec) bool {
	c := a.cmp(b)
	return w.top.desc && c > 0 || !w.top.desc && c < 0
}

// Process puts the record into each of its windows that is still open at the watermark.
func (w *WindowTop) Process(ctx Context, key []byte, ts int64, in []byte) error {
	if len(in) < 2*8 {
		return fmt.Errorf("operators: %s: projected input of %d bytes", w.Name(), len(in))
	}
	if !w.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a windowtop state", w.Name(), key)
	}
	row := topRow{v: loadDec(in), rec: in[16:]}
	changed := false
	w.win.Assign(ts, ctx.Watermark(), func(start int64) {
		if w.insert(start, row) {
			changed = true
		}
	})
	if !changed {
		return nil
	}
	return w.store(ctx)
}

// insert ranks row into the window at start (created if missing) and reports whether the
// window changed.
func (w *WindowTop) insert(start int64, row topRow) bool {
	i := 0
	for i < len(w.ws) && w.ws[i].start < start {
		i++
	}
	if i == len(w.ws) || w.ws[i].start != start {
		w.ws = append(w.ws, topWindow{})
		copy(w.ws[i+1:], w.ws[i:])
		w.ws[i] = topWindow{start: start, rows: []topRow{row}}
		return true
	}
	rows := w.ws[i].rows
	// The first row the record beats: equal values keep their arrival order.
	at := len(rows)
	for k := range rows {
		if w.better(row.v, rows[k].v) {
			at = k
			break
		}
	}
	if at >= w.top.n && !(w.ties && at == len(rows) && rows[at-1].v.cmp(row.v) == 0) {
		return false // below the kept rows (with ties: not tied with the last of them)
	}
	rows = append(rows[:at:at], append([]topRow{row}, rows[at:]...)...)
	w.ws[i].rows = rows[:w.keep(rows)]
	return true
}

// keep returns how many of rows (in rank order) to keep: n, and with ties the rows tied with
// the n-th too.
func (w *WindowTop) keep(rows []topRow) int {
	if len(rows) <= w.top.n {
		return len(rows)
	}
	k := w.top.n
	for w.ties && k < len(rows) && rows[k].v.cmp(rows[w.top.n-1].v) == 0 {
		k++
	}
	return k
}

// OnTimer writes and forgets every window of the key that the watermark has closed.
func (w *WindowTop) OnTimer(ctx Context, key []byte, _ int64) error {
	if !w.decode(ctx.State()) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a windowtop state", w.Name(), key)
	}
	wm := ctx.Watermark()
	open := w.ws[:0]
	for _, x := range w.ws {
		if w.win.Close(x.start) > wm {
			open = append(open, x)
			continue
		}
		end := x.start + w.win.Size
		rank := 0
		for k, r := range x.rows {
			if !w.ties || k == 0 || x.rows[k-1].v.cmp(r.v) != 0 {
				rank = k + 1
			}
			w.out = w.top.rowValue(w.out[:0], r.rec, rank)
			ctx.EmitAt(w.out, end-1)
		}
	}
	w.ws = open
	return w.store(ctx)
}

// store writes the decoded windows back and sets the timer to the earliest close (none left:
// the state and timer are deleted).
func (w *WindowTop) store(ctx Context) error {
	if len(w.ws) == 0 {
		ctx.Delete()
		return nil
	}
	ctx.Put(w.encode())
	ctx.SetTimer(w.win.Close(w.ws[0].start))
	return nil
}

// ValidState reports whether b is a windowtop state of this operator: windows in increasing
// start order, each with rows in rank order, no more than it keeps.
func (w *WindowTop) ValidState(b []byte) bool {
	v := WindowTop{top: w.top, win: w.win, ties: w.ties}
	if len(b) == 0 || !v.decode(b) {
		return false
	}
	for i, x := range v.ws {
		if i > 0 && v.ws[i-1].start >= x.start || len(x.rows) == 0 || v.keep(x.rows) != len(x.rows) {
			return false
		}
		for k := 1; k < len(x.rows); k++ {
			if v.better(x.rows[k].v, x.rows[k-1].v) {
				return false
			}
		}
	}
	return true
}

// decode loads a state into w.ws (empty for none); the rows' records point into b.
func (w *WindowTop) decode(b []byte) bool {
	w.ws, w.arena = w.ws[:0], w.arena[:0]
	if len(b) == 0 {
		return true
	}
	if len(b) < 5 || b[0] != windowTopVersion {
		return false
	}
	n := uint64(binary.BigEndian.Uint32(b[1:]))
	if b = b[5:]; n > uint64(len(b)/12) {
		return false
	}
	for range n {
		if len(b) < 12 {
			return false
		}
		x := topWindow{start: int64(binary.BigEndian.Uint64(b))}
		rows := int(binary.BigEndian.Uint32(b[8:]))
		b = b[12:]
		if rows > len(b)/20 {
			return false
		}
		for range rows {
			if len(b) < 20 {
				return false
			}
			l := int(binary.LittleEndian.Uint32(b[16:]))
			if l > len(b)-20 {
				return false
			}
			w.arena = append(w.arena, topRow{v: loadDec(b), rec: b[20 : 20+l]})
			b = b[20+l:]
		}
		// Capped: an insert into the window copies its rows rather than overwrite the next's.
		x.rows = w.arena[len(w.arena)-rows : len(w.arena) : len(w.arena)]
		w.ws = append(w.ws, x)
	}
	return len(b) == 0
}

// encode writes w.ws into a new state (w.st, reused).
func (w *WindowTop) encode() []byte {
	st := append(w.st[:0], windowTopVersion)
	st = binary.BigEndian.AppendUint32(st, uint32(len(w.ws)))
	for _, x := range w.ws {
		st = binary.BigEndian.AppendUint64(st, uint64(x.start))
		st = binary.BigEndian.AppendUint32(st, uint32(len(x.rows)))
		for _, r := range x.rows {
			st = binary.LittleEndian.AppendUint64(st, r.v.lo)
			st = binary.LittleEndian.AppendUint64(st, r.v.hi)
			st = binary.LittleEndian.AppendUint32(st, uint32(len(r.rec)))
			st = append(st, r.rec...)
		}
	}
	w.st = st
	return st
}
