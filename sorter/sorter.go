// Package sorter owns the bounded-memory external sort used by keyed operators in backlog
// mode.
//
// While a task's input is a backlog, its keyed operator hands every record to the task's
// Sorter instead of processing it. At the switch (or at a backlog checkpoint) the runtime
// calls Merge and reads the records back ordered by (key bytes, event time, offset), so that
// it can fold each key once. Exact ties are returned in insertion order.
//
// Memory: records are copied into large byte arenas, and a compact 32-byte index entry per
// record (normalized 8-byte key prefix, time, offset, arena position) is kept in fixed-size
// index segments. Arenas and segments are reserved chunk by chunk from a Budget shared by all
// sorters of the process (backlog.sort_memory). When a reservation fails, the sorter sorts
// its buffer, writes it to a run file in its directory, releases its memory and goes on; an
// empty sorter that still gets nothing falls back to a small private chunk rather than
// waiting. Merge is a streaming k-way merge of the run files and the sorted segments.
//
// Run files are scratch: they are never fsynced, and a crash leaves them to be removed at
// start-up by New or Clean. Their format is described in run.go.
package sorter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const (
	// DefaultChunkSize is the default reservation unit.
	DefaultChunkSize = 4 << 20
	// MinChunkSize is the smallest ChunkSize accepted.
	MinChunkSize = 64
	// maxPrivateChunk caps the private chunk an empty, starved sorter allocates outside the
	// budget (the "small constant").
	maxPrivateChunk = 64 << 10
	// defaultMaxRuns is the number of run files that triggers a compaction of the newer half
	// into one run, bounding the merge fan-in (one read buffer per run).
	defaultMaxRuns = 64
	// maxRecord is the largest arena record (offsets in a chunk are 32-bit).
	maxRecord = 1<<32 - 1
)

// Sentinel errors.
var (
	ErrClosed   = errors.New("sorter: closed")
	ErrMerged   = errors.New("sorter: Add after Merge without Reset")
	ErrTooLarge = errors.New("sorter: entry too large")
	errReset    = errors.New("sorter: iterator invalidated by Reset or a new Merge")
)

// Options configure a Sorter.
type Options struct {
	// Dir is the spill directory of this sorter (e.g. <state_dir>/sort/<op>-<partition>).
	// It is created if missing.
	Dir string
	// Budget is the shared sort memory. Required.
	Budget *Budget
	// ChunkSize is the number of bytes reserved from the budget at a time. Zero means
	// DefaultChunkSize, clamped to Budget.Limit()/4 (at least MinChunkSize) for small budgets.
	ChunkSize int
}

type state int

const (
	adding state = iota
	merged
	closed
)

// runFile is one spilled, sorted run.
type runFile struct {
	path    string
	size    int64
	entries int64
}

// Sorter buffers the entries of one task and returns them sorted.
//
// A Sorter is not safe for concurrent use: the task goroutine owns it. It copies what Add
// is given; the memory returned by its Iterator is owned by the iterator.
type Sorter struct {
	dir     string
	budget  *Budget
	chunk   int // reservation unit
	private int // size of a private (unbudgeted) chunk
	maxRuns int
	radix   bool // sort algorithm for segments (see BenchmarkSort1M)
	st      state

	// Arena: chunks[i] are full-length views; cur is the last chunk, len(cur) = bytes used.
	chunks [][]byte
	cur    []byte
	// Index: full segments, then seg, the segment being filled.
	segs [][]entry
	seg  []entry

	reserved int64 // bytes reserved from budget
	privMem  int64 // bytes allocated outside the budget
	memN     int64 // entries in memory
	n        int64 // entries since Reset
	sorted   bool  // memory segments are sorted (after Merge)

	runs    []runFile
	seq     int
	spilled int64 // bytes in current run files

	it *Iterator // the open iterator of the last Merge
}

// Stats describe a Sorter's current contents.
type Stats struct {
	Entries      int64 // entries added since the last Reset
	MemBytes     int64 // memory held: budget reservations plus private chunks
	SpilledBytes int64 // bytes in the current run files
	Runs         int64 // number of current run files
}

// New returns an empty sorter. It creates o.Dir if missing and removes stale spill files a
// crash left there.
func New(o Options) (*Sorter, error) {
	if o.Budget == nil {
		return nil, errors.New("sorter: Options.Budget is required")
	}
	if o.Dir == "" {
		return nil, errors.New("sorter: Options.Dir is required")
	}
	chunk := o.ChunkSize
	switch {
	case chunk < 0:
		return nil, fmt.Errorf("sorter: Options.ChunkSize %d is negative", chunk)
	case chunk == 0:
		chunk = int(min(int64(DefaultChunkSize), o.Budget.Limit()/4))
		chunk = max(chunk, MinChunkSize)
	case chunk < MinChunkSize:
		return nil, fmt.Errorf("sorter: Options.ChunkSize %d is below the minimum %d", chunk, MinChunkSize)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sorter: create dir: %w", err)
	}
	if err := Clean(o.Dir); err != nil {
		return nil, err
	}
	return &Sorter{
		dir:     o.Dir,
		budget:  o.Budget,
		chunk:   chunk,
		private: min(chunk, maxPrivateChunk),
		maxRuns: defaultMaxRuns,
		radix:   true,
	}, nil
}

// Add copies an entry into the sorter. When the in-memory buffer cannot grow because the
// budget is exhausted, Add sorts the buffer, writes it as a run file, releases its memory and
// continues. Add does not allocate except when it takes a new chunk.
func (s *Sorter) Add(key []byte, ts int64, offset int64, payload []byte) error {
	if s.st != adding {
		if s.st == closed {
			return ErrClosed
		}
		return ErrMerged
	}
	need := uvarintLen(uint64(len(key))) + uvarintLen(uint64(len(payload))) + len(key) + len(payload)
	if len(s.seg) == cap(s.seg) || cap(s.cur)-len(s.cur) < need {
		if err := s.grow(need); err != nil {
			return err
		}
	}
	pos := makePos(len(s.chunks)-1, len(s.cur))
	c := s.cur
	c = appendUvarint(c, uint64(len(key)))
	c = appendUvarint(c, uint64(len(payload)))
	c = append(c, key...)
	c = append(c, payload...)
	s.cur = c
	s.seg = append(s.seg, entry{prefix: prefixAt(key, 0), ts: ts, off: offset, pos: pos})
	s.memN++
	s.n++
	return nil
}

func appendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// grow makes room for one index entry and need arena bytes, spilling if the budget says no.
func (s *Sorter) grow(need int) error {
	if need > maxRecord {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, need)
	}
	for {
		if s.tryGrow(need) {
			return nil
		}
		if s.memN == 0 {
			// Starved: even an empty sorter gets no chunk. Use private memory.
			if len(s.seg) == cap(s.seg) {
				s.addSeg(s.private, false)
			}
			if cap(s.cur)-len(s.cur) < need {
				s.addChunk(max(s.private, need), false)
			}
			return nil
		}
		if err := s.spill(); err != nil {
			return err
		}
	}
}

// tryGrow reserves what is missing from the budget.
func (s *Sorter) tryGrow(need int) bool {
	if len(s.seg) == cap(s.seg) {
		if !s.budget.tryReserve(int64(s.chunk)) {
			return false
		}
		s.addSeg(s.chunk, true)
	}
	if cap(s.cur)-len(s.cur) < need {
		size := max(s.chunk, need)
		if !s.budget.tryReserve(int64(size)) {
			return false
		}
		s.addChunk(size, true)
	}
	return true
}

func (s *Sorter) addSeg(bytes int, reserved bool) {
	if len(s.seg) > 0 {
		s.segs = append(s.segs, s.seg)
	}
	s.seg = make([]entry, 0, max(bytes/entrySize, 1))
	s.account(int64(bytes), reserved)
}

func (s *Sorter) addChunk(bytes int, reserved bool) {
	c := make([]byte, bytes)
	s.chunks = append(s.chunks, c)
	s.cur = c[:0]
	s.account(int64(bytes), reserved)
}

func (s *Sorter) account(n int64, reserved bool) {
	if reserved {
		s.reserved += n
	} else {
		s.privMem += n
	}
}

// freeMemory drops the in-memory buffer and returns its reservation to the budget.
func (s *Sorter) freeMemory() {
	s.budget.release(s.reserved)
	s.reserved, s.privMem = 0, 0
	clear(s.chunks)
	s.chunks = s.chunks[:0]
	s.cur = nil
	clear(s.segs)
	s.segs = s.segs[:0]
	s.seg = nil
	s.memN = 0
	s.sorted = false
}

// segments returns the non-empty index segments in insertion order.
func (s *Sorter) segments() [][]entry {
	all := s.segs
	if len(s.seg) > 0 {
		all = append(all[:len(all):len(all)], s.seg)
	}
	return all
}

func (s *Sorter) sortMemory() {
	if s.sorted {
		return
	}
	for _, seg := range s.segments() {
		sortSegment(s.chunks, seg, s.radix)
	}
	s.sorted = true
}

// memorySources returns one merge source per sorted segment, ordered after the first ones.
func (s *Sorter) memorySources(first int) []*source {
	segs := s.segments()
	srcs := make([]*source, len(segs))
	for i, seg := range segs {
		srcs[i] = &source{order: first + i, seg: seg, chunks: s.chunks}
	}
	return srcs
}

// spill sorts the buffer, writes it as one run and frees the memory.
func (s *Sorter) spill() error {
	s.sortMemory()
	it, err := newIterator(s.memorySources(0), nil)
	if err != nil {
		return err
	}
	if err := s.writeRun(it, len(s.runs)); err != nil {
		return err
	}
	s.freeMemory()
	if len(s.runs) >= s.maxRuns {
		return s.compact()
	}
	return nil
}

// writeRun writes the iterator's entries to a new run file inserted at runs[at].
func (s *Sorter) writeRun(it *Iterator, at int) (err error) {
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	path := filepath.Join(s.dir, fmt.Sprintf("run-%d.sort", s.seq))
	s.seq++
	w, err := createRun(path)
	if err != nil {
		return err
	}
	for it.Next() {
		if err := w.add(it.Key(), it.Time(), it.Offset(), it.Payload()); err != nil {
			w.abort()
			return err
		}
	}
	if err := it.Err(); err != nil {
		w.abort()
		return err
	}
	if err := w.finish(); err != nil {
		w.abort()
		return err
	}
	s.runs = slices.Insert(s.runs, at, runFile{path: path, size: w.size, entries: w.entries})
	s.spilled += w.size
	return nil
}

// compact merges the newer half of the runs into one, keeping their relative order.
func (s *Sorter) compact() error {
	from := len(s.runs) - max(s.maxRuns/2, 2)
	from = max(from, 0)
	old := slices.Clone(s.runs[from:])
	srcs, readers, err := openRuns(old, 0)
	if err != nil {
		return err
	}
	it, err := newIterator(srcs, readers)
	if err != nil {
		return err
	}
	s.runs = s.runs[:from]
	if err := s.writeRun(it, from); err != nil {
		s.runs = append(s.runs, old...)
		return err
	}
	var errs []error
	for _, r := range old {
		s.spilled -= r.size
		if err := os.Remove(r.path); err != nil {
			errs = append(errs, fmt.Errorf("sorter: remove run: %w", err))
		}
	}
	return errors.Join(errs...)
}

// openRuns opens readers for runs, numbering their sources from first.
func openRuns(runs []runFile, first int) ([]*source, []*runReader, error) {
	srcs := make([]*source, 0, len(runs))
	readers := make([]*runReader, 0, len(runs))
	for i, rf := range runs {
		r, err := openRun(rf.path)
		if err != nil {
			for _, r := range readers {
				_ = r.close()
			}
			return nil, nil, err
		}
		readers = append(readers, r)
		srcs = append(srcs, &source{order: first + i, run: r})
	}
	return srcs, readers, nil
}

// Len returns the number of entries added since the last Reset.
func (s *Sorter) Len() int64 { return s.n }

// Merge returns an iterator over all entries, in memory and in runs, in (key, event time,
// offset) order. After Merge, Add fails until Reset. The iterator holds one block buffer
// (~64 KiB) per run file. Merge may be called again; that invalidates the previous iterator.
// The caller closes the iterator; Reset and Close also do.
func (s *Sorter) Merge() (*Iterator, error) {
	if s.st == closed {
		return nil, ErrClosed
	}
	s.invalidate()
	s.st = merged
	s.sortMemory()
	srcs, readers, err := openRuns(s.runs, 0)
	if err != nil {
		return nil, err
	}
	srcs = append(srcs, s.memorySources(len(srcs))...)
	it, err := newIterator(srcs, readers)
	if err != nil {
		return nil, err
	}
	it.owner = s
	s.it = it
	return it, nil
}

// invalidate closes the open iterator, if any, so that it reports errReset.
func (s *Sorter) invalidate() {
	if s.it != nil {
		it := s.it
		s.it = nil
		if it.err == nil {
			it.err = errReset
		}
		_ = it.Close()
	}
}

// Reset drops all entries, deletes the run files and releases the memory to the budget. It
// is called after a switch has been committed, on revoke and on a transaction abort.
func (s *Sorter) Reset() error {
	if s.st == closed {
		return ErrClosed
	}
	s.invalidate()
	s.freeMemory()
	var errs []error
	for _, r := range s.runs {
		if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sorter: remove run: %w", err))
		}
	}
	s.runs = s.runs[:0]
	s.spilled = 0
	s.n = 0
	s.st = adding
	return errors.Join(errs...)
}

// Close resets the sorter and releases everything. Later calls return ErrClosed, except
// Close itself, which is idempotent.
func (s *Sorter) Close() error {
	if s.st == closed {
		return nil
	}
	err := s.Reset()
	s.st = closed
	s.chunks, s.segs, s.runs = nil, nil, nil
	return err
}

// Stats returns the sorter's current figures.
func (s *Sorter) Stats() Stats {
	return Stats{
		Entries:      s.n,
		MemBytes:     s.reserved + s.privMem,
		SpilledBytes: s.spilled,
		Runs:         int64(len(s.runs)),
	}
}

// Clean removes leftover spill files (run-*.sort) anywhere under dir, and the directories
// that this leaves empty (dir itself is kept). Other files are left alone. A missing dir is
// not an error. It is used at start-up on <state_dir>/sort.
func Clean(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return filepath.SkipAll
			}
			return err
		}
		if d.IsDir() {
			if path != dir {
				dirs = append(dirs, path)
			}
			return nil
		}
		if isRunName(d.Name()) {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sorter: clean %s: %w", dir, err)
	}
	// Deepest first; a directory that is not empty stays.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
	return nil
}

func isRunName(name string) bool {
	return strings.HasPrefix(name, "run-") && strings.HasSuffix(name, ".sort")
}
