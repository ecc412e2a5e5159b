package state

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// deadlockAfter is how long these tests wait for a call before they report a deadlock. The calls
// take microseconds; the margin is for a loaded machine running -race.
const deadlockAfter = 20 * time.Second

// within returns what ch delivers, or fails the test, naming what, if nothing comes before
// deadlockAfter.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadlockAfter):
		t.Fatalf("deadlock: %s did not return within %v", what, deadlockAfter)
		panic("unreachable")
	}
}

// closeAsync starts s.Close on another goroutine; its result arrives on the channel.
func closeAsync(s Store) <-chan error {
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	return closed
}

// onCloseWait makes s's Close call f just before it blocks on the calls in flight.
func onCloseWait(t *testing.T, s Store, f func()) {
	t.Helper()
	switch s := s.(type) {
	case *DB:
		s.gate.waiting = f
	case *Mem:
		s.gate.waiting = f
	default:
		t.Fatalf("no gate in %T", s)
	}
}

// TestCloseDuringScan: Close begins while a Scan's callback runs, and the callback then reads the
// store, as the runtime's sweeps do (a Scan of timers whose callback Gets the state). Nothing may
// block: the Get returns ErrClosed, the Scan stops with ErrClosed before its next key, and Close
// returns only after the Scan has. Before the gate, DB's Get waited for a read lock behind
// Close's write lock, which waited for the Scan's read lock: a deadlock. Mem's Close did not wait
// for the Scan.
func TestCloseDuringScan(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		mustSet(t, s, nsA1, "a", "1", "b", "2", "c", "3")
		waiting := make(chan struct{})
		onCloseWait(t, s, func() { close(waiting) })
		var closed <-chan error
		scanned := make(chan error, 1)
		go func() {
			calls := 0
			scanned <- s.Scan(nsA1, func(k, v []byte) error {
				if calls++; calls > 1 {
					return fmt.Errorf("callback called for %q after Close began", k)
				}
				closed = closeAsync(s)
				select {
				case <-waiting: // Close waits for this Scan
				case <-time.After(deadlockAfter):
					return errors.New("Close did not come to wait for the Scan")
				}
				if _, _, err := s.Get(nsA1, []byte("b"), nil); !errors.Is(err, ErrClosed) {
					return fmt.Errorf("Get inside the Scan once Close began = %v, want ErrClosed", err)
				}
				select {
				case err := <-closed:
					return fmt.Errorf("Close returned (%v) while a Scan was in flight", err)
				default:
				}
				return nil
			})
		}()
		if err := within(t, scanned, "Scan"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Scan = %v, want ErrClosed", err)
		}
		if err := within(t, closed, "Close"); err != nil {
			t.Fatalf("Close = %v", err)
		}
	})
}

// TestCloseWaitsForIter: an unfinished Iter is a call in flight. Other calls go on while it is
// open; Close waits for it; its Next then ends it with ErrClosed, which lets Close finish.
func TestCloseWaitsForIter(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		mustSet(t, s, nsA1, "a", "1", "b", "2")
		it, err := s.NewIter(nsA1)
		must(t, err)
		if !it.Next() || string(it.Key()) != "a" {
			t.Fatalf("first Next: %v", it.Err())
		}
		mustSet(t, s, nsA10, "x", "y") // calls do not wait for an open Iter
		wantGet(t, s, nsA10, "x", "y")
		waiting := make(chan struct{})
		onCloseWait(t, s, func() { close(waiting) })
		closed := closeAsync(s)
		within(t, waiting, "Close (coming to wait for the Iter)")
		if _, _, err := s.Get(nsA1, []byte("a"), nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("Get with Close begun = %v, want ErrClosed", err)
		}
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while an Iter was open", err)
		default:
		}
		if it.Next() || !errors.Is(it.Err(), ErrClosed) {
			t.Fatalf("Next with Close begun: err %v; want false, ErrClosed", it.Err())
		}
		if err := within(t, closed, "Close"); err != nil {
			t.Fatalf("Close = %v", err)
		}
		if err := it.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Iter.Close = %v, want ErrClosed", err)
		}
	})
}

// TestIter: the call order, the snapshot, early Close, and that a finished Iter does not hold
// Close up.
func TestIter(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		mustSet(t, s, nsA1, "a", "1", "b", "2")
		it, err := s.NewIter(nsA1)
		must(t, err)
		wantPanic(t, "Iter.Key", func() { it.Key() })
		wantPanic(t, "Iter.Value", func() { it.Value() })
		var got []string
		for it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
			mustSet(t, s, nsA1, "c", "3") // after NewIter: not seen
		}
		if strings.Join(got, " ") != "a=1 b=2" || it.Err() != nil {
			t.Fatalf("iterated %q, err %v; want a=1 b=2", got, it.Err())
		}
		wantPanic(t, "Iter.Key", func() { it.Key() })
		if it.Next() || it.Close() != nil || it.Close() != nil {
			t.Fatal("a finished Iter must stay finished, and Close return nil")
		}

		early, err := s.NewIter(nsA1)
		must(t, err)
		if !early.Next() || !bytes.Equal(early.Key(), []byte("a")) {
			t.Fatalf("first key: %v", early.Err())
		}
		must(t, early.Close())
		if early.Next() {
			t.Fatal("Next after Close")
		}
		wantPanic(t, "Iter.Value", func() { early.Value() })

		empty, err := s.NewIter(nsAB1)
		must(t, err)
		if empty.Next() || empty.Err() != nil {
			t.Fatalf("an empty namespace: %v", empty.Err())
		}
		// Every Iter is finished (the first and the empty one by Next alone): Close does not wait.
		if err := within(t, closeAsync(s), "Close"); err != nil {
			t.Fatal(err)
		}
	})
}

func wantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
			t.Fatalf("panic %v, want one naming %s", r, want)
		}
	}()
	f()
}

// TestCloseUnderLoad: Close while tasks scan (reading inside the callback) and commit: every
// call returns nil or ErrClosed, none blocks, and Close returns.
func TestCloseUnderLoad(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		const tasks = 4
		for p := range tasks {
			mustSet(t, s, Namespace{"op", int32(p)}, "a", "1", "b", "2", "c", "3")
		}
		busy := make(chan struct{}, 2*tasks)
		errs := make(chan error, tasks)
		for p := range tasks {
			ns := Namespace{"op", int32(p)}
			go func() {
				errs <- func() error {
					defer func() { busy <- struct{}{} }() // if it ends before its 20th round
					for i := 0; ; i++ {
						if i == 20 {
							busy <- struct{}{}
						}
						err := s.Scan(ns, func(k, v []byte) error {
							got, ok, err := s.Get(ns, k, nil)
							if err == nil && (!ok || len(got) == 0) {
								err = fmt.Errorf("%s: get %q inside its scan: absent", ns, k)
							}
							return err
						})
						if err == nil {
							b := s.NewBatch()
							if err = b.Set(ns, []byte("a"), fmt.Append(nil, i)); err == nil {
								err = b.Commit()
							}
						}
						switch {
						case errors.Is(err, ErrClosed):
							return nil
						case err != nil:
							return err
						}
					}
				}()
			}()
		}
		for range tasks {
			within(t, busy, "a task's first 20 rounds")
		}
		if err := within(t, closeAsync(s), "Close"); err != nil {
			t.Fatal(err)
		}
		for range tasks {
			if err := within(t, errs, "a task"); err != nil {
				t.Error(err)
			}
		}
	})
}
