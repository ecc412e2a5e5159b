package sorter

import "sync"

// Budget is the process-wide sort memory (backlog.sort_memory) shared by all tasks' sorters.
// Sorters reserve it in chunks and give it back when they spill, reset or close.
//
// The Budget also keeps the memory of released chunks for the next reservations of the same
// size: a backlog spills its whole budget again and again, and allocating it anew each time
// made the garbage collector run for it. Reserved plus kept memory never exceeds the limit.
// Once no sorter holds a reservation after a reset (every backlog has been folded), the kept
// memory is dropped.
//
// A Budget is safe for concurrent use.
type Budget struct {
	limit int64

	mu       sync.Mutex
	used     int64             // bytes reserved by sorters
	free     map[int][][]entry // released chunks' memory by size in bytes
	freeSize int64             // bytes in free
}

// NewBudget returns a budget of the given size in bytes. A budget of zero or less grants no
// reservation; sorters then work with their minimum private chunks only.
func NewBudget(bytes int64) *Budget {
	if bytes < 0 {
		bytes = 0
	}
	return &Budget{limit: bytes, free: map[int][][]entry{}}
}

// Limit returns the size of the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the bytes currently reserved by sorters. It never exceeds Limit.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// kept returns the bytes of released chunk memory kept for reuse.
func (b *Budget) kept() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freeSize
}

// tryReserve reserves size bytes if that keeps Used within Limit. It returns kept memory of
// that size when it has some (nil: the caller allocates).
func (b *Budget) tryReserve(size int) (mem []entry, ok bool) {
	n := int64(size)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return nil, false
	}
	b.used += n
	if l := b.free[size]; len(l) > 0 {
		mem = l[len(l)-1]
		l[len(l)-1] = nil
		b.free[size] = l[:len(l)-1]
		b.freeSize -= n
		return mem, true
	}
	b.trimKept() // new memory
	return nil, true
}

// Reserve reserves n bytes for memory a task holds beside its sorters (its own, not the
// budget's) if that keeps Used within Limit, dropping kept chunk memory as needed so that
// reserved plus kept still fit: memory for what spares the sorters work, from what they may
// use. Release gives it back.
func (b *Budget) Reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < 0 || b.used+n > b.limit {
		return false
	}
	b.used += n
	b.trimKept()
	return true
}

// trimKept drops kept chunks until reserved plus kept fit the limit. b.mu is held.
func (b *Budget) trimKept() {
	for sz, l := range b.free {
		for len(l) > 0 && b.used+b.freeSize > b.limit {
			l[len(l)-1] = nil
			l = l[:len(l)-1]
			b.freeSize -= int64(sz)
		}
		b.free[sz] = l
	}
}

// Release returns n bytes that Reserve reserved.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

// release returns n reserved bytes; mems are the released chunks' memory (of n bytes in all),
// kept for reuse.
func (b *Budget) release(n int64, mems ...[]entry) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	for _, m := range mems {
		size := len(m) * entrySize
		b.free[size] = append(b.free[size], m)
		b.freeSize += int64(size)
	}
}

// trimIfIdle drops the kept memory when no sorter holds a reservation.
func (b *Budget) trimIfIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used == 0 && b.freeSize > 0 {
		clear(b.free)
		b.freeSize = 0
	}
}
