package task

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/sorter"
)

// Slices. A hopping window of size s advancing by a, with s a multiple of a, is the union of s/a
// slices, the a-long intervals its records fall in. In a backlog a record of such an aggregate
// goes to the sorter (or the partials) once, under its slice's key, rather than once per window
// containing it (q5's 10 s windows sliding by 2 s: a fifth of the entries to sort); the fold sums
// each slice and merges the sum into the slice's s/a windows (Mergeable.Merge: exact, whatever
// the order). Flink slices its hopping windows the same way.
//
// A slice key is the window key of the slice's start followed by sliceMark, so it sorts after
// the window key of the same start and before the next one; its entries are tagged tagSlice
// (tagSlicePartial from the partials table, which holds only slices while an operator slices).
// A record that is late for some of its windows goes to its open windows one by one, past the
// partials (window entries, tagInput).
//
// The fold emits each window once, in key order, when no later entry can reach it: that is an
// entry past (group, start + s - a) followed by the mark. That order holds when no group key is
// another's prefix followed by a byte a window start can begin with (0x7f or 0x80 for times
// from 1970 to year 3000): valid UTF-8 without DEL ensures it (sliceSafe). A record whose key
// or time is not safe marks the backlog (sliceState.unsafe); its fold then expands every slice
// into its windows in a second sorter and folds that (expandSlices), and the operator stops
// slicing.

const (
	tagSlice        = 2 // a record's projected input, under its slice's key
	tagSlicePartial = 3 // a slice's partial state from the partials table

	sliceMark = 0 // after a slice's window key
)

// sliceState is an operator's slicing (in opState).
type sliceState struct {
	w      *operators.Windows // the aggregate's windows if it slices (Aggregate.Slices), else nil
	have   bool               // the backlog holds slice entries
	unsafe bool               // the backlog holds a record whose key or time sliceSafe refuses
}

// reset forgets the backlog's entries (after its fold, or an abort).
func (s *sliceState) reset() { s.have, s.unsafe = false, false }

// sliceSafe reports whether a record of key at ts keeps a sliced fold in key order: valid
// UTF-8 without DEL (no key is another followed by 0x7f or 0x80), and every window start of
// ts in [0, 2^55) (its encoding starts with 0x80).
func sliceSafe(key []byte, ts int64, w *operators.Windows) bool {
	return ts >= w.Size && ts < 1<<55 && bytes.IndexByte(key, 0x7f) < 0 && utf8.Valid(key)
}

// applySlice takes the current record of a slicing operator's backlog: under its slice's key
// when its key and time are safe and all its windows are open (true), else it leaves the
// record to the window entries (false).
func (t *Task) applySlice(c *chain) (bool, error) {
	s := &c.slices
	if !sliceSafe(c.rec.Key, c.rec.Time, s.w) {
		s.unsafe = true
		return false, nil
	}
	if c.plan.WindowFinals {
		return false, nil
	}
	start, open := s.w.Slice(c.rec.Time, c.ownWatermark())
	if !open {
		return false, nil
	}
	c.wk = append(codec.AppendWindowKey(c.wk[:0], c.rec.Key, start), sliceMark)
	c.scratch[0] = tagSlice
	s.have = true
	return true, t.apply(c, c.wk, c.next-1, c.scratch)
}

// sortEntry adds a window entry of a slicing operator's backlog to the sorter, past the
// partials (which hold only slices).
func (t *Task) sortEntry(c *chain, sk []byte) error {
	if err := c.sorter.Add(sk, c.rec.Time, c.next-1, c.scratch); err != nil {
		return fmt.Errorf("task %d: sorter: %w", t.partition, err)
	}
	return nil
}

// sliceFold is a sliced fold's windows: the slice being summed, and the windows it and the
// window entries reached that later entries may still reach, in key order.
type sliceFold struct {
	w     *operators.Windows
	slice []byte // the key of the slice being summed
	sum   []byte // its state
	have  bool
	open  []*openWindow // by key
	free  []*openWindow
	last  []byte // the last window emitted (they go in key order)
	until []byte // scratch: a window key
}

// openWindow is a window a sliced fold has reached: its state (stored, merged with what
// reached it) and the largest entry key that can still reach it.
type openWindow struct {
	key, st, until []byte
	stored         bool
}

// mergeSliced folds a slicing operator's sorted backlog and partials: it sums each slice and
// merges the sum into its windows, folds window entries into theirs, and emits each window
// once, in key order, when the entries have passed every key that reaches it.
func (f *mergeFold) mergeSliced(it *sorter.Iterator) error {
	f.sl.w = f.c.slices.w
	pkeys := f.c.part.sortedKeys() // slices only
	for it.Next() {
		ik := it.Key()
		for len(pkeys) > 0 && pkeys[0] <= string(ik) {
			st, _ := f.c.part.get([]byte(pkeys[0]))
			if err := f.sliceEntry([]byte(pkeys[0]), tagSlicePartial, st); err != nil {
				return err
			}
			pkeys = pkeys[1:]
		}
		p := it.Payload()
		if err := f.sliceEntry(ik, p[0], p[1:]); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("task %d: merge: %w", f.t.partition, err)
	}
	for _, k := range pkeys {
		st, _ := f.c.part.get([]byte(k))
		if err := f.sliceEntry([]byte(k), tagSlicePartial, st); err != nil {
			return err
		}
	}
	if err := f.sumSlice(); err != nil {
		return err
	}
	return f.emitWindows(nil)
}

// sliceEntry takes one sorted entry (or partial state) of key k.
func (f *mergeFold) sliceEntry(k []byte, tag byte, in []byte) error {
	s := &f.sl
	switch tag {
	case tagSlice, tagSlicePartial:
		if !s.have || !bytes.Equal(k, s.slice) {
			if err := f.sumSlice(); err != nil {
				return err
			}
			s.slice = append(s.slice[:0], k...)
			s.sum = slices.Grow(s.sum[:0], f.agg.StateSize())[:f.agg.StateSize()]
			f.agg.InitState(s.sum)
			s.have = true
		}
		if tag == tagSlice {
			s.sum = f.agg.Fold(s.sum, in)
		} else {
			s.sum = f.agg.Merge(s.sum, in)
		}
		return nil
	}
	if err := f.sumSlice(); err != nil {
		return err
	}
	if err := f.emitWindows(k); err != nil {
		return err
	}
	w, err := f.openWindow(k)
	if err != nil {
		return err
	}
	if tag == tagPartial {
		w.st = f.agg.Merge(w.st, in)
	} else {
		w.st = f.agg.Fold(w.st, in)
	}
	return nil
}

// sumSlice merges the slice summed so far into each of its windows.
func (f *mergeFold) sumSlice() error {
	s := &f.sl
	if !s.have {
		return nil
	}
	s.have = false
	if err := f.emitWindows(s.slice); err != nil {
		return err
	}
	g, last, ok := codec.SplitWindowKey(s.slice[:len(s.slice)-1])
	if !ok {
		return fmt.Errorf("task %d: a slice key of %d bytes", f.t.partition, len(s.slice))
	}
	for start := last - s.w.Size + s.w.Advance; start <= last; start += s.w.Advance {
		s.until = codec.AppendWindowKey(s.until[:0], g, start)
		w, err := f.openWindow(s.until)
		if err != nil {
			return err
		}
		w.st = f.agg.Merge(w.st, s.sum)
	}
	return nil
}

// openWindow returns window key wk's open window, reading its stored state when it opens.
func (f *mergeFold) openWindow(wk []byte) (*openWindow, error) {
	s := &f.sl
	i, found := slices.BinarySearchFunc(s.open, wk, func(w *openWindow, k []byte) int { return bytes.Compare(w.key, k) })
	if found {
		return s.open[i], nil
	}
	if s.last != nil && bytes.Compare(wk, s.last) <= 0 {
		// sliceSafe's keys and times rule this out; an error rather than a window emitted twice.
		return nil, fmt.Errorf("task %d: sliced fold: window key %x after %x was emitted", f.t.partition, wk, s.last)
	}
	var w *openWindow
	if n := len(s.free); n > 0 {
		w, s.free = s.free[n-1], s.free[:n-1]
	} else {
		w = &openWindow{}
	}
	w.key = append(w.key[:0], wk...)
	g, start, _ := codec.SplitWindowKey(wk)
	w.until = append(codec.AppendWindowKey(w.until[:0], g, start+s.w.Size-s.w.Advance), sliceMark)
	var err error
	if w.st, w.stored, err = f.load(w.key, w.st); err != nil {
		return nil, err
	}
	s.open = slices.Insert(s.open, i, w)
	return w, nil
}

// emitWindows emits, in key order, the open windows no entry from k on can reach (all of them
// for nil k), after the pending keys before each.
func (f *mergeFold) emitWindows(k []byte) error {
	s := &f.sl
	n := 0
	for ; n < len(s.open); n++ {
		w := s.open[n]
		if k != nil && bytes.Compare(w.until, k) >= 0 {
			break
		}
		if err := f.flushPending(w.key); err != nil {
			return err
		}
		if err := f.emit(w.key, w.st, true, w.stored); err != nil {
			return err
		}
		s.last = append(s.last[:0], w.key...)
		s.free = append(s.free, w)
	}
	s.open = slices.Delete(s.open, 0, n)
	return nil
}

// expandSlices makes the backlog of an operator that sliced records before one sliceSafe
// refuses a backlog of window entries only: a second sorter gets each slice entry and partial
// once per window of the slice, and every other entry as it is. The fold then merges that
// sorter as it would any; the operator slices no more.
func (t *Task) expandSlices(c *chain) (*sorter.Sorter, func(), error) {
	dir := filepath.Join(t.d.SortDir, fmt.Sprintf("%s-%d-windows", c.plan.Keyed.Name, t.partition))
	exp, err := sorter.New(sorter.Options{Dir: dir, Budget: t.d.Budget})
	if err != nil {
		return nil, nil, fmt.Errorf("task %d: %w", t.partition, err)
	}
	done := func() { _ = exp.Close(); _ = os.RemoveAll(dir) }
	w := c.slices.w
	var wk, buf []byte
	add := func(k []byte, ts, off int64, tag byte, in []byte) error {
		if tag != tagSlice && tag != tagSlicePartial {
			return exp.Add(k, ts, off, append(append(buf[:0], tag), in...))
		}
		g, last, ok := codec.SplitWindowKey(k[:len(k)-1])
		if !ok {
			return fmt.Errorf("a slice key of %d bytes", len(k))
		}
		nt := byte(tagInput)
		if tag == tagSlicePartial {
			nt = tagPartial
		}
		buf = append(append(buf[:0], nt), in...)
		for start := last - w.Size + w.Advance; start <= last; start += w.Advance {
			wk = codec.AppendWindowKey(wk[:0], g, start)
			if err := exp.Add(wk, ts, off, buf); err != nil {
				return err
			}
		}
		return nil
	}
	it, err := c.sorter.Merge()
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("task %d: merge: %w", t.partition, err)
	}
	defer it.Close()
	for it.Next() {
		p := it.Payload()
		if err := add(it.Key(), it.Time(), it.Offset(), p[0], p[1:]); err != nil {
			done()
			return nil, nil, fmt.Errorf("task %d: sorter: %w", t.partition, err)
		}
	}
	if err := it.Err(); err != nil {
		done()
		return nil, nil, fmt.Errorf("task %d: merge: %w", t.partition, err)
	}
	err = c.part.each(func(k, st []byte) error { return add(k, 0, 0, tagSlicePartial, st) })
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("task %d: sorter: %w", t.partition, err)
	}
	c.part.drop()
	return exp, done, nil
}
