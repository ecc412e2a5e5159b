package sorter

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// writeTestRun writes entries (in the given order) to a run file and returns its bytes.
func writeTestRun(t testing.TB, path string, es []testEntry) []byte {
	t.Helper()
	w, err := createRun(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := w.add(e.key, e.ts, e.off, e.payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readTestRun reads a run file fully.
func readTestRun(path string) ([]testEntry, error) {
	r, err := openRun(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.close() }()
	return readAll(r)
}

// readTestRunBytes reads a run image from memory.
func readTestRunBytes(data []byte) ([]testEntry, error) {
	r, err := newRunReader(bytes.NewReader(data), int64(len(data)), "mem")
	if err != nil {
		return nil, err
	}
	return readAll(r)
}

func readAll(r *runReader) ([]testEntry, error) {
	var out []testEntry
	var src source
	for {
		ok, err := r.next(&src)
		if err != nil {
			return out, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, testEntry{
			key: bytes.Clone(src.key), payload: bytes.Clone(src.payload), ts: src.ts, off: src.off,
		})
	}
}

func TestRunRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for i, es := range [][]testEntry{
		nil,
		{{key: nil, payload: nil, ts: -1 << 63, off: -1}},
		{{key: []byte("k"), payload: bytes.Repeat([]byte("x"), 3*blockTarget), ts: 1 << 62, off: 1 << 62}},
		randomEntries(newRand(1), 5000), // several blocks
	} {
		p := filepath.Join(dir, "run-"+string(rune('a'+i))+".sort")
		writeTestRun(t, p, es)
		got, err := readTestRun(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(es) {
			t.Fatalf("case %d: %d entries, want %d", i, len(got), len(es))
		}
		for j := range es {
			g, w := got[j], es[j]
			if !bytes.Equal(g.key, w.key) || !bytes.Equal(g.payload, w.payload) || g.ts != w.ts || g.off != w.off {
				t.Fatalf("case %d entry %d differs", i, j)
			}
		}
	}
}

// TestRunEveryByteFlip flips each byte of a small run image in turn: every damage is reported as
// ErrCorrupt, and no wrong entry is ever returned.
func TestRunEveryByteFlip(t *testing.T) {
	dir := t.TempDir()
	es := randomEntries(newRand(2), 40)
	p := filepath.Join(dir, "run-0.sort")
	data := writeTestRun(t, p, es)
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		got, err := readTestRunBytes(bad)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d: err = %v", i, err)
		}
		for j, g := range got {
			w := es[j]
			if !bytes.Equal(g.key, w.key) || !bytes.Equal(g.payload, w.payload) || g.ts != w.ts || g.off != w.off {
				t.Fatalf("byte %d: wrong entry %d returned", i, j)
			}
		}
	}
}

// FuzzRunReader feeds arbitrary bytes to the run decoder: it must return entries or an
// error, never panic or hang.
func FuzzRunReader(f *testing.F) {
	dir := f.TempDir()
	for i, n := range []int{0, 1, 30} {
		p := filepath.Join(dir, "seed"+string(rune('0'+i)))
		f.Add(writeTestRun(f, p, randomEntries(newRand(uint64(i)), n)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readTestRunBytes(data)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not ErrCorrupt: %v", err)
		}
		if len(got) > len(data) {
			t.Fatalf("%d entries from %d bytes", len(got), len(data))
		}
	})
}
