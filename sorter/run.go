package sorter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// Run file format (version 1), all integers little-endian unless varint:
//
//	file    = header block* trailer
//	header  = magic "slsr" | version uint32
//	block   = crc uint32 | len uint32 | count uint32 | payload[len]   (count > 0)
//	trailer = crc uint32 | len=16 uint32 | count=0 uint32 | entries uint64 | blocks uint64
//	payload = entry*
//	entry   = uvarint(len(key)) key | varint(ts) | uvarint(uint64(offset)) | uvarint(len(payload)) payload
//
// crc is the CRC-32C (Castagnoli) of len, count and payload. Blocks hold whole entries and
// are cut after ~64 KiB; the trailer makes truncation detectable.

const (
	runMagic     = "slsr"
	runVersion   = 1
	headerSize   = 8
	blockHdrSize = 12
	trailerLen   = 16
	blockTarget  = 64 << 10
	// maxBlockLen bounds a block read from disk (one entry larger than this cannot be spilled).
	maxBlockLen = 1 << 31
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every error about a damaged run file; the message names the file
// and the block.
var ErrCorrupt = errors.New("sorter: corrupt run file")

// runWriter writes one run file. Each block is built in memory and written with one call,
// so the block buffer is the write buffer.
type runWriter struct {
	f       *os.File
	path    string
	buf     []byte // block header space + payload being built
	count   uint32
	entries int64
	blocks  int64
	size    int64
}

// createRun creates the run file path. open, if not nil, replaces the file's creation (tests
// inject write faults: /dev/full).
func createRun(path string, open func(string) (*os.File, error)) (*runWriter, error) {
	if open == nil {
		open = func(p string) (*os.File, error) { return os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644) }
	}
	f, err := open(path)
	if err != nil {
		return nil, fmt.Errorf("sorter: create run: %w", err)
	}
	w := &runWriter{f: f, path: path, buf: make([]byte, blockHdrSize, blockTarget+4096)}
	var hdr [headerSize]byte
	copy(hdr[:], runMagic)
	binary.LittleEndian.PutUint32(hdr[4:], runVersion)
	if _, err := f.Write(hdr[:]); err != nil {
		w.abort()
		return nil, fmt.Errorf("sorter: write run %s: %w", path, err)
	}
	w.size = headerSize
	return w, nil
}

func (w *runWriter) add(key []byte, ts, off int64, payload []byte) error {
	b := binary.AppendUvarint(w.buf, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendVarint(b, ts)
	b = binary.AppendUvarint(b, uint64(off))
	b = binary.AppendUvarint(b, uint64(len(payload)))
	b = append(b, payload...)
	w.buf = b
	w.count++
	w.entries++
	if len(b)-blockHdrSize >= blockTarget {
		return w.flush()
	}
	return nil
}

// flush writes the pending block (count may be 0 only for the trailer).
func (w *runWriter) flush() error {
	b := w.buf
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-blockHdrSize))
	binary.LittleEndian.PutUint32(b[8:], w.count)
	binary.LittleEndian.PutUint32(b[0:], crc32.Checksum(b[4:], castagnoli))
	if _, err := w.f.Write(b); err != nil {
		return fmt.Errorf("sorter: write run %s: %w", w.path, err)
	}
	w.size += int64(len(b))
	w.blocks++
	w.count = 0
	w.buf = b[:blockHdrSize]
	return nil
}

// finish writes the last block and the trailer and closes the file.
func (w *runWriter) finish() error {
	if w.count > 0 {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.buf = binary.LittleEndian.AppendUint64(w.buf[:blockHdrSize], uint64(w.entries))
	w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(w.blocks))
	blocks := w.blocks
	if err := w.flush(); err != nil {
		return err
	}
	w.blocks = blocks
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("sorter: close run %s: %w", w.path, err)
	}
	w.f = nil
	return nil
}

// abort closes and removes a partly written run.
func (w *runWriter) abort() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
	_ = os.Remove(w.path)
}

// runReader streams the entries of one run file, holding one block in memory.
type runReader struct {
	rd       io.Reader
	f        *os.File // nil when reading from memory (tests)
	path     string
	size     int64
	hdr      [blockHdrSize]byte
	buf      []byte // current block payload
	p        int    // read position in buf
	left     uint32 // entries left in the current block
	block    int64  // index of the current block
	blockOff int64  // file offset of the current block
	nextOff  int64  // file offset of the next block
	entries  int64  // entries decoded so far
	done     bool
}

func openRun(path string) (*runReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sorter: open run: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sorter: stat run %s: %w", path, err)
	}
	r, err := newRunReader(f, fi.Size(), path)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	r.f = f
	return r, nil
}

// newRunReader reads a run of the given size from rd; path names it in errors.
func newRunReader(rd io.Reader, size int64, path string) (*runReader, error) {
	r := &runReader{rd: rd, path: path, size: size, block: -1}
	var hdr [headerSize]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: %s: short header: %v", ErrCorrupt, path, err)
	}
	if string(hdr[:4]) != runMagic {
		return nil, fmt.Errorf("%w: %s: bad magic %q", ErrCorrupt, path, hdr[:4])
	}
	if v := binary.LittleEndian.Uint32(hdr[4:]); v != runVersion {
		return nil, fmt.Errorf("%w: %s: unsupported version %d", ErrCorrupt, path, v)
	}
	r.nextOff = headerSize
	return r, nil
}

func (r *runReader) close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

func (r *runReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s block %d (offset %d): %s", ErrCorrupt, r.path, r.block, r.blockOff,
		fmt.Sprintf(format, args...))
}

// loadBlock reads the next block; at the trailer it verifies the totals and sets done.
func (r *runReader) loadBlock() error {
	r.block++
	r.blockOff = r.nextOff
	if _, err := io.ReadFull(r.rd, r.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return r.corrupt("truncated (no trailer)")
		}
		return fmt.Errorf("sorter: read run %s: %w", r.path, err)
	}
	n := int64(binary.LittleEndian.Uint32(r.hdr[4:]))
	count := binary.LittleEndian.Uint32(r.hdr[8:])
	if n > maxBlockLen || r.blockOff+blockHdrSize+n > r.size {
		return r.corrupt("block length %d beyond end of file", n)
	}
	if int64(cap(r.buf)) < n {
		r.buf = make([]byte, n, max(n, min(blockTarget+4096, r.size)))
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.rd, r.buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return r.corrupt("truncated block")
		}
		return fmt.Errorf("sorter: read run %s: %w", r.path, err)
	}
	crc := crc32.Update(crc32.Checksum(r.hdr[4:], castagnoli), castagnoli, r.buf)
	if crc != binary.LittleEndian.Uint32(r.hdr[0:]) {
		return r.corrupt("checksum mismatch")
	}
	r.nextOff = r.blockOff + blockHdrSize + n
	r.p = 0
	r.left = count
	if count > 0 {
		return nil
	}
	// Trailer.
	if n != trailerLen {
		return r.corrupt("bad trailer length %d", n)
	}
	entries := int64(binary.LittleEndian.Uint64(r.buf))
	blocks := int64(binary.LittleEndian.Uint64(r.buf[8:]))
	if entries != r.entries || blocks != r.block {
		return r.corrupt("trailer says %d entries in %d blocks, read %d in %d", entries, blocks, r.entries, r.block)
	}
	if r.nextOff != r.size {
		return r.corrupt("%d bytes after trailer", r.size-r.nextOff)
	}
	r.done = true
	return nil
}

// next decodes the next entry into src. The slices alias the block buffer.
func (r *runReader) next(src *source) (bool, error) {
	for r.left == 0 {
		if r.done {
			return false, nil
		}
		if err := r.loadBlock(); err != nil {
			return false, err
		}
		if r.done {
			return false, nil
		}
	}
	b := r.buf[r.p:]
	kl, n := binary.Uvarint(b)
	if n <= 0 || kl > uint64(len(b)-n) {
		return false, r.corrupt("bad key length")
	}
	b = b[n:]
	src.key = b[:kl:kl]
	b = b[kl:]
	ts, n := binary.Varint(b)
	if n <= 0 {
		return false, r.corrupt("bad time")
	}
	b = b[n:]
	off, n := binary.Uvarint(b)
	if n <= 0 {
		return false, r.corrupt("bad offset")
	}
	b = b[n:]
	pl, n := binary.Uvarint(b)
	if n <= 0 || pl > uint64(len(b)-n) {
		return false, r.corrupt("bad payload length")
	}
	b = b[n:]
	src.payload = b[:pl:pl]
	src.ts = ts
	src.off = int64(off)
	r.p = len(r.buf) - len(b) + int(pl)
	r.left--
	r.entries++
	if r.left == 0 && r.p != len(r.buf) {
		return false, r.corrupt("%d bytes after the last entry", len(r.buf)-r.p)
	}
	return true, nil
}
