package sorter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the files in testdata/. Commands (name=s by default):
//
//	new [name=s] [budget=N] [chunk=N] [maxruns=N] [sort=radix|pdq]
//	    a new sorter in <root>/<name>; budget=N makes a new shared Budget, otherwise the
//	    previous one is shared
//	add [name=s] [key=K ts=T off=O payload=P]  and/or input lines "key=K ts=T off=O payload=P"
//	    prints "spill: runs=N" whenever run files are written (spills and compactions)
//	stats [name=s] | merge [name=s] [nextkey] | reset [name=s] | close [name=s] | spill [name=s]
//	corrupt [name=s] run=I byte=B | truncate [name=s] run=I size=N
//	files                 lists the files under <root>
//	touch path=P          creates a file under <root>
//	clean                 runs Clean(<root>)
func TestDataDriven(t *testing.T) {
	files, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Type().IsRegular() { // not testdata/fuzz
			t.Run(f.Name(), func(t *testing.T) { runDataDriven(t, filepath.Join("testdata", f.Name())) })
		}
	}
}

// runDataDriven runs one testdata file in a fresh root directory.
func runDataDriven(t *testing.T, path string) {
	root := t.TempDir()
	var budget *Budget
	sorters := map[string]*Sorter{}
	defer func() {
		for _, s := range sorters {
			_ = s.Close()
		}
	}()
	clean := func(err error) string {
		return "error: " + strings.ReplaceAll(err.Error(), root, "<root>")
	}
	datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
		name := "s"
		td.MaybeScanArgs(t, "name", &name)
		s := sorters[name]
		needSorter := func() {
			if s == nil {
				td.Fatalf(t, "no sorter %q", name)
			}
		}
		switch td.Cmd {
		case "new":
			if td.HasArg("budget") {
				var n int64
				td.ScanArgs(t, "budget", &n)
				budget = NewBudget(n)
			}
			o := Options{Dir: filepath.Join(root, name), Budget: budget}
			td.MaybeScanArgs(t, "chunk", &o.ChunkSize)
			ns, err := New(o)
			if err != nil {
				return clean(err)
			}
			td.MaybeScanArgs(t, "maxruns", &ns.maxRuns)
			if td.HasArg("sort") {
				var alg string
				td.ScanArgs(t, "sort", &alg)
				ns.radix = alg == "radix"
			}
			if s != nil {
				_ = s.Close()
			}
			sorters[name] = ns
			return fmt.Sprintf("chunk=%d", ns.chunk)

		case "add":
			needSorter()
			var lines []string
			if td.HasArg("key") {
				var b strings.Builder
				for _, a := range td.CmdArgs {
					if a.Key != "name" {
						fmt.Fprintf(&b, "%s=%s ", a.Key, strings.Join(a.Vals, ","))
					}
				}
				lines = []string{b.String()}
			}
			for l := range strings.SplitSeq(td.Input, "\n") {
				if strings.TrimSpace(l) != "" {
					lines = append(lines, l)
				}
			}
			var out strings.Builder
			for _, l := range lines {
				key, ts, off, payload := parseEntry(t, l)
				seq := s.seq
				if err := s.Add(key, ts, off, payload); err != nil {
					fmt.Fprintln(&out, clean(err))
					continue
				}
				if s.seq != seq {
					fmt.Fprintf(&out, "spill: runs=%d (run files written: %d)\n", len(s.runs), s.seq)
				}
			}
			return out.String()

		case "stats":
			needSorter()
			st := s.Stats()
			return fmt.Sprintf("entries=%d mem=%d spilled=%d runs=%d budget=%d/%d",
				st.Entries, st.MemBytes, st.SpilledBytes, st.Runs, budget.Used(), budget.Limit())

		case "merge":
			needSorter()
			it, err := s.Merge()
			if err != nil {
				return clean(err)
			}
			defer func() { _ = it.Close() }()
			next := it.Next
			if td.HasArg("nextkey") {
				next = it.NextKey
			}
			var out strings.Builder
			n := 0
			for next() {
				fmt.Fprintf(&out, "%s %d %d %s\n", show(it.Key()), it.Time(), it.Offset(), show(it.Payload()))
				n++
			}
			if err := it.Err(); err != nil {
				fmt.Fprintln(&out, clean(err))
			} else {
				fmt.Fprintf(&out, "(%d entries)\n", n)
			}
			return out.String()

		case "reset":
			needSorter()
			if err := s.Reset(); err != nil {
				return clean(err)
			}
			return "ok"

		case "close":
			needSorter()
			if err := s.Close(); err != nil {
				return clean(err)
			}
			return "ok"

		case "spill":
			needSorter()
			if err := s.spill(); err != nil {
				return clean(err)
			}
			return fmt.Sprintf("runs=%d", len(s.runs))

		case "corrupt", "truncate":
			needSorter()
			var run int
			td.ScanArgs(t, "run", &run)
			if run >= len(s.runs) {
				return fmt.Sprintf("no run %d (%d runs)", run, len(s.runs))
			}
			p := s.runs[run].path
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if td.Cmd == "corrupt" {
				var b int
				td.ScanArgs(t, "byte", &b)
				data[b] ^= 0xff
			} else {
				var n int
				td.ScanArgs(t, "size", &n)
				data = data[:n]
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("%s (%d bytes)", filepath.Base(p), len(data))

		case "files":
			return listFiles(t, root)

		case "touch":
			var p string
			td.ScanArgs(t, "path", &p)
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte("stale"), 0o644); err != nil {
				t.Fatal(err)
			}
			return "ok"

		case "clean":
			if err := Clean(root); err != nil {
				return clean(err)
			}
			return listFiles(t, root)
		}
		td.Fatalf(t, "unknown command %q", td.Cmd)
		return ""
	})
}

func parseEntry(t *testing.T, line string) (key []byte, ts, off int64, payload []byte) {
	t.Helper()
	key, payload = []byte{}, []byte{}
	for f := range strings.FieldsSeq(line) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "key":
			key = []byte(v)
		case "payload":
			payload = []byte(v)
		case "ts":
			ts, err = strconv.ParseInt(v, 10, 64)
		case "off":
			off, err = strconv.ParseInt(v, 10, 64)
		default:
			t.Fatalf("bad field %q in %q", f, line)
		}
		if err != nil {
			t.Fatalf("bad field %q: %v", f, err)
		}
	}
	return key, ts, off, payload
}

func show(b []byte) string {
	if len(b) == 0 {
		return `""`
	}
	return string(b)
}

func listFiles(t *testing.T, root string) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out = append(out, rel+"/")
		} else {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "(empty)"
	}
	return strings.Join(out, "\n")
}

// TestSpillReusesMemory: a sorter that spills again and again reuses the chunks its spills
// released instead of allocating new ones, within the budget; once nothing is reserved after a
// Reset, the kept memory is dropped.
func TestSpillReusesMemory(t *testing.T) {
	budget := NewBudget(64 << 10)
	s, err := New(Options{Dir: t.TempDir(), Budget: budget, ChunkSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	payload := make([]byte, 40)
	key := make([]byte, 12)
	add := func(n int) {
		for i := range n {
			copy(key, fmt.Sprintf("k-%010d", i*7919%100000))
			if err := s.Add(key, 0, int64(i), payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(3000) // several spills of the 64 KiB budget
	if s.Stats().Runs < 2 {
		t.Fatalf("want spills, got %d runs", s.Stats().Runs)
	}
	before, runs := chunkAllocs.Load(), s.Stats().Runs
	add(3000)
	if s.Stats().Runs <= runs {
		t.Fatalf("no spill in the second round")
	}
	// The budget holds 4 chunks; the second round may allocate at most what the first left
	// unallocated, never a new set per spill.
	if n := chunkAllocs.Load() - before; n > 4 {
		t.Fatalf("%d chunk allocations over %d spills: spilled memory is not reused", n, s.Stats().Runs-runs)
	}
	if u, k := budget.Used(), budget.kept(); u+k > budget.Limit() {
		t.Fatalf("used %d + kept %d > limit %d", u, k, budget.Limit())
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if budget.Used() != 0 || budget.kept() != 0 {
		t.Fatalf("after Reset: used %d, kept %d; want 0, 0", budget.Used(), budget.kept())
	}
}

// TestSpillDiskFull: a spill that cannot be written (ENOSPC, from /dev/full) fails Add with an
// error naming the run file and the cause, leaves no run file behind, and returns the budget
// when the sorter closes.
func TestSpillDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here to fill a disk with")
	}
	dir := t.TempDir()
	budget := NewBudget(64 << 10)
	s, err := New(Options{Dir: dir, Budget: budget, ChunkSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	s.openRun = func(path string) (*os.File, error) {
		created = append(created, path)
		if err := os.WriteFile(path, nil, 0o644); err != nil { // the file the error names
			return nil, err
		}
		return os.OpenFile("/dev/full", os.O_WRONLY, 0)
	}
	payload := make([]byte, 40)
	for i := range 100_000 {
		err = s.Add(fmt.Appendf(nil, "k-%010d", i*7919%100000), 0, int64(i), payload)
		if err != nil {
			break
		}
	}
	if len(created) == 0 {
		t.Fatal("the sorter never spilled")
	}
	if err == nil || !strings.Contains(err.Error(), created[0]) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Add with a full disk = %v, want ENOSPC naming %s", err, created[0])
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "run-*.sort")); len(left) > 0 {
		t.Errorf("run files left after the failed spill: %v", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if budget.Used() != 0 {
		t.Errorf("budget used after Close: %d", budget.Used())
	}
}
