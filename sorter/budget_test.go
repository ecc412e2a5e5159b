package sorter

import "testing"

// TestBudgetReserve: memory reserved beside the sorters counts against the limit as theirs
// does, and makes room for itself in the kept chunk memory, not beyond the limit.
func TestBudgetReserve(t *testing.T) {
	b := NewBudget(10 * entrySize)
	if _, ok := b.tryReserve(6 * entrySize); !ok {
		t.Fatal("a sorter's first chunk refused")
	}
	if b.Reserve(5 * entrySize) {
		t.Fatal("Reserve past the limit granted")
	}
	if !b.Reserve(4 * entrySize) {
		t.Fatal("Reserve within the limit refused")
	}
	if _, ok := b.tryReserve(1); ok {
		t.Fatal("a sorter's chunk granted past the limit")
	}
	// The sorter spills: its chunk's memory is kept for its next reservation.
	b.release(6*entrySize, make([]entry, 6))
	if b.Used() != 4*entrySize || b.kept() != 6*entrySize {
		t.Fatalf("used %d, kept %d", b.Used(), b.kept())
	}
	// More beside the sorters: kept memory goes so that reserved plus kept fit the limit.
	if !b.Reserve(5 * entrySize) {
		t.Fatal("Reserve refused with the sorters' memory released")
	}
	if b.Used()+b.kept() > b.Limit() {
		t.Fatalf("used %d plus kept %d past the limit %d", b.Used(), b.kept(), b.Limit())
	}
	b.Release(9 * entrySize)
	if b.Used() != 0 {
		t.Fatalf("used %d after every release", b.Used())
	}
	if b.Reserve(-1) {
		t.Fatal("a negative reservation granted")
	}
}
