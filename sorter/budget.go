package sorter

import "sync/atomic"

// Budget is the process-wide sort memory (backlog.sort_memory) shared by all tasks' sorters.
// Sorters reserve it in chunks and give it back when they spill, reset or close.
//
// A Budget is safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a budget of the given size in bytes. A budget of zero or less grants no
// reservation; sorters then work with their minimum private chunks only.
func NewBudget(bytes int64) *Budget {
	if bytes < 0 {
		bytes = 0
	}
	return &Budget{limit: bytes}
}

// Limit returns the size of the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the bytes currently reserved by sorters. It never exceeds Limit.
func (b *Budget) Used() int64 { return b.used.Load() }

// tryReserve reserves n bytes if that keeps Used within Limit.
func (b *Budget) tryReserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// release returns n reserved bytes.
func (b *Budget) release(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}
