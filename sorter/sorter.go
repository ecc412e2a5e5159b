// Package sorter owns the bounded-memory external sort used by keyed operators in backlog
// mode.
//
// While a task's input is a backlog, its keyed operator hands every record to the task's
// Sorter instead of processing it. At the switch (or at a backlog checkpoint) the runtime
// calls Merge and reads the records back ordered by (key bytes, event time, offset), so that
// it can fold each key once. Exact ties are returned in insertion order.
//
// Memory is reserved chunk by chunk from a Budget shared by all sorters of the process
// (backlog.sort_memory). A chunk is a slotted page: records (key, payload) are appended at its
// front and a compact 32-byte index slot per record (normalized 8-byte key prefix, time,
// offset, record position) at its back. When a chunk is full the sorter sorts its slots (an
// MSD radix sort on the normalized prefix, and where prefixes tie on the key bytes after all
// those the tied keys share) and copies its records, in sorted order, into the
// next chunk it reserves; the old memory becomes the new chunk to fill. The merge then reads
// each chunk sequentially, and that costs no memory beyond the chunks themselves.
// When a reservation fails, the sorter merges its chunks into a run file in its directory,
// releases its memory and goes on; an empty sorter that still gets nothing falls back to a
// small private chunk rather than waiting. Merge is a streaming k-way merge of the run files
// and the sorted chunks.
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
	// MinChunkSize and MaxChunkSize bound Options.ChunkSize.
	MinChunkSize = 64
	MaxChunkSize = 1 << 30
	// maxPrivateChunk caps the private chunk an empty, starved sorter allocates outside the
	// budget (the "small constant").
	maxPrivateChunk = 64 << 10
	// defaultMaxRuns bounds the number of run files, hence the merge fan-in (one read buffer
	// per run); see nextCompaction.
	defaultMaxRuns = 64
	// maxRecord bounds an entry's size so that it fits a run block (see maxBlockLen).
	maxRecord = maxBlockLen - 64
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
	// ChunkSize is the number of bytes reserved from the budget at a time, rounded down to a
	// multiple of 32. Zero means DefaultChunkSize, clamped to Budget.Limit()/4 (at least
	// MinChunkSize) for small budgets. A record larger than a chunk gets a chunk of its own.
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
	radix   bool // sort algorithm for chunks (see BenchmarkSort1M)
	permute bool // copy full chunks in sorted order (see BenchmarkMergeInMemory)
	st      state

	chunks   []*chunk // in insertion order; the last one is cur
	cur      *chunk
	reserved int64 // bytes reserved from budget
	privMem  int64 // bytes allocated outside the budget
	memN     int64 // entries in memory
	n        int64 // entries since Reset

	runs    []runFile
	seq     int
	spilled int64 // bytes in current run files
	written int64 // bytes written to run files since Reset, compactions included

	it *Iterator // the open iterator of the last Merge

	openRun func(string) (*os.File, error) // creates run files; nil: os.OpenFile (tests inject faults)
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
	case chunk < MinChunkSize || chunk > MaxChunkSize:
		return nil, fmt.Errorf("sorter: Options.ChunkSize %d is outside [%d, %d]", chunk, MinChunkSize, MaxChunkSize)
	}
	chunk -= chunk % entrySize
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
		permute: true,
	}, nil
}

// Add copies an entry into the sorter. When the in-memory buffer cannot grow because the
// budget is exhausted, Add sorts the buffer, writes it as a run file, releases its memory and
// continues. Add does not allocate except when it takes a new chunk; when it does, it also
// sorts the chunk just filled.
func (s *Sorter) Add(key []byte, ts int64, offset int64, payload []byte) error {
	if s.st != adding {
		if s.st == closed {
			return ErrClosed
		}
		return ErrMerged
	}
	need := uvarintLen(uint64(len(key))) + uvarintLen(uint64(len(payload))) + len(key) + len(payload)
	c := s.cur
	if c == nil || c.room() < need+entrySize {
		if err := s.grow(need + entrySize); err != nil {
			return err
		}
		c = s.cur
	}
	p := c.used
	b := c.buf[p : p+need]
	n := putUvarint(b, uint64(len(key)))
	n += putUvarint(b[n:], uint64(len(payload)))
	n += copy(b[n:], key)
	copy(b[n:], payload)
	c.used = p + need
	c.slot--
	c.ents[c.slot] = entry{prefix: prefixAt(key, 0), ts: ts, off: offset, pos: uint64(p)}
	s.memN++
	s.n++
	return nil
}

// grow makes a chunk with full free bytes current, spilling if the budget says no.
func (s *Sorter) grow(full int) error {
	if full > maxRecord {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, full)
	}
	own := (full + entrySize - 1) / entrySize * entrySize // a chunk of its own
	size, private := s.chunk, s.private
	if full > size {
		size = own
	}
	if full > private {
		private = own
	}
	for {
		if mem, ok := s.budget.tryReserve(size); ok {
			s.addChunk(size, true, mem)
			return nil
		}
		if s.memN == 0 {
			// Starved: even an empty sorter gets no chunk. Use private memory.
			s.addChunk(private, false, nil)
			return nil
		}
		if err := s.spill(); err != nil {
			return err
		}
	}
}

// addChunk makes a new chunk of size bytes current. The chunk it replaces is sorted and, when
// the sizes allow, copied into the new memory in sorted order; the old memory is then reused
// as the current chunk.
func (s *Sorter) addChunk(size int, reserved bool, mem []entry) {
	s.account(int64(size), reserved)
	nc := newChunk(size, reserved, mem)
	old := s.cur
	switch {
	case old == nil:
	case old.len() == 0:
		// Too small for the record that is coming: drop it (and give its reservation back).
		s.account(-old.size(), old.reserved)
		if old.reserved {
			s.budget.release(old.size(), old.ents)
		}
		s.chunks = s.chunks[:len(s.chunks)-1]
	default:
		old.sort(s.radix)
		if s.permute && old.size() == nc.size() && old.reserved == nc.reserved {
			old.permuteInto(nc)
			s.chunks[len(s.chunks)-1] = nc
			old.reset()
			nc = old
		}
	}
	s.chunks = append(s.chunks, nc)
	s.cur = nc
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
	mems := make([][]entry, 0, len(s.chunks))
	for _, c := range s.chunks {
		if c.reserved {
			mems = append(mems, c.ents)
		}
	}
	s.budget.release(s.reserved, mems...)
	s.reserved, s.privMem = 0, 0
	clear(s.chunks)
	s.chunks = s.chunks[:0]
	s.cur = nil
	s.memN = 0
}

// sortMemory sorts the chunks not sorted yet (the current one).
func (s *Sorter) sortMemory() {
	for _, c := range s.chunks {
		c.sort(s.radix)
	}
}

// memorySources returns one merge source per non-empty chunk, ordered after the first ones.
func (s *Sorter) memorySources(first int) []*source {
	srcs := make([]*source, 0, len(s.chunks))
	for _, c := range s.chunks {
		if c.len() > 0 {
			srcs = append(srcs, &source{order: first + len(srcs), seg: c.slots(), buf: c.buf})
		}
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
	for {
		from, k, ok := s.nextCompaction()
		if !ok {
			return nil
		}
		if err := s.compact(from, k); err != nil {
			return err
		}
	}
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
	w, err := createRun(path, s.openRun)
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
	s.written += w.size
	return nil
}

// nextCompaction picks adjacent runs to merge into one, if any are due. Nothing is merged
// while there are fewer than maxRuns/2 runs, so the usual backlog (a handful of
// budget-sized runs) is written once. Beyond that, runs are merged like tiers of an LSM
// tree: the newest maxRuns/4 runs once their sizes are within a factor 4 of each other. At
// maxRuns, a fallback picks the window (of 2 to maxRuns/2 runs) that costs the fewest bytes
// per run removed. A starved sorter spilling tiny runs thus rewrites each byte about
// log(runs)/log(maxRuns/4) times, and a merge never opens more than maxRuns files. Merging
// adjacent runs keeps exact ties in insertion order.
func (s *Sorter) nextCompaction() (from, k int, ok bool) {
	n := len(s.runs)
	f := max(s.maxRuns/4, 2)
	if n >= max(s.maxRuns/2, f) {
		lo, hi := s.runs[n-f].size, s.runs[n-f].size
		for _, r := range s.runs[n-f:] {
			lo, hi = min(lo, r.size), max(hi, r.size)
		}
		if hi <= 4*lo {
			return n - f, f, true
		}
	}
	if n < s.maxRuns {
		return 0, 0, false
	}
	var best float64
	for l := 2; l <= max(s.maxRuns/2, 2) && l <= n; l++ {
		var sum int64
		for i, r := range s.runs {
			sum += r.size
			if i >= l {
				sum -= s.runs[i-l].size
			}
			if i < l-1 {
				continue
			}
			if c := float64(sum) / float64(l-1); k == 0 || c <= best {
				best, from, k = c, i-l+1, l
			}
		}
	}
	return from, k, true
}

// compact merges runs[from:from+k] into one run at the same place.
func (s *Sorter) compact(from, k int) error {
	old := slices.Clone(s.runs[from : from+k])
	srcs, readers, err := openRuns(old, 0)
	if err != nil {
		return err
	}
	it, err := newIterator(srcs, readers)
	if err != nil {
		return err
	}
	all := s.runs
	s.runs = slices.Delete(slices.Clone(all), from, from+k)
	if err := s.writeRun(it, from); err != nil {
		s.runs = all
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
// The caller closes the iterator; Reset and Close also do. After an error, Reset the sorter.
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
	s.budget.trimIfIdle()
	var errs []error
	for _, r := range s.runs {
		if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sorter: remove run: %w", err))
		}
	}
	s.runs = s.runs[:0]
	s.spilled, s.written = 0, 0
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
	s.chunks, s.runs = nil, nil
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
