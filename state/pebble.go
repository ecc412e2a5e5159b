package state

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
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

	// MinFreeBytes is the free space the store keeps on its file system: a write that would
	// start with less free fails with ErrDiskFull instead (Pebble's write-ahead log and
	// MANIFEST writes are fatal to it when they fail, see fault.go). 0 means
	// defaultMinFreeBytes; negative disables the check.
	MinFreeBytes int64
	// VerifyLimit makes Open read every table of a store whose tables total at most this many
	// bytes, checking their checksums, so that damage at rest (a garbled table) is found at
	// start (ErrDamaged) rather than by a read later; 0 never reads them at Open.
	VerifyLimit int64

	// FS replaces the OS file system; nil means the OS's. Tests use it to crash the store or
	// inject I/O faults (vfs.NewCrashableMem, errorfs).
	FS vfs.FS
	// tune edits the Pebble options after ours (benchmarks compare settings).
	tune func(*pebble.Options)
}

// defaultMinFreeBytes is Options.MinFreeBytes's default: two memtables' worth, what a flush of
// every memtable may write.
const defaultMinFreeBytes = 2 * memTableSize

// defaultCacheSize is the block cache size used when Options.CacheSize is zero or negative.
const defaultCacheSize = 64 << 20

// memTableSize replaces Pebble's 4 MiB default; it is the only Pebble knob we change, measured
// with BenchmarkBulkLoad and BenchmarkMemTable (bench_test.go). 1M keys (16+48 bytes) in batches
// of 10k: 64 MiB commits and flushes 0.6-1.4M keys/s against 0.2-0.6M with 4 MiB (CPU 1.3-1.5M vs
// 0.4-0.5M keys/cpu-s): small memtables flush constantly and stall writes. Batches of 1000
// sequential keys: 16-64 MiB ~1.1M keys/cpu-s, 4 MiB ~0.8-1.0M. Batches of 1000 random keys
// (real-time checkpoints): 4-64 MiB all ~0.3M keys/cpu-s. Pebble keeps at most
// MemTableStopWritesThreshold (default 2) memtables, so this costs up to 128 MiB under write
// load. Tried in ad hoc runs and left at Pebble's defaults: L0 stop-writes 24 and 16 MiB L0
// files (5M sequential keys: no gain), bloom filters (GetMiss over 1M keys: no gain).
// 32 MiB: as fast as 64 MiB in those runs, and Pebble's memtables are allocated outside the Go
// heap, so they count fully against the process's memory target (sort_memory + 256 MiB).
const memTableSize = 32 << 20

func pebbleOptions(o Options, fs vfs.FS, cache *pebble.Cache, corrupt func(pebble.DataCorruptionInfo)) *pebble.Options {
	po := &pebble.Options{
		FS:                 fs,
		Cache:              cache,
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       memTableSize,
		Logger:             pebbleLogger{dir: o.Dir},
		EventListener:      &pebble.EventListener{DataCorruption: corrupt},
	}
	if o.tune != nil {
		o.tune(po)
	}
	po.EnsureDefaults()
	return po
}

// DB is the Pebble implementation of Store: one per process. Safe for concurrent use (see
// Store): no lock is held over a call into Pebble or over a Scan's callback; Close waits for the
// calls in flight through gate, an atomic count that no other call waits on. Values returned by
// Get are owned by the caller.
type DB struct {
	db        *pebble.DB
	po        *pebble.Options
	fs        vfs.FS
	dir       string
	ingestDir string
	wo        *pebble.WriteOptions
	minFree   uint64                // Options.MinFreeBytes; 0: no check
	sstOpts   sstable.WriterOptions // for loader files, in the DB's table format
	loaderSeq atomic.Uint64
	keyBufs   sync.Pool // *[]byte scratch for encoded keys (Pebble's Get lets its key escape)
	// loaderFileSize starts as the loaderFileSize constant; tests lower it.
	loaderFileSize int64

	// fault is the first failure (ErrFailed) or damage (ErrDamaged) found; once set, every call
	// returns it (fault.go).
	fault atomic.Pointer[error]

	// gate counts the calls in flight that use Pebble's DB (Get, Offset, Drop, Namespaces, a
	// batch's or loader's Commit, a Scan, an unfinished Iter) and refuses new calls once Close
	// has begun; Close waits for the count to drop to zero before it closes Pebble (gate.go). It
	// is not a lock: nothing else waits on it.
	gate gate
}

var _ Store = (*DB)(nil)

// Open opens (or creates) the store in o.Dir. Leftover loader files of a crashed process are
// removed. Errors name the directory and wrap the cause; damaged files make it return an error
// wrapping ErrDamaged (see MoveAside).
func Open(o Options) (*DB, error) {
	if o.Dir == "" {
		return nil, errors.New("state: open: Options.Dir is empty")
	}
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	d := &DB{
		fs:        fs,
		dir:       o.Dir,
		ingestDir: fs.PathJoin(o.Dir, "ingest"),
		wo:        pebble.NoSync,

		loaderFileSize: loaderFileSize,
	}
	d.gate.init()
	d.keyBufs.New = func() any { b := make([]byte, 0, 64); return &b }
	switch {
	case o.MinFreeBytes == 0:
		d.minFree = defaultMinFreeBytes
	case o.MinFreeBytes > 0:
		d.minFree = uint64(o.MinFreeBytes)
	}
	if o.Sync {
		d.wo = pebble.Sync
	}
	if err := fs.MkdirAll(d.ingestDir, 0o755); err != nil {
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	size := o.CacheSize
	if size <= 0 {
		size = defaultCacheSize
	}
	// Pebble charges its memtables to the block cache (Cache.Reserve: memTableSize for the
	// active one, twice that while one flushes), so a cache of size alone held no block at all
	// once the memtable had reserved it: every read of a flushed table missed (a join's lookups
	// cost 3x). The cache gets size for blocks on top of both memtables' reservation, so blocks
	// always have size (and up to size + memTableSize while only one memtable exists). With
	// one memtable's worth only, a write-heavy store flushing often lost its cache again
	// (cogroup never mode: 287 CPU-s against 203).
	cache := pebble.NewCache(size + 2*memTableSize)
	defer cache.Unref() // the DB holds its own reference
	d.po = pebbleOptions(o, fs, cache, d.dataCorruption)
	if err := checkFiles(fs, o.Dir); err != nil {
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	db, err := pebble.Open(fs.PathJoin(o.Dir, "pebble"), d.po)
	if err != nil {
		if damagedOpen(err) {
			return nil, fmt.Errorf("%w: open %s: %w", ErrDamaged, o.Dir, err)
		}
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
	if err := d.guard(d.checkFormat); err != nil {
		_ = db.Close()
		if pebble.IsCorruptionError(err) && !errors.Is(err, ErrDamaged) {
			err = fmt.Errorf("%w: %w", ErrDamaged, err)
		}
		return nil, fmt.Errorf("state: open %s: %w", o.Dir, err)
	}
	if size := db.Metrics().Total().TablesSize; o.VerifyLimit > 0 && size <= o.VerifyLimit {
		if err := d.readAll(); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("state: open %s: reading its %d bytes of tables: %w", o.Dir, size, err)
		}
	}
	return d, nil
}

// readAll reads every key and value, so every block's checksum is verified (a corruption
// becomes ErrDamaged). Measured: 1M keys with 40-byte values (47 MB of tables) in 0.18 s.
func (d *DB) readAll() error {
	it, err := d.db.NewIter(nil)
	if err != nil {
		return d.wrap("read all", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			break // it.Close reports it
		}
	}
	if err := it.Close(); err != nil {
		return d.wrap("read all", err)
	}
	return d.faultErr()
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

// enter counts a call in flight (see gate), or returns ErrClosed once Close has begun, or the
// store's fault. On success the caller must d.gate.leave() after its last use of Pebble.
func (d *DB) enter() error {
	if err := d.gate.enter(); err != nil {
		return err
	}
	if err := d.faultErr(); err != nil {
		d.gate.leave()
		return err
	}
	return nil
}

// Get implements Store.
func (d *DB) Get(ns Namespace, key []byte, dst []byte) ([]byte, bool, error) {
	if err := checkNS(ns); err != nil {
		return dst, false, err
	}
	bp := d.keyBufs.Get().(*[]byte)
	*bp = appendStateKey((*bp)[:0], ns, key)
	val, ok, err := d.get(ns, *bp, dst)
	d.keyBufs.Put(bp)
	return val, ok, err
}

func (d *DB) get(ns Namespace, k, dst []byte) ([]byte, bool, error) {
	if err := d.enter(); err != nil {
		return dst, false, err
	}
	defer d.gate.leave()
	v, closer, err := d.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, d.wrap("get "+ns.String(), err)
	}
	dst = append(dst, v...)
	if err := closer.Close(); err != nil {
		return dst, false, d.wrap("get "+ns.String(), err)
	}
	return dst, true, nil
}

// Offset implements Store.
func (d *DB) Offset(ns Namespace) (int64, bool, error) {
	if err := checkNS(ns); err != nil {
		return 0, false, err
	}
	var vbuf [8]byte
	bp := d.keyBufs.Get().(*[]byte)
	*bp = appendOffsetKey((*bp)[:0], ns)
	v, ok, err := d.get(ns, *bp, vbuf[:0])
	d.keyBufs.Put(bp)
	if err != nil || !ok {
		return 0, false, err
	}
	off, err := decodeOffset(ns, v)
	if err != nil {
		return 0, false, err
	}
	return off, true, nil
}

// NewBatch implements Store. It does not enter the gate: a Pebble batch's Set and Delete touch
// only the batch's own memory, so only its Commit is a call into Pebble's DB.
func (d *DB) NewBatch() Batch {
	return &dbBatch{d: d, b: d.db.NewBatch()}
}

// Drop implements Store: one DeleteRange over the state range and the offset delete, in one batch.
func (d *DB) Drop(ns Namespace) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	lo, hi := stateBounds(ns)
	if err := d.enter(); err != nil {
		return err
	}
	defer d.gate.leave()
	if err := d.checkSpace("drop " + ns.String()); err != nil {
		return err
	}
	b := d.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return fmt.Errorf("state: drop %s: %w", ns, err)
	}
	if err := b.Delete(appendOffsetKey(nil, ns), nil); err != nil {
		return fmt.Errorf("state: drop %s: %w", ns, err)
	}
	if err := d.guard(func() error { return b.Commit(d.wo) }); err != nil {
		return d.wrap("drop "+ns.String(), err)
	}
	return nil
}

// Scan implements Store: NewIter in a loop. No lock is held while fn runs; the Scan counts as a
// call in flight (Close waits for it) until it returns.
func (d *DB) Scan(ns Namespace, fn func(key, val []byte) error) error {
	return scanIter(d, ns, fn)
}

// NewIter implements Store: a Pebble iterator over the state range of ns, counted in the gate
// until it is finished.
func (d *DB) NewIter(ns Namespace) (Iter, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	lo, hi := stateBounds(ns)
	if err := d.enter(); err != nil {
		return nil, err
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		d.gate.leave()
		return nil, d.wrap("scan "+ns.String(), err)
	}
	return &dbIter{d: d, ns: ns, prefix: len(lo), it: it}, nil
}

// dbIter is the Iter of a DB. Not safe for concurrent use.
type dbIter struct {
	d      *DB
	ns     Namespace
	prefix int              // length of the state range's prefix, cut from keys
	it     *pebble.Iterator // nil once finished (and the gate left)
	moved  bool             // First was called
	valid  bool             // positioned on a key and val
	val    []byte
	err    error
}

func (i *dbIter) Next() bool {
	i.valid = false
	if i.it == nil {
		return false
	}
	if i.d.gate.closed() {
		i.finish(ErrClosed)
		return false
	}
	var ok bool
	if i.moved {
		ok = i.it.Next()
	} else {
		ok, i.moved = i.it.First(), true
	}
	if !ok {
		i.finish(nil)
		return false
	}
	v, err := i.it.ValueAndErr()
	if err != nil {
		i.finish(nil) // it.Close reports it
		return false
	}
	i.val, i.valid = v, true
	return true
}

func (i *dbIter) Key() []byte {
	if !i.valid {
		panic("state: Iter.Key called without a Next that returned true")
	}
	return i.it.Key()[i.prefix:]
}

func (i *dbIter) Value() []byte {
	if !i.valid {
		panic("state: Iter.Value called without a Next that returned true")
	}
	return i.val
}

func (i *dbIter) Err() error { return i.err }

func (i *dbIter) Close() error {
	i.valid = false
	if i.it != nil {
		i.finish(nil)
	}
	return i.err
}

// finish closes the Pebble iterator, records why the iteration ended (Pebble's error first) and
// leaves the gate: a Close waiting for this iterator may close Pebble from here on.
func (i *dbIter) finish(err error) {
	if cerr := i.it.Close(); cerr != nil {
		err = i.d.wrap("scan "+i.ns.String(), cerr)
	}
	i.it, i.val, i.err = nil, nil, err
	i.d.gate.leave()
}

// Namespaces implements Store. It visits one key per namespace: after each, it seeks past the
// namespace's range (to the next partition's prefix).
func (d *DB) Namespaces() ([]Namespace, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.gate.leave()
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagNS}, UpperBound: []byte{tagNS + 1}})
	if err != nil {
		return nil, fmt.Errorf("state: namespaces: %w", err)
	}
	var (
		out  []Namespace
		seek []byte
	)
	for valid := it.First(); valid; {
		k := it.Key()
		i := bytes.IndexByte(k, 0)
		if i < 1 || len(k) < i+5 {
			_ = it.Close()
			return nil, fmt.Errorf("%w: key %q is not in a namespace", ErrCorrupt, k)
		}
		p := binary.BigEndian.Uint32(k[i+1:])
		if p >= 1<<31 {
			_ = it.Close()
			return nil, fmt.Errorf("%w: key %q has a negative partition", ErrCorrupt, k)
		}
		out = append(out, Namespace{Operator: string(k[1:i]), Partition: int32(p)})
		seek = binary.BigEndian.AppendUint32(append(seek[:0], k[:i+1]...), p+1)
		valid = it.SeekGE(seek)
	}
	if err := it.Close(); err != nil {
		return nil, d.wrap("namespaces", err)
	}
	return out, nil
}

// Close implements Store. It refuses new calls, waits for the calls in flight (a running Scan
// and an unfinished Iter included), then closes Pebble. A second Close returns ErrClosed at once.
// After ErrFailed it returns that error without waiting and leaves Pebble as it is (its state is
// undefined and a call in flight may never return: the process must exit).
func (d *DB) Close() error {
	if err := d.gate.shut(); err != nil {
		return err
	}
	if err := d.faultErr(); errors.Is(err, ErrFailed) {
		return err
	}
	d.gate.wait()
	if err := d.faultErr(); errors.Is(err, ErrFailed) { // a call in flight failed Pebble
		return err
	}
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
	if err := b.d.enter(); err != nil {
		return err
	}
	defer b.d.gate.leave()
	if err := b.d.checkSpace("batch commit"); err != nil {
		return err
	}
	if err := b.d.guard(func() error { return b.b.Commit(b.d.wo) }); err != nil {
		return b.d.wrap("batch commit", err)
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
	if err := d.enter(); err != nil {
		return nil, err
	}
	d.gate.leave()
	return &dbLoader{
		d:      d,
		ns:     ns,
		prefix: appendStateKey(nil, ns, nil),
	}, nil
}

// loaderFileSize is the size at which a loader starts a new sstable: it bounds the loader's
// memory (the bloom filter writer keeps 4 bytes per key of the open file) and keeps ingested files
// at a size compactions handle well. All files of one load are ingested together, atomically.
const loaderFileSize = 64 << 20

// dbLoader writes one namespace's keys into sstables. Not safe for concurrent use. Add and Abort
// touch only the loader's own files in <Dir>/ingest, never Pebble's DB, so they do not enter the
// gate (after Close they still work; the next Open removes files left behind); Commit enters it
// for its ingest.
type dbLoader struct {
	d      *DB
	ns     Namespace
	prefix []byte // prefix+'s'
	off    int64
	offSet bool // SetOffset was called

	paths []string        // the load's sstables in key order; the last is open while w != nil
	w     *sstable.Writer // the open sstable, or nil
	err   error           // sticky I/O error
	key   []byte          // the last added key, with prefix
	tmp   []byte
	n     int
	// unchecked counts input bytes since the file size was last checked.
	unchecked int64
	done      bool
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
		l.w = w
		l.paths = append(l.paths, path)
	}
	if err := l.w.Set(l.tmp, val); err != nil {
		l.err = l.d.wrap("loader "+l.ns.String(), err)
		return l.err
	}
	l.key, l.tmp = l.tmp, l.key
	l.n++
	// EstimatedSize is not free (7% of a load's CPU when asked for every key): ask after every
	// 1/64 of the file size of input.
	l.unchecked += int64(len(l.key) + len(val))
	if l.unchecked >= l.d.loaderFileSize/64 {
		l.unchecked = 0
		if l.w.Raw().EstimatedSize() < uint64(l.d.loaderFileSize) {
			return nil
		}
		if err := l.finishFile(); err != nil {
			return err
		}
	}
	return nil
}

// finishFile closes (and fsyncs) the open sstable.
func (l *dbLoader) finishFile() error {
	w := l.w
	l.w = nil
	if err := w.Close(); err != nil {
		l.err = l.d.wrap("loader "+l.ns.String(), err)
		return l.err
	}
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
	if err := l.d.enter(); err != nil {
		_ = l.Abort()
		return err
	}
	defer l.d.gate.leave()
	fail := func(err error) error {
		_ = l.Abort()
		return err
	}
	if err := l.d.checkSpace("loader " + l.ns.String()); err != nil {
		return fail(err)
	}
	if l.w != nil {
		if err := l.finishFile(); err != nil {
			return fail(err)
		}
	}
	if l.offSet {
		w, path, err := l.d.createSST(l.ns, "offset")
		if err != nil {
			return fail(err)
		}
		l.paths = append(l.paths, path)
		var v [8]byte
		err = w.Set(appendOffsetKey(nil, l.ns), encodeOffset(v[:0], l.off))
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(l.d.wrap("loader "+l.ns.String()+": offset", err))
		}
	}
	if len(l.paths) == 0 {
		l.done = true
		return nil
	}
	// Make every earlier batch durable first (one synced WAL record; closed WALs are synced), so
	// a durable load is never followed, after a crash, by the loss of writes it overwrote.
	if err := l.d.guard(func() error { return l.d.db.LogData(nil, pebble.Sync) }); err != nil {
		return fail(l.d.wrap("loader "+l.ns.String()+": sync wal", err))
	}
	// One Ingest of all the files is atomic (see the package doc). On success Pebble has moved
	// them.
	if err := l.d.guard(func() error { return l.d.db.Ingest(context.Background(), l.paths) }); err != nil {
		return fail(l.d.wrap("loader "+l.ns.String()+": ingest", err))
	}
	l.done, l.paths = true, nil
	return nil
}

func (l *dbLoader) Abort() error {
	if l.done {
		return nil
	}
	l.done = true
	if l.w != nil {
		_ = l.w.Close() // the file is discarded either way
		l.w = nil
	}
	var err error
	for _, p := range l.paths {
		if rerr := l.d.fs.Remove(p); rerr != nil && err == nil {
			err = fmt.Errorf("state: loader %s: abort: %w", l.ns, rerr)
		}
	}
	l.paths = nil
	return err
}

// createSST creates a new sstable for ingestion in the ingest directory.
func (d *DB) createSST(ns Namespace, what string) (*sstable.Writer, string, error) {
	if err := d.checkSpace("loader " + ns.String()); err != nil {
		return nil, "", err
	}
	name := strconv.FormatUint(d.loaderSeq.Add(1), 10) + "-" + what + ".sst"
	path := d.fs.PathJoin(d.ingestDir, name)
	f, err := d.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, "", d.wrap("loader "+ns.String(), err)
	}
	return sstable.NewWriter(newSSTFile(f), d.sstOpts), path, nil
}

// sstBuffer is the write buffer of a loader's sstable. objstorageprovider.NewFileWritable's is
// bufio's default, 4 KiB: one write system call per data block (4 KiB before compression), a
// fifth of the CPU samples in a profile of Nexmark q19's fold at 10M events (the state of 4.4M
// rows). BenchmarkBulkLoad/loader: 3.6M keys/s with 4 KiB, 5.2M with 64 KiB to 1 MiB alike.
const sstBuffer = 256 << 10

// sstFile is a loader sstable's file (objstorage.Writable), written through a buffer of
// sstBuffer bytes and made durable by Finish.
type sstFile struct {
	f  vfs.File
	bw *bufio.Writer
}

func newSSTFile(f vfs.File) *sstFile { return &sstFile{f: f, bw: bufio.NewWriterSize(f, sstBuffer)} }

// Write implements objstorage.Writable. p is not kept.
func (w *sstFile) Write(p []byte) error {
	_, err := w.bw.Write(p)
	return err
}

// Finish implements objstorage.Writable: flushes, syncs and closes the file.
func (w *sstFile) Finish() error {
	err := w.bw.Flush()
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.bw, w.f = nil, nil
	return err
}

// Abort implements objstorage.Writable.
func (w *sstFile) Abort() {
	_ = w.f.Close()
	w.bw, w.f = nil, nil
}
