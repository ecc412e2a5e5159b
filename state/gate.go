package state

import (
	"sync"
	"sync/atomic"
)

// gate lets a store's Close wait for the calls in flight without a lock held over them: it is a
// count of calls in flight and a closed bit in one atomic word. A call enters before its work
// (enter fails with ErrClosed once Close has begun) and leaves after it; Close sets the bit
// (shut), then waits until the count drops to zero (wait). Entering never blocks, so a call made
// from inside another (a Get from a Scan's callback, or while an Iter is open) cannot deadlock
// with Close: once Close has begun it returns ErrClosed. Only Close blocks, and only on calls in
// flight, so Close must not be called from inside a Scan's callback or with an Iter open on the
// calling goroutine.
//
// The zero gate is not ready: call init first. Safe for concurrent use.
type gate struct {
	// n is gateClosed (set once, by shut) plus the number of calls in flight.
	n atomic.Int64
	// drained is closed, once, when the gate is shut and no call is in flight.
	drained chan struct{}
	once    sync.Once
	// waiting, if set (by tests, before Close), is called by wait just before it blocks on
	// calls in flight.
	waiting func()
}

// gateClosed is the closed bit of gate.n; the count of calls in flight is below it.
const gateClosed = 1 << 62

func (g *gate) init() { g.drained = make(chan struct{}) }

// enter counts a call in flight, or returns ErrClosed (counting nothing) once shut has been
// called. A nil error must be paired with leave.
func (g *gate) enter() error {
	if g.n.Add(1)&gateClosed != 0 {
		g.leave()
		return ErrClosed
	}
	return nil
}

// leave ends a call counted by enter; the last call to leave after shut releases wait.
func (g *gate) leave() {
	if g.n.Add(-1) == gateClosed {
		g.once.Do(func() { close(g.drained) })
	}
}

// closed reports whether shut has been called.
func (g *gate) closed() bool { return g.n.Load()&gateClosed != 0 }

// shut makes every later enter fail. It returns ErrClosed if it was called before.
func (g *gate) shut() error {
	old := g.n.Or(gateClosed)
	if old&gateClosed != 0 {
		return ErrClosed
	}
	if old == 0 {
		g.once.Do(func() { close(g.drained) })
	}
	return nil
}

// wait returns once shut has been called and no call is in flight.
func (g *gate) wait() {
	select {
	case <-g.drained:
		return
	default:
	}
	if g.waiting != nil {
		g.waiting()
	}
	<-g.drained
}
