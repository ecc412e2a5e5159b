package sorter

import (
	"bytes"
	"errors"
)

// source is one sorted input of a merge: a run file or a sorted in-memory chunk.
type source struct {
	order int // position among the merge's inputs; breaks exact ties (older first)

	// current entry
	key, payload []byte
	ts, off      int64

	// in-memory chunk: sorted slots and the records they point to
	seg []entry
	i   int
	buf []byte

	// run file
	run *runReader

	done bool // exhausted
}

// next advances to the source's next entry.
func (s *source) next() (bool, error) {
	if s.run != nil {
		return s.run.next(s)
	}
	if s.i >= len(s.seg) {
		return false, nil
	}
	e := &s.seg[s.i]
	s.i++
	s.key, s.payload = record(s.buf, e.pos)
	s.ts, s.off = e.ts, e.off
	return true, nil
}

// less orders the current entries of two sources; an exhausted source is greater than all.
func less(a, b *source) bool {
	if a.done || b.done {
		return !a.done && b.done
	}
	if c := bytes.Compare(a.key, b.key); c != 0 {
		return c < 0
	}
	if a.ts != b.ts {
		return a.ts < b.ts
	}
	if a.off != b.off {
		return a.off < b.off
	}
	return a.order < b.order
}

// Iterator streams the entries of a Merge in (key, event time, offset) order. Exact ties are
// returned in insertion order.
//
// An Iterator is not safe for concurrent use. The memory returned by Key and Payload is owned
// by the iterator and valid until the next call to Next, NextKey or Close. The iterator
// becomes invalid (Next returns false, Err says why) when its Sorter is Reset, Closed or
// merged again.
type Iterator struct {
	// srcs are the merge inputs; tree is a tournament (loser) tree over them: tree[0] is the
	// winner, the source holding the current entry, and tree[1:] hold the losers of the
	// matches, so that advancing the winner costs log2(len(srcs)) comparisons.
	srcs    []*source
	tree    []int
	cur     *source
	runs    []*runReader
	started bool
	err     error
	closed  bool
	keyBuf  []byte
	owner   *Sorter
}

// newIterator primes every source and builds the tree. On error it closes the runs.
func newIterator(srcs []*source, runs []*runReader) (*Iterator, error) {
	it := &Iterator{srcs: srcs, runs: runs}
	for _, s := range srcs {
		ok, err := s.next()
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		s.done = !ok
	}
	k := len(srcs)
	if k == 0 {
		return it, nil
	}
	it.tree = make([]int, k)
	win := make([]int, 2*k)
	for i := range k {
		win[k+i] = i
	}
	for n := k - 1; n >= 1; n-- {
		l, r := win[2*n], win[2*n+1]
		if less(srcs[r], srcs[l]) {
			l, r = r, l
		}
		win[n], it.tree[n] = l, r
	}
	if k == 1 {
		win[1] = 0
	}
	it.tree[0] = win[1]
	it.cur = srcs[win[1]]
	return it, nil
}

// replay re-runs the matches on the path of source w, which has advanced.
func (it *Iterator) replay(w int) {
	t, srcs := it.tree, it.srcs
	for n := (len(srcs) + w) / 2; n >= 1; n /= 2 {
		if less(srcs[t[n]], srcs[w]) {
			t[n], w = w, t[n]
		}
	}
	t[0] = w
	it.cur = srcs[w]
}

// Next advances to the next entry and reports whether there is one. At the end, or on an
// error (see Err), it returns false.
func (it *Iterator) Next() bool {
	if it.closed || it.err != nil || it.cur == nil {
		return false
	}
	if !it.started {
		it.started = true
		return !it.cur.done
	}
	if it.cur.done {
		return false
	}
	ok, err := it.cur.next()
	if err != nil {
		it.err = err
		return false
	}
	it.cur.done = !ok
	it.replay(it.tree[0])
	return !it.cur.done
}

// NextKey advances to the first entry of the next distinct key, skipping the rest of the
// current key's entries. Before the first Next it behaves like Next.
func (it *Iterator) NextKey() bool {
	if !it.started || it.cur == nil || it.cur.done {
		return it.Next()
	}
	it.keyBuf = append(it.keyBuf[:0], it.cur.key...)
	for it.Next() {
		if !bytes.Equal(it.cur.key, it.keyBuf) {
			return true
		}
	}
	return false
}

// Key returns the current entry's key (owned by the iterator, valid until the next Next).
func (it *Iterator) Key() []byte { return it.cur.key }

// Time returns the current entry's event time.
func (it *Iterator) Time() int64 { return it.cur.ts }

// Offset returns the current entry's offset.
func (it *Iterator) Offset() int64 { return it.cur.off }

// Payload returns the current entry's payload (owned by the iterator, valid until the next
// Next).
func (it *Iterator) Payload() []byte { return it.cur.payload }

// Err returns the error that stopped the iteration, if any. Errors about damaged run files
// wrap ErrCorrupt.
func (it *Iterator) Err() error { return it.err }

// Close releases the iterator's run readers. It is idempotent.
func (it *Iterator) Close() error {
	if it.closed {
		return nil
	}
	it.closed = true
	var errs []error
	for _, r := range it.runs {
		errs = append(errs, r.close())
	}
	it.runs = nil
	if it.owner != nil && it.owner.it == it {
		it.owner.it = nil
	}
	return errors.Join(errs...)
}
