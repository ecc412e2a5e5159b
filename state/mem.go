package state

import (
	"bytes"
	"slices"
	"sync"
)

// Mem is the in-memory model of Store, for tests: the same contract as *DB, with no durability
// and a Loader that buffers in memory. Safe for concurrent use (see Store). Values returned by Get
// are owned by the caller.
type Mem struct {
	mu struct {
		sync.Mutex
		closed bool
		spaces map[Namespace]*memSpace
	}
}

type memSpace struct {
	kv     map[string][]byte
	off    int64
	hasOff bool
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	m := &Mem{}
	m.mu.spaces = make(map[Namespace]*memSpace)
	return m
}

// spaceLocked returns ns's space, creating it if create is set (else it may return nil).
func (m *Mem) spaceLocked(ns Namespace, create bool) *memSpace {
	s := m.mu.spaces[ns]
	if s == nil && create {
		s = &memSpace{kv: make(map[string][]byte)}
		m.mu.spaces[ns] = s
	}
	return s
}

// Get implements Store.
func (m *Mem) Get(ns Namespace, key []byte, dst []byte) ([]byte, bool, error) {
	if err := checkNS(ns); err != nil {
		return dst, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return dst, false, ErrClosed
	}
	s := m.spaceLocked(ns, false)
	if s == nil {
		return dst, false, nil
	}
	v, ok := s.kv[string(key)]
	if !ok {
		return dst, false, nil
	}
	return append(dst, v...), true, nil
}

// Offset implements Store.
func (m *Mem) Offset(ns Namespace) (int64, bool, error) {
	if err := checkNS(ns); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return 0, false, ErrClosed
	}
	s := m.spaceLocked(ns, false)
	if s == nil || !s.hasOff {
		return 0, false, nil
	}
	return s.off, true, nil
}

// Drop implements Store.
func (m *Mem) Drop(ns Namespace) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return ErrClosed
	}
	delete(m.mu.spaces, ns)
	return nil
}

// Scan implements Store. It copies the namespace, then calls fn without holding the lock.
func (m *Mem) Scan(ns Namespace, fn func(key, val []byte) error) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	type kv struct{ k, v []byte }
	var snap []kv
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if s := m.spaceLocked(ns, false); s != nil {
		snap = make([]kv, 0, len(s.kv))
		for k, v := range s.kv {
			snap = append(snap, kv{[]byte(k), v}) // values are never mutated in place
		}
	}
	m.mu.Unlock()
	slices.SortFunc(snap, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, e := range snap {
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// Namespaces implements Store.
func (m *Mem) Namespaces() ([]Namespace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrClosed
	}
	var out []Namespace
	for ns, s := range m.mu.spaces {
		if len(s.kv) > 0 || s.hasOff {
			out = append(out, ns)
		}
	}
	slices.SortFunc(out, compareNS)
	return out, nil
}

// Close implements Store.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return ErrClosed
	}
	m.mu.closed = true
	m.mu.spaces = nil
	return nil
}

type memOpKind uint8

const (
	memSet memOpKind = iota
	memDelete
	memOffset
)

type memOp struct {
	kind memOpKind
	ns   Namespace
	key  string
	val  []byte
	off  int64
}

// applyLocked applies ops in order.
func (m *Mem) applyLocked(ops []memOp) {
	for _, op := range ops {
		switch op.kind {
		case memSet:
			m.spaceLocked(op.ns, true).kv[op.key] = op.val
		case memDelete:
			if s := m.spaceLocked(op.ns, false); s != nil {
				delete(s.kv, op.key)
			}
		case memOffset:
			s := m.spaceLocked(op.ns, true)
			s.off, s.hasOff = op.off, true
		}
	}
}

func (m *Mem) commit(ops []memOp) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return ErrClosed
	}
	m.applyLocked(ops)
	return nil
}

// NewBatch implements Store.
func (m *Mem) NewBatch() Batch { return &memBatch{m: m} }

// memBatch records operations and applies them under the store's lock. Not safe for concurrent
// use.
type memBatch struct {
	m    *Mem
	ops  []memOp
	done bool
}

func (b *memBatch) Set(ns Namespace, key, val []byte) error {
	if b.done {
		return ErrFinished
	}
	if err := checkNS(ns); err != nil {
		return err
	}
	b.ops = append(b.ops, memOp{kind: memSet, ns: ns, key: string(key), val: bytes.Clone(val)})
	return nil
}

func (b *memBatch) Delete(ns Namespace, key []byte) error {
	if b.done {
		return ErrFinished
	}
	if err := checkNS(ns); err != nil {
		return err
	}
	b.ops = append(b.ops, memOp{kind: memDelete, ns: ns, key: string(key)})
	return nil
}

func (b *memBatch) SetOffset(ns Namespace, off int64) error {
	if b.done {
		return ErrFinished
	}
	if err := checkNS(ns); err != nil {
		return err
	}
	if err := checkOffset(ns, off); err != nil {
		return err
	}
	b.ops = append(b.ops, memOp{kind: memOffset, ns: ns, off: off})
	return nil
}

func (b *memBatch) Len() int { return len(b.ops) }

func (b *memBatch) Commit() error {
	if b.done {
		return ErrFinished
	}
	b.done = true
	ops := b.ops
	b.ops = nil
	return b.m.commit(ops)
}

func (b *memBatch) Close() {
	b.done = true
	b.ops = nil
}

// NewLoader implements Store. The Mem loader buffers every key in memory.
func (m *Mem) NewLoader(ns Namespace) (Loader, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrClosed
	}
	return &memLoader{m: m, ns: ns}, nil
}

// memLoader buffers a load. Not safe for concurrent use.
type memLoader struct {
	m      *Mem
	ns     Namespace
	ops    []memOp
	last   []byte
	off    int64
	offSet bool
	done   bool
}

func (l *memLoader) Add(key, val []byte) error {
	if l.done {
		return ErrFinished
	}
	if len(l.ops) > 0 && bytes.Compare(key, l.last) <= 0 {
		return keyOrderError(l.ns, l.last, key)
	}
	l.last = append(l.last[:0], key...)
	l.ops = append(l.ops, memOp{kind: memSet, ns: l.ns, key: string(key), val: bytes.Clone(val)})
	return nil
}

func (l *memLoader) SetOffset(off int64) { l.off, l.offSet = off, true }

func (l *memLoader) Commit() error {
	if l.done {
		return ErrFinished
	}
	l.done = true
	ops := l.ops
	l.ops = nil
	if l.offSet {
		if err := checkOffset(l.ns, l.off); err != nil {
			return err
		}
		ops = append(ops, memOp{kind: memOffset, ns: l.ns, off: l.off})
	}
	return l.m.commit(ops)
}

func (l *memLoader) Abort() error {
	l.done = true
	l.ops = nil
	return nil
}
