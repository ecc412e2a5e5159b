package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configure Open. The zero value of each field means its default.
type Options struct {
	// Dir is the store's directory (processing.state_dir); it holds pebble/ and ingest/.
	// Required; created if missing.
	Dir string
	// CacheSize is the Pebble block cache size in bytes; default 64 MiB.
	CacheSize int64
	// Sync fsyncs the write-ahead log on every batch commit; default false (see the package doc:
	// the changelog is replayed from the stored offset after a crash).
	Sync bool

	// fs replaces the OS file system (crash tests use a crashable in-memory one).
	fs vfs.FS
	// tune edits the Pebble options after ours (benchmarks compare settings).
	tune func(*pebble.Options)
}

// DefaultCacheSize is the block cache size used when Options.CacheSize is zero.
const DefaultCacheSize = 64 << 20

// Pebble tuning for write-heavy bulk loads, measured with BenchmarkBulkLoad (see bench_test.go).
const (
	memTableSize          = 64 << 20 // Pebble default 4 MiB: fewer, larger flushes
	memTableStopWrites    = 4        // default 2: room for a flush to overlap incoming batches
	l0CompactionThreshold = 4        // default
	l0StopWritesThreshold = 24       // default 12: bulk loads fill L0 faster than one core compacts
	lBaseMaxBytes         = 256 << 20
	l0TargetFileSize      = 16 << 20 // default 2 MiB: fewer L0 files per flush
)

func pebbleOptions(o Options, fs vfs.FS, cache *pebble.Cache) *pebble.Options {
	po := &pebble.Options{
		FS:                          fs,
		Cache:                       cache,
		FormatMajorVersion:          pebble.FormatNewest,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       l0StopWritesThreshold,
		LBaseMaxBytes:               lBaseMaxBytes,
		Logger:                      quietLogger{},
	}
	po.TargetFileSizes[0] = l0TargetFileSize
	if o.tune != nil {
		o.tune(po)
	}
	po.EnsureDefaults()
	return po
}

// quietLogger drops Pebble's informational messages (WAL recovery on every Open) and keeps its
// errors, which go to the standard logger as with Pebble's default.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

// DB is the Pebble implementation of Store: one per process. Safe for concurrent use (see
// Store). Values returned by Get are owned by the caller.
type DB struct {
	db        *pebble.DB
	po        *pebble.Options
	fs        vfs.FS
	dir       string
	ingestDir string
	wo        *pebble.WriteOptions
	sstOpts   sstable.WriterOptions // for loader files, in the DB's table format
	loaderSeq atomic.Uint64

	// mu makes Close wait for calls in flight; every other method holds it for reading.
	mu struct {
		sync.RWMutex
		closed bool
	}
}

var _ Store = (*DB)(nil)

// Open opens (or creates) the store in o.Dir. Leftover loader files of a crashed process are
// removed. Errors name the directory and wrap the cause.
func Open(o Options) (*DB, error) {
	if o.Dir == "" {
		return nil, errors.New("state: open: Options.Dir is empty")
	}
	fs := o.fs
	if fs == nil {
		fs = vfs.Default
	}
	d := &DB{
		fs:        fs,
		dir:       o.Dir,
		ingestDir: fs.PathJoin(o.Dir, "ingest"),
		wo:        pebble.NoSync,
	}
	if o.Sync {
		d.wo = pebble.Sync
	}
	if err := fs.MkdirAll(d.ingestDir, 0o755); err != nil {
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	size := o.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	cache := pebble.NewCache(size)
	defer cache.Unref() // the DB holds its own reference
	d.po = pebbleOptions(o, fs, cache)
	db, err := pebble.Open(fs.PathJoin(o.Dir, "pebble"), d.po)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	d.db = db
	d.sstOpts = d.po.MakeWriterOptions(0, db.TableFormat())
	// Pebble syncs its own directory; make the entries leading to it durable too, so that a
	// machine crash cannot lose the whole store after a load was reported durable.
	if err := syncDirs(fs, o.Dir); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	// Pebble holds the directory lock now, so no other process owns these files.
	if err := d.cleanIngestDir(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	if err := d.checkFormat(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	return d, nil
}

// syncDirs fsyncs dir (its entries pebble/ and ingest/) and dir's parent (the entry of dir).
func syncDirs(fs vfs.FS, dir string) error {
	for _, p := range []string{dir, fs.PathDir(dir)} {
		f, err := fs.OpenDir(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *DB) cleanIngestDir() error {
	names, err := d.fs.List(d.ingestDir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := d.fs.Remove(d.fs.PathJoin(d.ingestDir, n)); err != nil {
			return err
		}
	}
	return nil
}

func (d *DB) checkFormat() error {
	v, closer, err := d.db.Get(formatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return d.db.Set(formatKey, []byte(formatVersion), pebble.Sync)
	case err != nil:
		return err
	}
	defer closer.Close()
	if string(v) != formatVersion {
		return fmt.Errorf("%w: format version %q, this build reads %q", ErrCorrupt, v, formatVersion)
	}
	return nil
}

// rlock takes the read lock and reports ErrClosed after Close. On success the caller must
// d.mu.RUnlock.
func (d *DB) rlock() error {
	d.mu.RLock()
	if d.mu.closed {
		d.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Get implements Store.
func (d *DB) Get(ns Namespace, key []byte, dst []byte) ([]byte, bool, error) {
	if err := checkNS(ns); err != nil {
		return dst, false, err
	}
	var buf [128]byte
	k := appendStateKey(buf[:0], ns, key)
	return d.get(ns, k, dst)
}

func (d *DB) get(ns Namespace, k, dst []byte) ([]byte, bool, error) {
	if err := d.rlock(); err != nil {
		return dst, false, err
	}
	defer d.mu.RUnlock()
	v, closer, err := d.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, fmt.Errorf("state: get %s: %w", ns, err)
	}
	dst = append(dst, v...)
	if err := closer.Close(); err != nil {
		return dst, false, fmt.Errorf("state: get %s: %w", ns, err)
	}
	return dst, true, nil
}

// Offset implements Store.
func (d *DB) Offset(ns Namespace) (int64, bool, error) {
	if err := checkNS(ns); err != nil {
		return 0, false, err
	}
	var kbuf [64]byte
	var vbuf [8]byte
	v, ok, err := d.get(ns, appendOffsetKey(kbuf[:0], ns), vbuf[:0])
	if err != nil || !ok {
		return 0, false, err
	}
	off, err := decodeOffset(ns, v)
	if err != nil {
		return 0, false, err
	}
	return off, true, nil
}

// NewBatch implements Store.
func (d *DB) NewBatch() Batch {
	return &dbBatch{d: d, b: d.db.NewBatch()}
}

// Drop implements Store: one DeleteRange over the state range and the offset delete, in one batch.
func (d *DB) Drop(ns Namespace) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	lo, hi := stateBounds(ns)
	if err := d.rlock(); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	b := d.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return fmt.Errorf("state: drop %s: %w", ns, err)
	}
	if err := b.Delete(appendOffsetKey(nil, ns), nil); err != nil {
		return fmt.Errorf("state: drop %s: %w", ns, err)
	}
	if err := b.Commit(d.wo); err != nil {
		return fmt.Errorf("state: drop %s: %w", ns, err)
	}
	return nil
}

// Scan implements Store. The read lock is held while fn runs.
func (d *DB) Scan(ns Namespace, fn func(key, val []byte) error) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	lo, hi := stateBounds(ns)
	if err := d.rlock(); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("state: scan %s: %w", ns, err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			break // it.Error reports it
		}
		if err := fn(it.Key()[len(lo):], v); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: scan %s: %w", ns, err)
	}
	return nil
}

// Close implements Store. It waits for calls in flight, then closes Pebble.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return ErrClosed
	}
	d.mu.closed = true
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("state: close %s: %w", d.dir, err)
	}
	return nil
}

// dbBatch is a Pebble batch with namespaced keys. Not safe for concurrent use.
type dbBatch struct {
	d   *DB
	b   *pebble.Batch // nil once finished
	key []byte
	n   int
}

func (b *dbBatch) Set(ns Namespace, key, val []byte) error {
	if b.b == nil {
		return ErrFinished
	}
	if err := checkNS(ns); err != nil {
		return err
	}
	b.key = appendStateKey(b.key[:0], ns, key)
	if err := b.b.Set(b.key, val, nil); err != nil {
		return fmt.Errorf("state: batch set %s: %w", ns, err)
	}
	b.n++
	return nil
}

func (b *dbBatch) Delete(ns Namespace, key []byte) error {
	if b.b == nil {
		return ErrFinished
	}
	if err := checkNS(ns); err != nil {
		return err
	}
	b.key = appendStateKey(b.key[:0], ns, key)
	if err := b.b.Delete(b.key, nil); err != nil {
		return fmt.Errorf("state: batch delete %s: %w", ns, err)
	}
	b.n++
	return nil
}

func (b *dbBatch) SetOffset(ns Namespace, off int64) error {
	if b.b == nil {
		return ErrFinished
	}
	if err := checkNS(ns); err != nil {
		return err
	}
	if err := checkOffset(ns, off); err != nil {
		return err
	}
	b.key = appendOffsetKey(b.key[:0], ns)
	var v [8]byte
	if err := b.b.Set(b.key, encodeOffset(v[:0], off), nil); err != nil {
		return fmt.Errorf("state: batch offset %s: %w", ns, err)
	}
	b.n++
	return nil
}

func (b *dbBatch) Len() int { return b.n }

func (b *dbBatch) Commit() error {
	if b.b == nil {
		return ErrFinished
	}
	defer b.Close()
	if err := b.d.rlock(); err != nil {
		return err
	}
	defer b.d.mu.RUnlock()
	if err := b.b.Commit(b.d.wo); err != nil {
		return fmt.Errorf("state: batch commit: %w", err)
	}
	return nil
}

func (b *dbBatch) Close() {
	if b.b == nil {
		return
	}
	_ = b.b.Close() // only fails for a batch used after close, which b.b == nil prevents
	b.b = nil
}

// NewLoader implements Store: the load goes to an sstable in <Dir>/ingest, ingested by Commit.
func (d *DB) NewLoader(ns Namespace) (Loader, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	if err := d.rlock(); err != nil {
		return nil, err
	}
	defer d.mu.RUnlock()
	return &dbLoader{
		d:      d,
		ns:     ns,
		prefix: appendStateKey(nil, ns, nil),
	}, nil
}

// dbLoader writes one namespace's keys into an sstable. Not safe for concurrent use.
type dbLoader struct {
	d      *DB
	ns     Namespace
	prefix []byte // prefix+'s'
	off    int64
	offSet bool // SetOffset was called

	path string          // the state sstable, once the first key is added
	w    *sstable.Writer // nil until the first Add, and after finish
	err  error           // sticky I/O error from the writer
	key  []byte          // the last added key, with prefix
	tmp  []byte
	n    int
	done bool
}

func (l *dbLoader) Add(key, val []byte) error {
	if l.done {
		return ErrFinished
	}
	if l.err != nil {
		return l.err
	}
	l.tmp = append(append(l.tmp[:0], l.prefix...), key...)
	if l.n > 0 && bytes.Compare(l.tmp, l.key) <= 0 {
		return keyOrderError(l.ns, l.key[len(l.prefix):], key)
	}
	if l.w == nil {
		w, path, err := l.d.createSST(l.ns, "state")
		if err != nil {
			l.err = err
			return err
		}
		l.w, l.path = w, path
	}
	if err := l.w.Set(l.tmp, val); err != nil {
		l.err = fmt.Errorf("state: loader %s: %w", l.ns, err)
		return l.err
	}
	l.key, l.tmp = l.tmp, l.key
	l.n++
	return nil
}

func (l *dbLoader) SetOffset(off int64) {
	l.off, l.offSet = off, true
}

func (l *dbLoader) Commit() error {
	if l.done {
		return ErrFinished
	}
	if l.err != nil {
		_ = l.Abort()
		return l.err
	}
	if l.offSet {
		if err := checkOffset(l.ns, l.off); err != nil {
			_ = l.Abort()
			return err
		}
	}
	if err := l.d.rlock(); err != nil {
		_ = l.Abort()
		return err
	}
	defer l.d.mu.RUnlock()
	l.done = true
	var paths []string
	cleanup := func() {
		for _, p := range paths {
			_ = l.d.fs.Remove(p)
		}
	}
	if l.w != nil {
		w := l.w
		l.w = nil
		paths = append(paths, l.path)
		if err := w.Close(); err != nil { // finishes and fsyncs the file
			cleanup()
			return fmt.Errorf("state: loader %s: %w", l.ns, err)
		}
	}
	if l.offSet {
		w, path, err := l.d.createSST(l.ns, "offset")
		if err != nil {
			cleanup()
			return err
		}
		paths = append(paths, path)
		var v [8]byte
		err = w.Set(appendOffsetKey(nil, l.ns), encodeOffset(v[:0], l.off))
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			cleanup()
			return fmt.Errorf("state: loader %s: offset: %w", l.ns, err)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	// Make every earlier batch durable first (one synced WAL record; closed WALs are synced), so
	// a durable load is never followed, after a crash, by the loss of writes it overwrote.
	if err := l.d.db.LogData(nil, pebble.Sync); err != nil {
		cleanup()
		return fmt.Errorf("state: loader %s: sync wal: %w", l.ns, err)
	}
	// One Ingest of both files is atomic (see the package doc). On success Pebble has moved them.
	if err := l.d.db.Ingest(context.Background(), paths); err != nil {
		cleanup()
		return fmt.Errorf("state: loader %s: ingest: %w", l.ns, err)
	}
	return nil
}

func (l *dbLoader) Abort() error {
	if l.done {
		return nil
	}
	l.done = true
	if l.w == nil {
		return nil
	}
	_ = l.w.Close() // the file is discarded either way
	l.w = nil
	if err := l.d.fs.Remove(l.path); err != nil {
		return fmt.Errorf("state: loader %s: abort: %w", l.ns, err)
	}
	return nil
}

// createSST creates a new sstable for ingestion in the ingest directory.
func (d *DB) createSST(ns Namespace, what string) (*sstable.Writer, string, error) {
	name := strconv.FormatUint(d.loaderSeq.Add(1), 10) + "-" + what + ".sst"
	path := d.fs.PathJoin(d.ingestDir, name)
	f, err := d.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, "", fmt.Errorf("state: loader %s: %w", ns, err)
	}
	return sstable.NewWriter(objstorageprovider.NewFileWritable(f), d.sstOpts), path, nil
}
