package state

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The suite runs every test over every Store implementation (nats-server's store_test.go style).

type storeKind struct {
	name string
	open func(t *testing.T) Store
}

var storeKinds = []storeKind{
	{"pebble", func(t *testing.T) Store { return openDB(t, Options{Dir: t.TempDir()}) }},
	{"mem", func(t *testing.T) Store { return NewMem() }},
}

func forEachStore(t *testing.T, test func(t *testing.T, s Store)) {
	t.Helper()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			s := k.open(t)
			test(t, s)
			if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("close: %v", err)
			}
		})
	}
}

func openDB(t testing.TB, o Options) *DB {
	t.Helper()
	d, err := Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return d
}

var (
	nsA1  = Namespace{"a", 1}
	nsA10 = Namespace{"a", 10}
	nsAB1 = Namespace{"ab", 1}
)

func mustSet(t testing.TB, s Store, ns Namespace, kvs ...string) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	for i := 0; i < len(kvs); i += 2 {
		if err := b.Set(ns, []byte(kvs[i]), []byte(kvs[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, s Store, ns Namespace, key string) (string, bool) {
	t.Helper()
	v, ok, err := s.Get(ns, []byte(key), nil)
	if err != nil {
		t.Fatalf("get %s %q: %v", ns, key, err)
	}
	return string(v), ok
}

func wantGet(t testing.TB, s Store, ns Namespace, key, want string) {
	t.Helper()
	if v, ok := get(t, s, ns, key); !ok || v != want {
		t.Fatalf("get %s %q = %q, %v; want %q", ns, key, v, ok, want)
	}
}

func wantAbsent(t testing.TB, s Store, ns Namespace, key string) {
	t.Helper()
	if v, ok := get(t, s, ns, key); ok {
		t.Fatalf("get %s %q = %q; want absent", ns, key, v)
	}
}

func offset(t testing.TB, s Store, ns Namespace) (int64, bool) {
	t.Helper()
	off, ok, err := s.Offset(ns)
	if err != nil {
		t.Fatalf("offset %s: %v", ns, err)
	}
	return off, ok
}

func wantOffset(t testing.TB, s Store, ns Namespace, want int64) {
	t.Helper()
	if off, ok := offset(t, s, ns); !ok || off != want {
		t.Fatalf("offset %s = %d, %v; want %d", ns, off, ok, want)
	}
}

func wantNoOffset(t testing.TB, s Store, ns Namespace) {
	t.Helper()
	if off, ok := offset(t, s, ns); ok {
		t.Fatalf("offset %s = %d; want none", ns, off)
	}
}

// scan returns ns as "k=v" lines, read with Scan; NewIter must read the same.
func scan(t testing.TB, s Store, ns Namespace) []string {
	t.Helper()
	var out []string
	err := s.Scan(ns, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", ns, err)
	}
	it, err := s.NewIter(ns)
	if err != nil {
		t.Fatalf("iter %s: %v", ns, err)
	}
	var iter []string
	for it.Next() {
		iter = append(iter, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatalf("iter %s: %v", ns, err)
	}
	if !slices.Equal(out, iter) {
		t.Fatalf("%s: Scan read %q, NewIter %q", ns, out, iter)
	}
	return out
}

func wantScan(t testing.TB, s Store, ns Namespace, want ...string) {
	t.Helper()
	if got := scan(t, s, ns); !slices.Equal(got, want) {
		t.Fatalf("scan %s = %q; want %q", ns, got, want)
	}
}

func TestGetSetDelete(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		wantAbsent(t, s, nsA1, "k")
		mustSet(t, s, nsA1, "k", "v1", "empty", "")
		wantGet(t, s, nsA1, "k", "v1")
		wantGet(t, s, nsA1, "empty", "")
		mustSet(t, s, nsA1, "k", "v2")
		wantGet(t, s, nsA1, "k", "v2")

		// Get appends to dst; the caller owns the result.
		dst := []byte("prefix:")
		v, ok, err := s.Get(nsA1, []byte("k"), dst)
		if err != nil || !ok || string(v) != "prefix:v2" {
			t.Fatalf("get with dst = %q, %v, %v", v, ok, err)
		}
		v[len(v)-1] = 'X'
		wantGet(t, s, nsA1, "k", "v2")
		// A miss returns dst unchanged.
		v, ok, err = s.Get(nsA1, []byte("nope"), dst[:3])
		if err != nil || ok || string(v) != "pre" {
			t.Fatalf("get miss = %q, %v, %v", v, ok, err)
		}

		// Set copies its arguments.
		key, val := []byte("c"), []byte("orig")
		b := s.NewBatch()
		if err := b.Set(nsA1, key, val); err != nil {
			t.Fatal(err)
		}
		key[0], val[0] = 'z', 'z'
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		wantGet(t, s, nsA1, "c", "orig")
		wantAbsent(t, s, nsA1, "z")

		b = s.NewBatch()
		if err := b.Delete(nsA1, []byte("k")); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(nsA1, []byte("never-set")); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		wantAbsent(t, s, nsA1, "k")
		wantScan(t, s, nsA1, "c=orig", "empty=")
	})
}

func TestOffsetsBesideState(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		wantNoOffset(t, s, nsA1)
		b := s.NewBatch()
		for _, op := range []error{
			b.Set(nsA1, []byte("k"), []byte("v")),
			b.SetOffset(nsA1, 42),
			b.SetOffset(nsA10, 7),
			b.SetOffset(nsA10, 0), // the later offset wins
		} {
			if op != nil {
				t.Fatal(op)
			}
		}
		if b.Len() != 4 {
			t.Fatalf("Len = %d, want 4", b.Len())
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		wantOffset(t, s, nsA1, 42)
		wantOffset(t, s, nsA10, 0)
		wantNoOffset(t, s, nsAB1)
		// The offset is not a state key.
		wantScan(t, s, nsA1, "k=v")
		wantScan(t, s, nsA10)

		b = s.NewBatch()
		defer b.Close()
		if err := b.SetOffset(nsA1, -1); !errors.Is(err, ErrOffset) {
			t.Fatalf("SetOffset(-1) = %v, want ErrOffset", err)
		}
		if b.Len() != 0 {
			t.Fatalf("Len after a rejected op = %d", b.Len())
		}
	})
}

func TestBatchAtomicity(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		mustSet(t, s, nsA1, "k", "old")
		b := s.NewBatch()
		if err := b.Set(nsA1, []byte("k"), []byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(nsA10, []byte("x"), []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := b.SetOffset(nsA1, 5); err != nil {
			t.Fatal(err)
		}
		// Uncommitted: invisible.
		wantGet(t, s, nsA1, "k", "old")
		wantAbsent(t, s, nsA10, "x")
		wantNoOffset(t, s, nsA1)
		b.Close()
		// Discarded: still invisible, and finished.
		wantGet(t, s, nsA1, "k", "old")
		wantNoOffset(t, s, nsA1)
		if err := b.Commit(); !errors.Is(err, ErrFinished) {
			t.Fatalf("Commit after Close = %v, want ErrFinished", err)
		}

		b = s.NewBatch()
		if err := b.Set(nsA1, []byte("k"), []byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(nsA1, []byte("k")); err != nil { // in-order: the delete wins
			t.Fatal(err)
		}
		if err := b.Set(nsA10, []byte("x"), []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := b.SetOffset(nsA1, 5); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close() // no-op after Commit
		wantAbsent(t, s, nsA1, "k")
		wantGet(t, s, nsA10, "x", "1")
		wantOffset(t, s, nsA1, 5)
		for name, err := range map[string]error{
			"Set":       b.Set(nsA1, []byte("k"), nil),
			"Delete":    b.Delete(nsA1, []byte("k")),
			"SetOffset": b.SetOffset(nsA1, 1),
			"Commit":    b.Commit(),
		} {
			if !errors.Is(err, ErrFinished) {
				t.Errorf("%s after Commit = %v, want ErrFinished", name, err)
			}
		}
		// An empty batch commits.
		b = s.NewBatch()
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLoaderOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		l, err := s.NewLoader(nsA1)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Abort()
		for _, k := range []string{"", "a", "a\x00", "b"} {
			if err := l.Add([]byte(k), []byte("v"+k)); err != nil {
				t.Fatalf("Add(%q): %v", k, err)
			}
		}
		for _, k := range []string{"b", "a", ""} {
			if err := l.Add([]byte(k), nil); !errors.Is(err, ErrKeyOrder) {
				t.Fatalf("Add(%q) after b = %v, want ErrKeyOrder", k, err)
			}
		}
		// A rejected key leaves the loader usable.
		if err := l.Add([]byte("c"), []byte("vc")); err != nil {
			t.Fatal(err)
		}
		wantScan(t, s, nsA1) // nothing visible before Commit
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		wantScan(t, s, nsA1, "=v", "a=va", "a\x00=va\x00", "b=vb", "c=vc")
		wantNoOffset(t, s, nsA1) // no SetOffset: unchanged
		if err := l.Add([]byte("d"), nil); !errors.Is(err, ErrFinished) {
			t.Fatalf("Add after Commit = %v, want ErrFinished", err)
		}
		if err := l.Commit(); !errors.Is(err, ErrFinished) {
			t.Fatalf("Commit after Commit = %v, want ErrFinished", err)
		}
		if err := l.Abort(); err != nil {
			t.Fatalf("Abort after Commit = %v, want nil", err)
		}
	})
}

func TestLoaderOffset(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		// Existing state: some keys the load overwrites, some it does not mention.
		b := s.NewBatch()
		for _, kv := range [][2]string{{"k0000", "old"}, {"k0500", "old"}, {"zz", "keep"}} {
			if err := b.Set(nsA1, []byte(kv[0]), []byte(kv[1])); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.SetOffset(nsA1, 10); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		mustSet(t, s, nsA10, "k0000", "other-ns")

		l, err := s.NewLoader(nsA1)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1000
		for i := range n {
			if err := l.Add(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		l.SetOffset(99)
		l.SetOffset(100) // the last one wins
		wantOffset(t, s, nsA1, 10)
		wantGet(t, s, nsA1, "k0000", "old")
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		wantOffset(t, s, nsA1, 100)
		wantGet(t, s, nsA1, "k0000", "v0")
		wantGet(t, s, nsA1, "k0500", "v500")
		wantGet(t, s, nsA1, "k0999", "v999")
		wantGet(t, s, nsA1, "zz", "keep")
		if got := len(scan(t, s, nsA1)); got != n+1 {
			t.Fatalf("scan has %d keys, want %d", got, n+1)
		}
		wantScan(t, s, nsA10, "k0000=other-ns")
		wantNoOffset(t, s, nsA10)

		// An offset-only load.
		l, err = s.NewLoader(nsA10)
		if err != nil {
			t.Fatal(err)
		}
		l.SetOffset(3)
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		wantOffset(t, s, nsA10, 3)
		wantScan(t, s, nsA10, "k0000=other-ns")

		// An aborted load leaves nothing.
		l, err = s.NewLoader(nsA1)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Add([]byte("k0000"), []byte("aborted")); err != nil {
			t.Fatal(err)
		}
		l.SetOffset(1000)
		if err := l.Abort(); err != nil {
			t.Fatal(err)
		}
		wantGet(t, s, nsA1, "k0000", "v0")
		wantOffset(t, s, nsA1, 100)

		// A negative offset fails the commit and loads nothing.
		l, err = s.NewLoader(nsA1)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Add([]byte("k0000"), []byte("bad")); err != nil {
			t.Fatal(err)
		}
		l.SetOffset(-5)
		if err := l.Commit(); !errors.Is(err, ErrOffset) {
			t.Fatalf("Commit with offset -5 = %v, want ErrOffset", err)
		}
		wantGet(t, s, nsA1, "k0000", "v0")
		wantOffset(t, s, nsA1, 100)
		if d, ok := s.(*DB); ok {
			names, err := d.fs.List(d.ingestDir)
			if err != nil || len(names) != 0 {
				t.Fatalf("ingest dir holds %q (%v); want empty", names, err)
			}
		}
	})
}

func TestDrop(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		for _, ns := range []Namespace{nsA1, nsA10, nsAB1} {
			b := s.NewBatch()
			for _, k := range []string{"", "a", "b", "\xff\xff"} {
				if err := b.Set(ns, []byte(k), []byte(ns.String())); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.SetOffset(ns, int64(ns.Partition)); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Drop(nsA1); err != nil {
			t.Fatal(err)
		}
		wantScan(t, s, nsA1)
		wantNoOffset(t, s, nsA1)
		wantAbsent(t, s, nsA1, "a")
		for _, ns := range []Namespace{nsA10, nsAB1} {
			wantScan(t, s, ns, "="+ns.String(), "a="+ns.String(), "b="+ns.String(), "\xff\xff="+ns.String())
			wantOffset(t, s, ns, int64(ns.Partition))
		}
		// Dropping an empty namespace is fine; the namespace is reusable.
		if err := s.Drop(Namespace{"never", 0}); err != nil {
			t.Fatal(err)
		}
		mustSet(t, s, nsA1, "new", "1")
		wantScan(t, s, nsA1, "new=1")
		wantNoOffset(t, s, nsA1)
	})
}

func TestScanOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		rng := rand.New(rand.NewPCG(1, 2))
		want := map[string]string{"": "empty", "\x00": "zero", "\xff": "ff"}
		for range 500 {
			k := make([]byte, rng.IntN(6))
			for i := range k {
				k[i] = byte(rng.IntN(4)) * 0x55 // 0x00, 0x55, 0xaa, 0xff: many shared prefixes
			}
			want[string(k)] = fmt.Sprint(rng.Int())
		}
		keys := make([]string, 0, len(want))
		b := s.NewBatch()
		for k, v := range want {
			keys = append(keys, k)
			if err := b.Set(nsA1, []byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		sort.Strings(keys)
		var wantLines []string
		for _, k := range keys {
			wantLines = append(wantLines, k+"="+want[k])
		}
		wantScan(t, s, nsA1, wantLines...)

		// An error from fn stops the scan and is returned as is.
		stop := errors.New("stop")
		n := 0
		err := s.Scan(nsA1, func(k, v []byte) error {
			n++
			if n == 3 {
				return stop
			}
			return nil
		})
		if err != stop || n != 3 {
			t.Fatalf("Scan = %v after %d calls; want stop after 3", err, n)
		}
		// fn may read the store.
		err = s.Scan(nsA1, func(k, v []byte) error {
			got, ok, err := s.Get(nsA1, k, nil)
			if err != nil || !ok || !bytes.Equal(got, v) {
				return fmt.Errorf("get %q in scan = %q, %v, %v", k, got, ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestNamespaceIsolation(t *testing.T) {
	spaces := []Namespace{
		{"a", 1}, {"a", 10}, {"a", 256}, {"a", 0}, {"ab", 1}, {"b", 1}, {"a\x01", 1},
		{"a", 1<<31 - 1}, {"\xff", 0},
	}
	forEachStore(t, func(t *testing.T, s Store) {
		b := s.NewBatch()
		for i, ns := range spaces {
			for _, k := range []string{"", "k", "\x00\x00\x00\x01s"} {
				if err := b.Set(ns, []byte(k), []byte(ns.String())); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.SetOffset(ns, int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		for i, ns := range spaces {
			v := ns.String()
			wantScan(t, s, ns, "="+v, "\x00\x00\x00\x01s="+v, "k="+v)
			wantOffset(t, s, ns, int64(i))
		}
		if err := s.Drop(Namespace{"a", 1}); err != nil {
			t.Fatal(err)
		}
		for i, ns := range spaces[1:] {
			wantOffset(t, s, ns, int64(i+1))
			if got := len(scan(t, s, ns)); got != 3 {
				t.Fatalf("%s has %d keys after dropping a/1", ns, got)
			}
		}
	})
}

// TestNamespaces: every namespace holding a key or an offset, in key order (operator bytes,
// then partition), whatever wrote it (batch, loader); emptied and dropped ones are gone.
func TestNamespaces(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		wantNamespaces(t, s)
		spaces := []Namespace{{"a", 1<<31 - 1}, {"a", 256}, {"ab", 1}, {"a", 0}, {"a#pending", 3}, {"a", 1}, {"\xff", 0}}
		for _, ns := range spaces {
			mustSet(t, s, ns, "k", "v", "\xff\xff", "v")
		}
		b := s.NewBatch()
		must(t, b.SetOffset(Namespace{"b", 7}, 5), b.Commit()) // an offset and no key
		ld, err := s.NewLoader(Namespace{"c", 2})
		must(t, err, ld.Add([]byte("k"), []byte("v")), ld.Commit())
		mustSet(t, s, Namespace{"d", 0}, "k", "v") // emptied below: not listed
		b = s.NewBatch()
		must(t, b.Delete(Namespace{"d", 0}, []byte("k")), b.Commit())
		wantNamespaces(t, s, Namespace{"a", 0}, Namespace{"a", 1}, Namespace{"a", 256}, Namespace{"a", 1<<31 - 1},
			Namespace{"a#pending", 3}, Namespace{"ab", 1}, Namespace{"b", 7}, Namespace{"c", 2}, Namespace{"\xff", 0})
		must(t, s.Drop(Namespace{"a", 256}), s.Drop(Namespace{"b", 7}), s.Drop(Namespace{"\xff", 0}))
		wantNamespaces(t, s, Namespace{"a", 0}, Namespace{"a", 1}, Namespace{"a", 1<<31 - 1},
			Namespace{"a#pending", 3}, Namespace{"ab", 1}, Namespace{"c", 2})
	})
}

func wantNamespaces(t testing.TB, s Store, want ...Namespace) {
	t.Helper()
	got, err := s.Namespaces()
	if err != nil {
		t.Fatalf("Namespaces: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Namespaces = %v; want %v", got, want)
	}
}

func TestInvalidNamespace(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		for _, ns := range []Namespace{{"", 0}, {"a\x00b", 0}, {"a", -1}} {
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrNamespace) {
					t.Errorf("%s(%q) = %v, want ErrNamespace", what, ns, err)
				}
			}
			_, _, err := s.Get(ns, nil, nil)
			check("Get", err)
			_, _, err = s.Offset(ns)
			check("Offset", err)
			_, err = s.NewLoader(ns)
			check("NewLoader", err)
			check("Drop", s.Drop(ns))
			check("Scan", s.Scan(ns, func(k, v []byte) error { return nil }))
			b := s.NewBatch()
			check("Set", b.Set(ns, nil, nil))
			check("Delete", b.Delete(ns, nil))
			check("SetOffset", b.SetOffset(ns, 1))
			b.Close()
		}
	})
}

func TestClosed(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		mustSet(t, s, nsA1, "k", "v")
		pending := s.NewBatch()
		if err := pending.Set(nsA1, []byte("k"), []byte("late")); err != nil {
			t.Fatal(err)
		}
		l, err := s.NewLoader(nsA1)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Add([]byte("k"), []byte("late")); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close = %v, want ErrClosed", what, err)
			}
		}
		_, _, err = s.Get(nsA1, []byte("k"), nil)
		check("Get", err)
		_, _, err = s.Offset(nsA1)
		check("Offset", err)
		_, err = s.NewLoader(nsA1)
		check("NewLoader", err)
		check("Drop", s.Drop(nsA1))
		check("Scan", s.Scan(nsA1, func(k, v []byte) error { return nil }))
		_, err = s.NewIter(nsA1)
		check("NewIter", err)
		_, err = s.Namespaces()
		check("Namespaces", err)
		check("Batch.Commit", pending.Commit())
		b := s.NewBatch()
		check("empty Batch.Commit", b.Commit())
		check("Loader.Commit", l.Commit())
		check("Close", s.Close())
	})
}

func TestConcurrentTasks(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		const tasks, rounds, keys = 4, 20, 50
		var wg sync.WaitGroup
		errs := make(chan error, tasks)
		for p := range tasks {
			wg.Go(func() {
				ns := Namespace{"op", int32(p)}
				for r := range rounds {
					b := s.NewBatch()
					for k := range keys {
						if err := b.Set(ns, fmt.Appendf(nil, "k%02d", k), fmt.Appendf(nil, "%d", r)); err != nil {
							errs <- err
							return
						}
					}
					if err := b.SetOffset(ns, int64(r)); err != nil {
						errs <- err
						return
					}
					if err := b.Commit(); err != nil {
						errs <- err
						return
					}
					// Each task sees its own writes, all of them.
					v, ok, err := s.Get(ns, []byte("k07"), nil)
					if err != nil || !ok || string(v) != fmt.Sprint(r) {
						errs <- fmt.Errorf("%s round %d: get = %q, %v, %v", ns, r, v, ok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for p := range tasks {
			ns := Namespace{"op", int32(p)}
			wantOffset(t, s, ns, rounds-1)
			if got := len(scan(t, s, ns)); got != keys {
				t.Fatalf("%s has %d keys", ns, got)
			}
		}
	})
}

// TestReopen (Pebble only): data and offsets, from batches and loaders, survive Close and Open;
// leftover loader files are removed.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, Options{Dir: dir})
	b := d.NewBatch()
	for _, op := range []error{
		b.Set(nsA1, []byte("k"), []byte("v")),
		b.SetOffset(nsA1, 11),
		b.Set(nsA10, []byte("gone"), []byte("v")),
	} {
		if op != nil {
			t.Fatal(op)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := d.Drop(nsA10); err != nil {
		t.Fatal(err)
	}
	l, err := d.NewLoader(nsAB1)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x", "y"} {
		if err := l.Add([]byte(k), []byte("loaded")); err != nil {
			t.Fatal(err)
		}
	}
	l.SetOffset(22)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	// A load in flight when the process stops leaves a file behind.
	l, err = d.NewLoader(nsA1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add([]byte("k"), []byte("never")); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := d.fs.List(d.ingestDir); len(names) != 1 {
		t.Fatalf("ingest dir before reopen holds %q; want the abandoned load", names)
	}

	d = openDB(t, Options{Dir: dir, Sync: true})
	defer d.Close()
	if names, _ := d.fs.List(d.ingestDir); len(names) != 0 {
		t.Fatalf("ingest dir after reopen holds %q; want empty", names)
	}
	wantScan(t, d, nsA1, "k=v")
	wantOffset(t, d, nsA1, 11)
	wantScan(t, d, nsA10)
	wantNoOffset(t, d, nsA10)
	wantScan(t, d, nsAB1, "x=loaded", "y=loaded")
	wantOffset(t, d, nsAB1, 22)
}

// TestLoaderManyFiles (Pebble only): a load larger than loaderFileSize spans several sstables,
// committed together; an abort removes all of them.
func TestLoaderManyFiles(t *testing.T) {
	d := openDB(t, Options{Dir: t.TempDir()})
	defer d.Close()
	d.loaderFileSize = 4 << 10
	load := func(n int, off int64) *dbLoader {
		l, err := d.NewLoader(nsA1)
		must(t, err)
		for i := range n {
			must(t, l.Add(fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%d-%d", off, i)))
		}
		l.SetOffset(off)
		return l.(*dbLoader)
	}
	l := load(5000, 1)
	if len(l.paths) < 3 {
		t.Fatalf("load of 5000 keys wrote %d files; want several", len(l.paths))
	}
	must(t, l.Commit())
	wantOffset(t, d, nsA1, 1)
	keys := scan(t, d, nsA1)
	if len(keys) != 5000 || keys[0] != "k00000=v1-0" || keys[4999] != "k04999=v1-4999" {
		t.Fatalf("scan has %d keys, first %q", len(keys), keys[0])
	}

	l = load(5000, 2)
	must(t, l.Abort())
	if names, _ := d.fs.List(d.ingestDir); len(names) != 0 {
		t.Fatalf("ingest dir after abort holds %q", names)
	}
	wantOffset(t, d, nsA1, 1)
	wantGet(t, d, nsA1, "k04999", "v1-4999")
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(Options{}); err == nil {
		t.Fatal("Open with no Dir succeeded")
	}
	dir := t.TempDir()
	d := openDB(t, Options{Dir: dir})
	defer d.Close()
	// Pebble's lock: a second Open of the same dir fails and names the dir.
	_, err := Open(Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open = %v; want an error naming %s", err, dir)
	}
}

func TestFormatVersion(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, Options{Dir: dir})
	if err := d.db.Set(formatKey, []byte("99"), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of format 99 = %v, want ErrCorrupt", err)
	}
}

// TestEquivalence is metamorphic: random batches, loads and drops applied to Pebble and to the
// model give the same state and offsets, including across a Pebble reopen.
func TestEquivalence(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			// An in-memory file system keeps the many loads (each with fsyncs) fast.
			fs, dir := vfs.NewMem(), "/state"
			d := openDB(t, Options{Dir: dir, FS: fs})
			m := NewMem()
			spaces := []Namespace{nsA1, nsA10, nsAB1, {"b", 0}}
			randKey := func() []byte { return fmt.Appendf(nil, "k%03d", rng.IntN(200)) }
			compare := func(step int) {
				t.Helper()
				a, err := d.Namespaces()
				must(t, err)
				b, err := m.Namespaces()
				must(t, err)
				if !slices.Equal(a, b) {
					t.Fatalf("step %d: namespaces: pebble %v, model %v", step, a, b)
				}
				for _, ns := range spaces {
					if a, b := scan(t, d, ns), scan(t, m, ns); !slices.Equal(a, b) {
						t.Fatalf("step %d: %s: pebble %q, model %q", step, ns, a, b)
					}
					ao, aok := offset(t, d, ns)
					bo, bok := offset(t, m, ns)
					if ao != bo || aok != bok {
						t.Fatalf("step %d: %s: offsets pebble %d,%v model %d,%v", step, ns, ao, aok, bo, bok)
					}
				}
			}
			for step := range 200 {
				switch r := rng.IntN(20); {
				case r < 14: // a batch over random namespaces
					bd, bm := d.NewBatch(), m.NewBatch()
					for range rng.IntN(30) {
						ns := spaces[rng.IntN(len(spaces))]
						k := randKey()
						switch rng.IntN(4) {
						case 0:
							must(t, bd.Delete(ns, k), bm.Delete(ns, k))
						case 1:
							off := rng.Int64N(1000)
							must(t, bd.SetOffset(ns, off), bm.SetOffset(ns, off))
						default:
							v := fmt.Appendf(nil, "v%d", rng.Int())
							must(t, bd.Set(ns, k, v), bm.Set(ns, k, v))
						}
					}
					if rng.IntN(10) == 0 {
						bd.Close()
						bm.Close()
					} else {
						must(t, bd.Commit(), bm.Commit())
					}
				case r < 18: // a load
					ns := spaces[rng.IntN(len(spaces))]
					ld, err := d.NewLoader(ns)
					must(t, err)
					lm, err := m.NewLoader(ns)
					must(t, err)
					for k := rng.IntN(5); k < 200; k += 1 + rng.IntN(10) {
						key, v := fmt.Appendf(nil, "k%03d", k), fmt.Appendf(nil, "l%d", rng.Int())
						must(t, ld.Add(key, v), lm.Add(key, v))
					}
					if rng.IntN(2) == 0 {
						off := rng.Int64N(1000)
						ld.SetOffset(off)
						lm.SetOffset(off)
					}
					if rng.IntN(8) == 0 {
						must(t, ld.Abort(), lm.Abort())
					} else {
						must(t, ld.Commit(), lm.Commit())
					}
				case r < 19:
					ns := spaces[rng.IntN(len(spaces))]
					must(t, d.Drop(ns), m.Drop(ns))
				default:
					must(t, d.Close())
					d = openDB(t, Options{Dir: dir, FS: fs})
				}
				if step%20 == 0 {
					compare(step)
				}
			}
			compare(200)
			must(t, d.Close(), m.Close())
		})
	}
}

func must(t testing.TB, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
