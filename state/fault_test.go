package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// diskFull makes writes to files whose name ends with suffix fail with ENOSPC while on.
type diskFull struct {
	suffix string
	on     atomic.Bool
}

func (f *diskFull) String() string { return "disk full on *" + f.suffix }

func (f *diskFull) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || !strings.HasSuffix(op.Path, f.suffix) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileFlush:
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

// TestGuardName checks that guard finds itself on the stack: otherwise a fatal write error would
// exit the process instead of failing the call.
func TestGuardName(t *testing.T) {
	if !strings.HasSuffix(guardName, "state.(*DB).guard") {
		t.Fatalf("guardName = %q", guardName)
	}
	var d DB
	var in bool
	if err := d.guard(func() error { in = inGuard(); return nil }); err != nil || !in {
		t.Fatalf("inGuard inside guard = %v, %v", in, err)
	}
	if inGuard() {
		t.Fatal("inGuard outside guard = true")
	}
}

// TestDiskFullWAL fills the disk under Pebble's write-ahead log: Pebble's fatal path becomes an
// error wrapping ErrFailed that names the directory and the cause, and every later call fails
// with it (the process must stop; the changelog has what the store lost).
func TestDiskFullWAL(t *testing.T) {
	full := &diskFull{suffix: ".log"}
	dir := "/state"
	// Synced commits, small batches: the log's write error reaches the batch that wrote it,
	// before the memtable rotates its log (a log that fails to close there is beyond recovery).
	d := openDB(t, Options{Dir: dir, FS: errorfs.Wrap(vfs.NewMem(), full), Sync: true})
	ns := Namespace{"op", 0}
	val := make([]byte, 100)
	commit := func(i int) error {
		b := d.NewBatch()
		defer b.Close()
		must(t, b.Set(ns, fmt.Appendf(nil, "k%d", i), val), b.SetOffset(ns, int64(i)))
		return b.Commit()
	}
	must(t, commit(0))
	full.on.Store(true)
	var err error
	err = commit(1)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("commit on a full disk = %v, want ErrFailed", err)
	}
	for _, want := range []string{dir, "no space left on device"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, _, gerr := d.Get(ns, []byte("k0"), nil); !errors.Is(gerr, ErrFailed) {
		t.Errorf("Get after the failure = %v, want ErrFailed", gerr)
	}
	if cerr := commit(1000); !errors.Is(cerr, ErrFailed) {
		t.Errorf("commit after the failure = %v, want ErrFailed", cerr)
	}
	_ = d.Close() // must return (its error is the log's)
}

// TestDiskFullManifest fills the disk under the MANIFEST while a bulk load is ingested: Pebble's
// fatal MANIFEST write becomes ErrFailed naming the directory, on the loader's Commit.
func TestDiskFullManifest(t *testing.T) {
	full := &diskFull{suffix: ""}
	d := openDB(t, Options{Dir: "/state", FS: errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.Contains(op.Path, "MANIFEST") {
			return full.MaybeError(op)
		}
		return nil
	}))})
	ns := Namespace{"op", 0}
	ld, err := d.NewLoader(ns)
	must(t, err)
	must(t, ld.Add([]byte("k"), []byte("v")))
	ld.SetOffset(1)
	full.on.Store(true)
	err = ld.Commit()
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "/state") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("ingest with the MANIFEST on a full disk = %v, want ErrFailed naming /state and ENOSPC", err)
	}
	if _, _, err := d.Offset(ns); !errors.Is(err, ErrFailed) {
		t.Errorf("Offset after the failure = %v, want ErrFailed", err)
	}
	_ = d.Close()
}

// TestMinFreeBytes: with less free space than the store keeps in reserve, a batch fails with
// ErrDiskFull naming the directory and applies nothing; with room again it commits.
func TestMinFreeBytes(t *testing.T) {
	fs := vfs.NewMem()
	d := openDB(t, Options{Dir: "/state", FS: fs, MinFreeBytes: 64 << 20})
	defer d.Close()
	ns := Namespace{"op", 0}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 10 << 20, TotalBytes: 1 << 30})
	b := d.NewBatch()
	must(t, b.Set(ns, []byte("k"), []byte("v")), b.SetOffset(ns, 1))
	err := b.Commit()
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "/state") {
		t.Fatalf("commit with 10 MiB free = %v, want ErrDiskFull naming /state", err)
	}
	if _, ok, _ := d.Offset(ns); ok {
		t.Fatal("the refused batch was applied")
	}
	if err := d.Drop(ns); !errors.Is(err, ErrDiskFull) {
		t.Errorf("drop with 10 MiB free = %v, want ErrDiskFull", err)
	}
	if _, err := d.NewLoader(ns); err != nil {
		t.Fatal(err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 100 << 20, TotalBytes: 1 << 30})
	mustSet(t, d, ns, "k", "v")
}

// TestDiskFullLoader fills the disk under a bulk load: Commit fails naming the directory and the
// cause, nothing of the load is visible, and the store goes on once there is room.
func TestDiskFullLoader(t *testing.T) {
	full := &diskFull{suffix: ".sst"}
	d := openDB(t, Options{Dir: "/state", FS: errorfs.Wrap(vfs.NewMem(), full)})
	defer d.Close()
	ns := Namespace{"op", 0}
	load := func() error {
		ld, err := d.NewLoader(ns)
		if err != nil {
			return err
		}
		for i := range 1000 {
			if err := ld.Add(fmt.Appendf(nil, "k%04d", i), []byte("v")); err != nil {
				_ = ld.Abort()
				return err
			}
		}
		ld.SetOffset(1000)
		return ld.Commit()
	}
	full.on.Store(true)
	err := load()
	if err == nil || !strings.Contains(err.Error(), "/state") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("load on a full disk = %v, want an error naming /state and ENOSPC", err)
	}
	if _, ok, _ := d.Offset(ns); ok {
		t.Fatal("a failed load left an offset")
	}
	full.on.Store(false)
	must(t, load())
	if off, ok, err := d.Offset(ns); err != nil || !ok || off != 1000 {
		t.Fatalf("offset after a load with room = %d, %v, %v", off, ok, err)
	}
}

// fillDir writes a store in dir with three bulk loads and one batch, and closes it.
func fillDir(t *testing.T, dir string) {
	t.Helper()
	d := openDB(t, Options{Dir: dir})
	ns := Namespace{"op", 0}
	for i := range 3 {
		ld, err := d.NewLoader(ns)
		must(t, err)
		for k := range 5000 {
			must(t, ld.Add(fmt.Appendf(nil, "k%d-%06d", i, k), []byte(strings.Repeat("v", 40))))
		}
		must(t, ld.Commit())
	}
	b := d.NewBatch()
	must(t, b.Set(ns, []byte("x"), []byte("y")), b.SetOffset(ns, 7), b.Commit())
	must(t, d.Close())
}

// pebbleFile returns the first file of dir/pebble whose name matches pattern.
func pebbleFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "pebble", pattern))
	if err != nil || len(m) == 0 {
		t.Fatalf("no %s in %s/pebble: %v", pattern, dir, err)
	}
	return m[0]
}

func garble(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	for i := len(b) / 3; i < len(b)/3+64 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	must(t, os.WriteFile(path, b, 0o644))
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	must(t, os.Truncate(path, fi.Size()/2))
}

// TestDamagedOpen damages a closed store's files in each way Open must catch: Open fails with
// ErrDamaged naming the directory, and after MoveAside the store opens empty (the runtime then
// restores it from the changelog).
func TestDamagedOpen(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"garbled MANIFEST", func(t *testing.T, dir string) { garble(t, pebbleFile(t, dir, "MANIFEST-*")) }},
		{"truncated MANIFEST", func(t *testing.T, dir string) { truncateHalf(t, pebbleFile(t, dir, "MANIFEST-*")) }},
		{"missing MANIFEST", func(t *testing.T, dir string) { must(t, os.Remove(pebbleFile(t, dir, "MANIFEST-*"))) }},
		{"missing marker", func(t *testing.T, dir string) { must(t, os.Remove(pebbleFile(t, dir, "marker.manifest.*"))) }},
		{"missing sstable", func(t *testing.T, dir string) { must(t, os.Remove(pebbleFile(t, dir, "*.sst"))) }},
		{"truncated sstable", func(t *testing.T, dir string) { truncateHalf(t, pebbleFile(t, dir, "*.sst")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fillDir(t, dir)
			c.damage(t, dir)
			_, err := Open(Options{Dir: dir})
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open = %v, want ErrDamaged naming %s", err, dir)
			}
			aside, err := MoveAside(Options{Dir: dir})
			must(t, err)
			if aside != filepath.Join(dir, "pebble.damaged") {
				t.Errorf("moved to %s", aside)
			}
			d := openDB(t, Options{Dir: dir})
			defer d.Close()
			if nss, err := d.Namespaces(); err != nil || len(nss) != 0 {
				t.Fatalf("after MoveAside: namespaces %v, %v; want none", nss, err)
			}
		})
	}
}

// TestDamagedAtRead garbles a table's data, which Open cannot see: the read that finds it fails
// with ErrDamaged, so does every later call, and the next Open reports it (the DAMAGED marker).
func TestDamagedAtRead(t *testing.T) {
	dir := t.TempDir()
	fillDir(t, dir)
	garble(t, pebbleFile(t, dir, "*.sst"))
	d := openDB(t, Options{Dir: dir})
	err := d.Scan(Namespace{"op", 0}, func(k, v []byte) error { return nil })
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Scan over a garbled table = %v, want ErrDamaged naming %s", err, dir)
	}
	if _, _, err := d.Offset(Namespace{"op", 0}); !errors.Is(err, ErrDamaged) {
		t.Errorf("Offset after damage = %v, want ErrDamaged", err)
	}
	_ = d.Close()
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open after damage was found = %v, want ErrDamaged", err)
	}
	_, err = MoveAside(Options{Dir: dir})
	must(t, err)
	d = openDB(t, Options{Dir: dir})
	must(t, d.Close())
}

// TestDamagedVerified garbles a table's data and opens with VerifyLimit: Open reads the tables
// and reports the damage at once.
func TestDamagedVerified(t *testing.T) {
	dir := t.TempDir()
	fillDir(t, dir)
	garble(t, pebbleFile(t, dir, "*.sst"))
	if _, err := Open(Options{Dir: dir, VerifyLimit: 1 << 30}); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open with VerifyLimit over a garbled table = %v, want ErrDamaged naming %s", err, dir)
	}
	_, err := MoveAside(Options{Dir: dir})
	must(t, err)
	d := openDB(t, Options{Dir: dir, VerifyLimit: 1 << 30})
	must(t, d.Close())
}

// TestCleanReopenIsNotDamage: a store closed cleanly reopens whole, without ErrDamaged.
func TestCleanReopenIsNotDamage(t *testing.T) {
	dir := t.TempDir()
	fillDir(t, dir)
	d := openDB(t, Options{Dir: dir, VerifyLimit: 1 << 30})
	if off, ok, err := d.Offset(Namespace{"op", 0}); err != nil || !ok || off != 7 {
		t.Fatalf("offset = %d, %v, %v", off, ok, err)
	}
	must(t, d.Close())
}

// TestGarbledLogIsATornTail: Pebble reads a write-ahead log up to its first bad record, as
// after a crash, so a garbled log loses a suffix of batches, each with its offset: the store
// opens older but consistent (the changelog replay covers the rest), not damaged.
func TestGarbledLogIsATornTail(t *testing.T) {
	dir := t.TempDir()
	fillDir(t, dir)
	garble(t, pebbleFile(t, dir, "*.log"))
	d := openDB(t, Options{Dir: dir})
	defer d.Close()
	ns := Namespace{"op", 0}
	_, hasX, err := d.Get(ns, []byte("x"), nil)
	must(t, err)
	_, hasOff, err := d.Offset(ns)
	must(t, err)
	if hasX != hasOff {
		t.Fatalf("after a garbled log: key x present %v, its batch's offset present %v", hasX, hasOff)
	}
}
