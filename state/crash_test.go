package state

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCrash runs random NoSync batches, loads and drops over two namespaces on a crashable
// in-memory file system, takes a crash image at a random point (keeping a random share of the
// unsynced writes), reopens it, and demands that each namespace holds exactly the state that its
// stored offset was written with: older is fine, mixed never. Every write carries a fresh offset,
// so an offset names one state. A committed load is durable, so after it the namespace is at
// least that new.
func TestCrash(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashOnce(t, seed) })
	}
}

func crashOnce(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewCrashableMem()
	d := openDB(t, Options{Dir: "/state", FS: fs})
	d.loaderFileSize = 512 // with tiny blocks, loads span several sstables, ingested together
	d.sstOpts.BlockSize = 64
	spaces := []Namespace{{"x", 0}, {"x", 1}}

	model := NewMem() // the state each namespace should hold right now
	defer model.Close()
	// history[ns][offset] is the scan of ns when offset was written; noOffset is the state
	// before any write and after a drop (always empty here).
	history := map[Namespace]map[int64]string{}
	durable := map[Namespace]int64{} // offset of the last committed load
	dropped := map[Namespace]bool{}  // a drop followed that load
	for _, ns := range spaces {
		history[ns] = map[int64]string{}
		durable[ns] = -1
	}
	record := func(ns Namespace, off int64) {
		history[ns][off] = strings.Join(scan(t, model, ns), "\n")
	}
	nextOff := int64(0)

	steps := 1 + rng.IntN(40)
	for range steps {
		switch r := rng.IntN(10); {
		case r < 6: // a batch over one or both namespaces, each with a new offset
			bd, bm := d.NewBatch(), model.NewBatch()
			var touched []Namespace
			for _, ns := range spaces {
				if rng.IntN(2) == 0 {
					continue
				}
				touched = append(touched, ns)
				for range 1 + rng.IntN(50) {
					k := fmt.Appendf(nil, "k%02d", rng.IntN(60))
					if rng.IntN(5) == 0 {
						must(t, bd.Delete(ns, k), bm.Delete(ns, k))
						continue
					}
					v := fmt.Appendf(nil, "v%d", nextOff)
					must(t, bd.Set(ns, k, v), bm.Set(ns, k, v))
				}
				nextOff++
				must(t, bd.SetOffset(ns, nextOff), bm.SetOffset(ns, nextOff))
			}
			must(t, bd.Commit(), bm.Commit())
			for _, ns := range touched {
				off, _ := offset(t, model, ns)
				record(ns, off)
			}
		case r < 8: // a load
			ns := spaces[rng.IntN(len(spaces))]
			ld, err := d.NewLoader(ns)
			must(t, err)
			lm, err := model.NewLoader(ns)
			must(t, err)
			nextOff++
			for k := rng.IntN(3); k < 60; k += 1 + rng.IntN(4) {
				key, v := fmt.Appendf(nil, "k%02d", k), fmt.Appendf(nil, "l%d", nextOff)
				must(t, ld.Add(key, v), lm.Add(key, v))
			}
			ld.SetOffset(nextOff)
			lm.SetOffset(nextOff)
			must(t, ld.Commit(), lm.Commit())
			record(ns, nextOff)
			durable[ns], dropped[ns] = nextOff, false
		case r < 9:
			ns := spaces[rng.IntN(len(spaces))]
			must(t, d.Drop(ns), model.Drop(ns))
			dropped[ns] = true
		default:
			must(t, d.db.Flush())
		}
	}

	image := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	must(t, d.Close())
	d = openDB(t, Options{Dir: "/state", FS: image})
	defer d.Close()
	for _, ns := range spaces {
		got := strings.Join(scan(t, d, ns), "\n")
		off, ok := offset(t, d, ns)
		if !ok {
			if got != "" {
				t.Fatalf("%s: no offset but state:\n%s", ns, got)
			}
			if durable[ns] >= 0 && !dropped[ns] {
				t.Fatalf("%s: committed load at offset %d lost", ns, durable[ns])
			}
			continue
		}
		want, known := history[ns][off]
		if !known {
			t.Fatalf("%s: offset %d was never written", ns, off)
		}
		if got != want {
			t.Fatalf("%s: offset %d with state\n%s\nwant\n%s", ns, off, got, want)
		}
		if off < durable[ns] {
			t.Fatalf("%s: offset %d older than the committed load at %d", ns, off, durable[ns])
		}
	}
}

// TestCrashLoadAfterBatch: a committed load makes the batches before it durable too, even those
// that touch keys outside the load's key range (so that no overlap forces a flush).
func TestCrashLoadAfterBatch(t *testing.T) {
	fs := vfs.NewCrashableMem()
	d := openDB(t, Options{Dir: "/state", FS: fs})
	ns := Namespace{"x", 0}
	mustSet(t, d, ns, "a", "batch")                    // NoSync, outside the load's range
	mustSet(t, d, Namespace{"other", 0}, "a", "batch") // another namespace
	l, err := d.NewLoader(ns)
	must(t, err)
	must(t, l.Add([]byte("k"), []byte("load")))
	l.SetOffset(5)
	must(t, l.Commit())
	mustSet(t, d, ns, "z", "after") // NoSync, may be lost

	image := fs.CrashClone(vfs.CrashCloneCfg{}) // keeps only synced data
	must(t, d.Close())
	d = openDB(t, Options{Dir: "/state", FS: image})
	defer d.Close()
	wantScan(t, d, ns, "a=batch", "k=load")
	wantOffset(t, d, ns, 5)
	wantScan(t, d, Namespace{"other", 0}, "a=batch")
}
