package state

import (
	"bytes"
	"slices"
	"sync"
)

// Mem is the in-memory model of Store, for tests: the same contract as *DB, with no durability
// and a Loader that buffers in memory. Safe for concurrent use (see Store): mu is held only over
// map reads and writes, never over a Scan's callback (Scan and Iter copy the namespace first), and
// Close waits for the calls in flight through the same gate as *DB. Values returned by Get are
// owned by the caller.
type Mem struct {
	// gate counts calls in flight and refuses new ones once Close has begun (gate.go).
	gate gate
	mu   struct {
		sync.Mutex
		spaces map[Namespace]*memSpace // nil once closed
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
	m.gate.init()
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
	if err := m.gate.enter(); err != nil {
		return dst, false, err
	}
	defer m.gate.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
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
	if err := m.gate.enter(); err != nil {
		return 0, false, err
	}
	defer m.gate.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
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
	if err := m.gate.enter(); err != nil {
		return err
	}
	defer m.gate.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mu.spaces, ns)
	return nil
}

// Scan implements Store: NewIter in a loop, fn called without the lock.
func (m *Mem) Scan(ns Namespace, fn func(key, val []byte) error) error {
	return scanIter(m, ns, fn)
}

// NewIter implements Store: it copies the namespace's entries under the lock and iterates over
// the copy, counted in the gate until it is finished.
func (m *Mem) NewIter(ns Namespace) (Iter, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	if err := m.gate.enter(); err != nil {
		return nil, err
	}
	var snap []memKV
	m.mu.Lock()
	if s := m.spaceLocked(ns, false); s != nil {
		snap = make([]memKV, 0, len(s.kv))
		for k, v := range s.kv {
			snap = append(snap, memKV{[]byte(k), v}) // values are never mutated in place
		}
	}
	m.mu.Unlock()
	slices.SortFunc(snap, func(a, b memKV) int { return bytes.Compare(a.k, b.k) })
	return &memIter{m: m, kvs: snap, i: -1, live: true}, nil
}

type memKV struct{ k, v []byte }

// memIter is the Iter of a Mem, over a sorted copy of a namespace. Not safe for concurrent use.
type memIter struct {
	m     *Mem
	kvs   []memKV
	i     int  // the current entry
	live  bool // not finished: counted in the gate
	valid bool // positioned on kvs[i]
	err   error
}

func (it *memIter) Next() bool {
	it.valid = false
	if !it.live {
		return false
	}
	if it.m.gate.closed() {
		it.finish(ErrClosed)
		return false
	}
	it.i++
	if it.i >= len(it.kvs) {
		it.finish(nil)
		return false
	}
	it.valid = true
	return true
}

func (it *memIter) Key() []byte {
	if !it.valid {
		panic("state: Iter.Key called without a Next that returned true")
	}
	return it.kvs[it.i].k
}

func (it *memIter) Value() []byte {
	if !it.valid {
		panic("state: Iter.Value called without a Next that returned true")
	}
	return it.kvs[it.i].v
}

func (it *memIter) Err() error { return it.err }

func (it *memIter) Close() error {
	it.valid = false
	if it.live {
		it.finish(nil)
	}
	return it.err
}

func (it *memIter) finish(err error) {
	it.live, it.kvs, it.err = false, nil, err
	it.m.gate.leave()
}

// Namespaces implements Store.
func (m *Mem) Namespaces() ([]Namespace, error) {
	if err := m.gate.enter(); err != nil {
		return nil, err
	}
	defer m.gate.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Namespace
	for ns, s := range m.mu.spaces {
		if len(s.kv) > 0 || s.hasOff {
			out = append(out, ns)
		}
	}
	slices.SortFunc(out, compareNS)
	return out, nil
}

// Close implements Store: as *DB's, it refuses new calls and waits for the calls in flight (a
// running Scan and an unfinished Iter included) before it drops the contents.
func (m *Mem) Close() error {
	if err := m.gate.shut(); err != nil {
		return err
	}
	m.gate.wait()
	m.mu.Lock()
	m.mu.spaces = nil
	m.mu.Unlock()
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
	if err := m.gate.enter(); err != nil {
		return err
	}
	defer m.gate.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
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
	if err := m.gate.enter(); err != nil {
		return nil, err
	}
	m.gate.leave()
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
