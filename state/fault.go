package state

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"runtime"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/atomicfs"
)

// Faults of the disk under a store, and what this package does about them:
//
//   - Little free space left: a write fails with ErrDiskFull before it starts (checkSpace), while
//     the store still has Options.MinFreeBytes free, so that the disk filling up gradually
//     stops sluice cleanly, short of the writes below that Pebble cannot fail cleanly.
//   - Pebble cannot write (disk full, a read-only or failing file system). An error that Pebble
//     returns (creating a loader's sstable, an ingest) is returned, naming the directory. A
//     failed write-ahead log or MANIFEST write is fatal inside Pebble (Logger.Fatalf: its state
//     is undefined afterwards). When that happens inside a call of this package (a batch
//     commit, a drop, an ingest), the call returns an error wrapping ErrFailed that names the
//     directory, and every later call returns it too: the caller stops, and the next start
//     replays the changelog from the stored offsets. When it happens in one of Pebble's own
//     goroutines (a flush, a compaction), no caller can be told: the process logs the error to
//     stderr and exits 1. Some of Pebble's paths cannot be recovered at all: a log that fails
//     to close while Pebble rotates it panics with Pebble's mutex released, and the Go runtime
//     ends the process (exit 2) — the free-space reserve is what keeps writes away from there.
//   - The store's files are damaged (a checksum mismatch, a missing or truncated sstable, a
//     MANIFEST that does not read to its end, a marker naming a missing MANIFEST). Open returns
//     an error wrapping ErrDamaged; the caller moves the store aside (MoveAside) and rebuilds it
//     from the changelog. With Options.VerifyLimit, Open also reads every table of a small
//     enough store, so a garbled table is found then. Damage found later, by a read or a
//     compaction, fails the call and every later one with ErrDamaged, and leaves the file
//     DAMAGED in the directory, so that the next Open reports it too.

// checkSpace fails with ErrDiskFull when the store's file system has less than minFree bytes
// free. A file system that cannot tell (an in-memory one) passes.
func (d *DB) checkSpace(op string) error {
	if d.minFree == 0 {
		return nil
	}
	u, err := d.fs.GetDiskUsage(d.dir)
	if err != nil || u.AvailBytes >= d.minFree {
		return nil
	}
	return fmt.Errorf("%w: %s in %s: %d bytes free, less than the %d the store keeps free (Pebble cannot fail cleanly when its log cannot be written): free some space", ErrDiskFull, op, d.dir, u.AvailBytes, d.minFree)
}

// damagedMarker is the file a store leaves in its directory when it found damage at run time.
const damagedMarker = "DAMAGED"

// fatalError carries Pebble's fatal error from Logger.Fatalf to the guard that recovers it.
type fatalError struct{ err error }

// guardName is the name of (*DB).guard as runtime frames report it.
var guardName = runtime.FuncForPC(reflect.ValueOf((*DB).guard).Pointer()).Name()

// guard runs f, a call into Pebble that may fail writing in a way Pebble does not return: a
// failed write-ahead log write panics with the error, a failed MANIFEST write calls
// Logger.Fatalf (which panics with fatalError on a guarded goroutine). guard turns either into
// an error wrapping ErrFailed, which every later call of the store returns too. Pebble's state
// is undefined after it (a commit lock may stay held): the store must not be used again, and
// Close does not close Pebble. A runtime error (a bug) panics on.
func (d *DB) guard(f func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch v := r.(type) {
		case fatalError:
			err = v.err
		case runtime.Error:
			panic(r)
		case error:
			err = fmt.Errorf("%w: Pebble cannot go on writing in %s (disk full, read-only or failing?): %w", ErrFailed, d.dir, v)
		default:
			panic(r)
		}
		d.setFault(err)
	}()
	return f()
}

// inGuard reports whether the calling goroutine runs inside (*DB).guard.
func inGuard() bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if f.Function == guardName {
			return true
		}
		if !more {
			return false
		}
	}
}

// setFault records the first fault; the store returns it from every call afterwards.
func (d *DB) setFault(err error) {
	d.fault.CompareAndSwap(nil, &err)
}

// faultErr returns the recorded fault, or nil.
func (d *DB) faultErr() error {
	if p := d.fault.Load(); p != nil {
		return *p
	}
	return nil
}

// wrap names the operation and the directory in a Pebble error; a corruption becomes
// ErrDamaged (and a fault of the store).
func (d *DB) wrap(op string, err error) error {
	if f := d.faultErr(); f != nil {
		return f
	}
	if pebble.IsCorruptionError(err) {
		err = fmt.Errorf("%w: %s in %s: %w", ErrDamaged, op, d.dir, err)
		d.setFault(err)
		return err
	}
	return fmt.Errorf("state: %s in %s: %w", op, d.dir, err)
}

// dataCorruption is Pebble's DataCorruption event (a checksum mismatch found by a read or a
// compaction): the store fails from now on and leaves the DAMAGED marker for the next Open.
// Pebble's default would exit the process.
func (d *DB) dataCorruption(info pebble.DataCorruptionInfo) {
	err := fmt.Errorf("%w: %s: %s", ErrDamaged, d.dir, info.String())
	d.setFault(err)
	f, cerr := d.fs.Create(d.fs.PathJoin(d.dir, damagedMarker), vfs.WriteCategoryUnspecified)
	if cerr != nil {
		return // the read that found it fails anyway; the next Open may not know
	}
	_, _ = io.WriteString(f, err.Error()+"\n")
	_ = f.Sync()
	_ = f.Close()
}

// pebbleLogger drops Pebble's informational messages (WAL recovery on every Open), keeps its
// errors (to the standard logger, as Pebble's default does) and turns its fatal errors into
// ErrFailed (see guard).
type pebbleLogger struct{ dir string }

func (pebbleLogger) Infof(string, ...any) {}

func (pebbleLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	err := fmt.Errorf("%w: Pebble cannot go on writing in %s (disk full, read-only or failing?): %s", ErrFailed, l.dir, fmt.Sprintf(format, args...))
	if inGuard() {
		panic(fatalError{err})
	}
	// One of Pebble's goroutines (a flush, a compaction): no caller can be told, and Pebble's
	// state is undefined past this point.
	fmt.Fprintf(os.Stderr, "%v; exiting (the next start replays the changelog from the stored offsets)\n", err)
	os.Exit(1)
}

// checkFiles looks for damage Pebble's Open would not report: a MANIFEST that does not read
// cleanly to its end (Pebble stops at the first bad record and opens an older version of the
// store: silently older data beside newer offsets), MANIFESTs without the marker naming the
// current one, a marker naming a missing MANIFEST, and the DAMAGED marker of an earlier run.
// A crash while Pebble appended to the MANIFEST leaves a torn last record, which this reports
// as damage too: the rebuild it causes is safe, and the window is a few microseconds per flush.
func checkFiles(fsys vfs.FS, dir string) error {
	if b, err := readAll(fsys, fsys.PathJoin(dir, damagedMarker)); err == nil {
		return fmt.Errorf("%w: an earlier run found damage: %s", ErrDamaged, strings.TrimSpace(string(b)))
	}
	pdir := fsys.PathJoin(dir, "pebble")
	names, err := fsys.List(pdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	manifests := 0
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			manifests++
		}
	}
	current, err := atomicfs.ReadMarker(fsys, pdir, "manifest")
	if err != nil {
		return fmt.Errorf("%w: the marker of the current MANIFEST: %w", ErrDamaged, err)
	}
	if current == "" {
		if manifests > 0 {
			return fmt.Errorf("%w: %s has MANIFEST files but no marker naming the current one", ErrDamaged, pdir)
		}
		return nil // a new store
	}
	f, err := fsys.Open(fsys.PathJoin(pdir, current))
	if err != nil {
		return fmt.Errorf("%w: the current MANIFEST: %w", ErrDamaged, err)
	}
	defer f.Close()
	rr := record.NewReader(f, 0)
	for n := 0; ; n++ {
		r, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s does not read to its end (record %d): %w", ErrDamaged, fsys.PathJoin(pdir, current), n, err)
		}
	}
}

func readAll(fsys vfs.FS, path string) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// damagedOpen reports whether an error of pebble.Open means damaged files rather than an
// unusable environment (a permission, a lock, a full disk): a corruption, or a file the
// MANIFEST names that is missing or has another size.
func damagedOpen(err error) bool {
	return pebble.IsCorruptionError(err) || errors.Is(err, fs.ErrNotExist) ||
		strings.Contains(err.Error(), "size mismatch")
}

// MoveAside moves a damaged store out of the way so that Open starts an empty one: o.Dir's
// pebble/ becomes pebble.damaged/ (replacing an older one: one damaged copy is kept, for
// inspection, so repeated damage cannot fill the disk), and the DAMAGED marker and loader
// scratch files are removed. It returns the new path. The store must not be open.
func MoveAside(o Options) (string, error) {
	fsys := o.FS
	if fsys == nil {
		fsys = vfs.Default
	}
	from := fsys.PathJoin(o.Dir, "pebble")
	to := from + ".damaged"
	if err := fsys.RemoveAll(to); err != nil {
		return "", fmt.Errorf("state: move aside %s: %w", from, err)
	}
	if err := fsys.Rename(from, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("state: move aside %s: %w", from, err)
	}
	if err := fsys.RemoveAll(fsys.PathJoin(o.Dir, "ingest")); err != nil {
		return "", fmt.Errorf("state: move aside %s: %w", from, err)
	}
	if err := fsys.Remove(fsys.PathJoin(o.Dir, damagedMarker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("state: move aside %s: %w", from, err)
	}
	if err := syncDirs(fsys, o.Dir); err != nil {
		return "", fmt.Errorf("state: move aside %s: %w", from, err)
	}
	return to, nil
}
