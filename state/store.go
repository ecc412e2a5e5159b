package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap them (test with errors.Is).
var (
	// ErrClosed is returned by every call on a Store after Close, and by Commit of a batch or
	// loader whose Store was closed.
	ErrClosed = errors.New("state: closed")
	// ErrNamespace is returned for an empty operator name, one containing 0x00, or a negative
	// partition.
	ErrNamespace = errors.New("state: invalid namespace")
	// ErrKeyOrder is returned by Loader.Add for a key not strictly greater than the previous one.
	ErrKeyOrder = errors.New("state: loader keys not strictly increasing")
	// ErrOffset is returned for a negative changelog offset.
	ErrOffset = errors.New("state: negative offset")
	// ErrFinished is returned when a Batch or Loader is used after Commit, Close or Abort.
	ErrFinished = errors.New("state: batch or loader already finished")
	// ErrCorrupt is returned when stored bytes cannot be decoded (an offset that is not 8 bytes,
	// an unknown format version).
	ErrCorrupt = errors.New("state: corrupt")
	// ErrDamaged is returned when the store's files are damaged (a checksum mismatch, a missing
	// or truncated file, a MANIFEST that does not read to its end): its contents cannot be
	// trusted. Open returns it; the caller moves the store aside (MoveAside) and rebuilds it
	// from the changelog. Found at run time, it fails every later call (see fault.go).
	ErrDamaged = errors.New("state: store damaged")
	// ErrFailed is returned by every call once Pebble could not write its write-ahead log or
	// MANIFEST (disk full, a read-only or failing file system): the store cannot go on. The
	// next start replays the changelog from the stored offsets.
	ErrFailed = errors.New("state: store failed")
	// ErrDiskFull is returned by a write (a batch commit, a drop, a bulk load) when the store's
	// file system has less free space than Options.MinFreeBytes: the store stops short of the
	// writes Pebble cannot fail cleanly. Nothing of the write is applied.
	ErrDiskFull = errors.New("state: disk full")
)

// Namespace identifies one operator's state for one partition. Operator must be non-empty and
// must not contain 0x00; Partition must be non-negative.
type Namespace struct {
	Operator  string
	Partition int32
}

func (ns Namespace) String() string { return fmt.Sprintf("%s/%d", ns.Operator, ns.Partition) }

// Store is what the task runtime uses. *DB (Pebble) and *Mem (in-memory model) implement it.
//
// All methods are safe for concurrent use by different goroutines (each task touches only its own
// namespaces). No lock is held over a call's work or over a Scan's callback, and no call waits for
// another except Close: a call may be made from inside another (a Get from a Scan's callback, or
// while an Iter is open). Close refuses new calls, which return ErrClosed from then on, and
// returns only after the calls in flight have returned, a running Scan (its callback included)
// and an unfinished Iter among them. So Close must not be called from inside a Scan's callback,
// nor by a goroutine that holds an unfinished Iter: it would wait for itself. A call made from
// inside a Scan's callback once Close has begun returns ErrClosed, and the Scan stops with
// ErrClosed before its next key (an Iter's Next returns false, with ErrClosed). Slices passed in
// are not retained; results the caller owns are stated per method.
type Store interface {
	// Get appends the value of key to dst and returns it; ok=false if absent. The caller owns
	// the result.
	Get(ns Namespace, key []byte, dst []byte) (val []byte, ok bool, err error)
	// Offset returns the stored changelog offset of ns; ok=false if none (never written or
	// dropped).
	Offset(ns Namespace) (off int64, ok bool, err error)
	// NewBatch starts an atomic write. The Batch is not safe for concurrent use.
	NewBatch() Batch
	// NewLoader starts a bulk load of many keys for one namespace, keys added in strictly
	// increasing order. Memory stays bounded whatever the number of keys (for *DB). The Loader
	// is not safe for concurrent use.
	NewLoader(ns Namespace) (Loader, error)
	// Drop deletes every key and the offset of ns, atomically.
	Drop(ns Namespace) error
	// Scan calls fn for every key/value of ns in key order, over a consistent snapshot taken
	// when Scan starts. Memory passed to fn is valid only during the call. An error from fn
	// stops the scan and is returned unwrapped. fn may call the Store's other methods, but not
	// Close. Once Close has begun, Scan returns ErrClosed before the next key (and fn's own
	// calls return ErrClosed); Close returns after Scan does. Scan is NewIter in a loop.
	Scan(ns Namespace, fn func(key, val []byte) error) error
	// NewIter opens an iterator over the keys of ns in key order, over a consistent snapshot
	// taken when NewIter is called: Scan without a callback. The Store counts an unfinished
	// Iter as a call in flight, which Close waits for: finish every Iter (Next returning false
	// finishes it; Close finishes it early).
	NewIter(ns Namespace) (Iter, error)
	// Namespaces returns every namespace that holds a key or an offset, sorted by operator,
	// then partition (a reset lists an operator's namespaces with it). The caller owns the
	// result.
	Namespaces() ([]Namespace, error)
	// Close releases the store. Batches and loaders not yet committed are discarded.
	Close() error
}

// Iter iterates over one namespace's keys in key order (Store.NewIter). Not safe for concurrent
// use. Key and Value return memory the Iter owns, valid until the next call to Next or Close: copy
// what you keep. The call order is Next, then Key and Value while Next reports true; Key or Value
// at any other time panics, naming the call. Next returning false finishes the Iter (its snapshot
// is released and Err says why it ended); Close finishes it early, and is harmless after that.
type Iter interface {
	// Next moves to the next key (the first, on the first call) and reports whether there is
	// one. It returns false at the end, on an error, after Close, or once the Store's Close
	// has begun (Err then returns ErrClosed).
	Next() bool
	// Key returns the current key, without the namespace.
	Key() []byte
	// Value returns the current value.
	Value() []byte
	// Err returns the error that ended the iteration, or nil (at the end, or before it).
	Err() error
	// Close finishes the Iter, if Next has not, and returns Err.
	Close() error
}

// scanIter is Store.Scan over s.NewIter, for both implementations.
func scanIter(s Store, ns Namespace, fn func(key, val []byte) error) error {
	it, err := s.NewIter(ns)
	if err != nil {
		return err
	}
	for it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// Batch is an atomic write across any namespaces: state sets and deletes and offsets. Nothing
// is visible until Commit, and then all of it is. Not safe for concurrent use; one goroutine
// builds and commits it. Set and Delete copy their arguments.
type Batch interface {
	// Set sets key to val in ns. It copies key and val.
	Set(ns Namespace, key, val []byte) error
	// Delete deletes key from ns.
	Delete(ns Namespace, key []byte) error
	// SetOffset records off as the changelog offset of ns, atomically with the rest of the batch.
	SetOffset(ns Namespace, off int64) error
	// Len returns the number of Set, Delete and SetOffset calls that succeeded.
	Len() int
	// Commit applies the batch atomically and finishes it. Operations apply in call order
	// (a later Set of the same key wins). See the package doc for durability.
	Commit() error
	// Close discards the batch if it was not committed; a no-op after Commit.
	Close()
}

// Loader bulk-loads one namespace. Not safe for concurrent use.
type Loader interface {
	// Add adds key with val. Keys must be strictly increasing, else Add returns ErrKeyOrder and
	// the loader is unchanged (it may still be committed). Add copies what it keeps.
	Add(key, val []byte) error
	// SetOffset sets the changelog offset committed with the load (a negative off makes Commit
	// fail with ErrOffset). Without it, Commit leaves the stored offset unchanged.
	SetOffset(off int64)
	// Commit makes every added key, and the offset, visible atomically, then finishes the
	// loader. Added keys overwrite existing values; other keys of the namespace are untouched.
	Commit() error
	// Abort discards the load; a no-op (returning nil) after Commit or Abort.
	Abort() error
}

// Key layout; see the package doc.
const (
	tagMeta    = 'm'
	tagNS      = 'n'
	kindOffset = 'o'
	kindState  = 's'
	kindEnd    = kindState + 1 // exclusive upper bound of a namespace's state range
)

const formatVersion = "1"

var formatKey = []byte{tagMeta, 'f', 'o', 'r', 'm', 'a', 't'}

func checkNS(ns Namespace) error {
	if ns.Operator == "" {
		return fmt.Errorf("%w: empty operator name", ErrNamespace)
	}
	if strings.IndexByte(ns.Operator, 0) >= 0 {
		return fmt.Errorf("%w: operator name %q contains 0x00", ErrNamespace, ns.Operator)
	}
	if ns.Partition < 0 {
		return fmt.Errorf("%w: negative partition %d of %q", ErrNamespace, ns.Partition, ns.Operator)
	}
	return nil
}

func checkOffset(ns Namespace, off int64) error {
	if off < 0 {
		return fmt.Errorf("%w: %d for %s", ErrOffset, off, ns)
	}
	return nil
}

// appendPrefix appends 'n' + operator + 0x00 + big-endian partition.
func appendPrefix(dst []byte, ns Namespace) []byte {
	dst = append(dst, tagNS)
	dst = append(dst, ns.Operator...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint32(dst, uint32(ns.Partition))
}

func appendStateKey(dst []byte, ns Namespace, key []byte) []byte {
	dst = appendPrefix(dst, ns)
	dst = append(dst, kindState)
	return append(dst, key...)
}

func appendOffsetKey(dst []byte, ns Namespace) []byte {
	return append(appendPrefix(dst, ns), kindOffset)
}

// stateBounds returns the state range of ns, [prefix+'s', prefix+'t').
func stateBounds(ns Namespace) (lo, hi []byte) {
	lo = append(appendPrefix(make([]byte, 0, len(ns.Operator)+7), ns), kindState)
	hi = append(lo[:len(lo)-1:len(lo)-1], kindEnd) // full slice expression: hi gets its own array
	return lo, hi
}

func encodeOffset(dst []byte, off int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(off))
}

func decodeOffset(ns Namespace, b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: offset of %s is %d bytes, want 8", ErrCorrupt, ns, len(b))
	}
	off := int64(binary.BigEndian.Uint64(b))
	if off < 0 {
		return 0, fmt.Errorf("%w: offset of %s is negative (%d)", ErrCorrupt, ns, off)
	}
	return off, nil
}

// compareNS orders namespaces as their keys sort: by operator bytes, then partition.
func compareNS(a, b Namespace) int {
	if c := strings.Compare(a.Operator, b.Operator); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// keyOrderError reports a non-increasing loader key.
func keyOrderError(ns Namespace, prev, key []byte) error {
	if bytes.Equal(prev, key) {
		return fmt.Errorf("%w: %s: duplicate key %q", ErrKeyOrder, ns, key)
	}
	return fmt.Errorf("%w: %s: key %q after %q", ErrKeyOrder, ns, key, prev)
}
