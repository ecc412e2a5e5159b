package sorter

import (
	"bytes"
	"errors"
)

// source is one sorted input of a merge: a run file or a sorted in-memory index segment.
type source struct {
	order int // position among the merge's inputs; breaks exact ties (older first)

	// current entry
	key, payload []byte
	ts, off      int64

	// in-memory segment
	seg    []entry
	i      int
	chunks [][]byte
	touch  byte // sink of the look-ahead loads (see next)
	la     int

	// run file
	run *runReader
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
	// The sorted index visits the arena in random order: load a record a few entries ahead
	// so that its cache miss overlaps with the work on this one.
	if j := s.i + s.la; s.la > 0 && j < len(s.seg) {
		q := s.seg[j].pos
		s.touch += s.chunks[q>>32][uint32(q)]
	}
	s.key, s.payload = record(s.chunks, e.pos)
	s.ts, s.off = e.ts, e.off
	return true, nil
}

// lookAhead is how far ahead of the current entry a memory source touches the arena.
const lookAhead = 8

func less(a, b *source) bool {
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
// becomes invalid (Next returns false) when its Sorter is Reset or Closed or merged again.
type Iterator struct {
	h       []*source // min-heap; h[0] is the current entry once started
	runs    []*runReader
	started bool
	err     error
	closed  bool
	keyBuf  []byte
	owner   *Sorter
}

// newIterator primes every source and builds the heap. On error it closes the runs.
func newIterator(srcs []*source, runs []*runReader) (*Iterator, error) {
	it := &Iterator{runs: runs, h: make([]*source, 0, len(srcs))}
	for _, s := range srcs {
		ok, err := s.next()
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		if ok {
			it.h = append(it.h, s)
		}
	}
	for i := len(it.h)/2 - 1; i >= 0; i-- {
		it.down(i)
	}
	return it, nil
}

func (it *Iterator) down(i int) {
	h := it.h
	n := len(h)
	x := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && less(h[r], h[l]) {
			c = r
		}
		if !less(h[c], x) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = x
}

// Next advances to the next entry and reports whether there is one. At the end, or on an
// error (see Err), it returns false.
func (it *Iterator) Next() bool {
	if it.closed || it.err != nil {
		return false
	}
	if !it.started {
		it.started = true
		return len(it.h) > 0
	}
	if len(it.h) == 0 {
		return false
	}
	top := it.h[0]
	ok, err := top.next()
	if err != nil {
		it.err = err
		it.h = it.h[:0]
		return false
	}
	if !ok {
		last := len(it.h) - 1
		it.h[0] = it.h[last]
		it.h[last] = nil
		it.h = it.h[:last]
		if last == 0 {
			return false
		}
	}
	if len(it.h) > 1 {
		it.down(0)
	}
	return true
}

// NextKey advances to the first entry of the next distinct key, skipping the rest of the
// current key's entries. Before the first Next it behaves like Next.
func (it *Iterator) NextKey() bool {
	if !it.started || len(it.h) == 0 {
		return it.Next()
	}
	it.keyBuf = append(it.keyBuf[:0], it.h[0].key...)
	for it.Next() {
		if !bytes.Equal(it.h[0].key, it.keyBuf) {
			return true
		}
	}
	return false
}

// Key returns the current entry's key (owned by the iterator, valid until the next Next).
func (it *Iterator) Key() []byte { return it.h[0].key }

// Time returns the current entry's event time.
func (it *Iterator) Time() int64 { return it.h[0].ts }

// Offset returns the current entry's offset.
func (it *Iterator) Offset() int64 { return it.h[0].off }

// Payload returns the current entry's payload (owned by the iterator, valid until the next
// Next).
func (it *Iterator) Payload() []byte { return it.h[0].payload }

// Err returns the error that stopped the iteration, if any. Errors about damaged run files
// wrap ErrCorrupt.
func (it *Iterator) Err() error { return it.err }

// Close releases the iterator's run readers. It is idempotent.
func (it *Iterator) Close() error {
	if it.closed {
		return nil
	}
	it.closed = true
	it.h = nil
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
