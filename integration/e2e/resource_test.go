package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// exitCode waits up to within for the instance's process to exit on its own and returns its
// exit code.
func (in *instance) exitCode(within time.Duration) int {
	t := in.p.t
	t.Helper()
	in.mu.Lock()
	r := in.running
	in.mu.Unlock()
	if r == nil {
		t.Fatalf("instance %s is not running", in.id)
	}
	select {
	case <-r.done:
	case <-time.After(within):
		t.Fatalf("instance %s did not exit within %v", in.id, within)
	}
	in.mu.Lock()
	in.running = nil
	in.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	if r.err != nil {
		t.Fatalf("instance %s: %v", in.id, r.err)
	}
	return 0
}

// get fetches path from the instance's HTTP listener; ok is false while it is not up.
func (in *instance) get(ctx context.Context, path string) (code int, body string, ok bool) {
	in.mu.Lock()
	addr := in.addr
	in.mu.Unlock()
	if addr == "" {
		return 0, "", false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), true
}

// TestStateDirNotWritableFake: a state dir that cannot be created or written makes sluice exit
// 1 at start with an error naming processing.state_dir and the path. (Root ignores file modes,
// so the portable cases put the dir under a regular file; the read-only case runs as non-root.)
func TestStateDirNotWritableFake(t *testing.T) {
	brokers := kafkatest.Fake(t, 2)
	p := newPipeline(t, brokers, pipelineOpts{partitions: 2, enterLag: 1000, exitLag: 100})
	root := t.TempDir()
	file := filepath.Join(root, "a-file")
	if err := os.WriteFile(file, []byte("not a dir"), 0o644); err != nil {
		t.Fatal(err)
	}
	sortIsFile := filepath.Join(root, "sort-is-a-file")
	if err := os.MkdirAll(sortIsFile, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sortIsFile, "sort"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, dir, want string }{
		{"under a regular file", filepath.Join(file, "state"), "not a directory"},
		{"its sort dir a regular file", sortIsFile, "sort"},
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(root, "read-only")
		if err := os.MkdirAll(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, dir, want string }{"read-only", ro, "permission denied"})
	} else {
		t.Log("running as root, which ignores file modes: the read-only case is skipped")
	}
	for i, c := range cases {
		in := p.newInstance(fmt.Sprintf("nw%d", i), false)
		in.stateDir = c.dir
		start := time.Now()
		in.start()
		code := in.exitCode(30 * time.Second)
		logs := in.tail(5)
		if code != 1 {
			t.Errorf("%s: exit code %d, want 1; log:\n%s", c.name, code, logs)
		}
		for _, w := range []string{"processing.state_dir", c.dir, c.want} {
			if !strings.Contains(logs, w) {
				t.Errorf("%s: the log does not name %q:\n%s", c.name, w, logs)
			}
		}
		t.Logf("%s: exit %d after %v: %s", c.name, code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(in.tail(1)))
	}
}

// TestDamagedStateRebuilt (real broker) and TestDamagedStateRebuiltFake: an instance stopped
// cleanly has its Pebble files damaged at rest (every table garbled; then the MANIFEST
// truncated); each restart logs a WARN naming the state dir, moves the store aside, restores
// every task from the changelog in full, and the totals are exact.
func TestDamagedStateRebuilt(t *testing.T) {
	damagedScenario(t, kafkatest.Brokers(t))
}

func TestDamagedStateRebuiltFake(t *testing.T) {
	damagedScenario(t, kafkatest.Fake(t, 2))
}

func damagedScenario(t *testing.T, brokers string) {
	ctx := t.Context()
	// About 26,000 keys per task, more than the 20,000 from which a backlog's fold bulk-loads
	// tables (random keys: 60,000 orders over 200,000 keys hit about 52,000).
	first := workload.Spec{Records: 60_000, Keys: 200_000, Partitions: 2, Seed: 31}
	p := newPipeline(t, brokers, pipelineOpts{partitions: 2, keys: first.Keys, enterLag: 5000, exitLag: 500})
	in := p.newInstance("d0", false)
	if err := p.produce(ctx, first); err != nil {
		t.Fatal(err)
	}
	in.start()
	p.waitCaughtUp(ctx, 90*time.Second, in)
	in.term()
	specs := []workload.Spec{first}

	for i, damage := range []struct {
		name string
		do   func(t *testing.T, dir string) int
	}{
		{"every table garbled", func(t *testing.T, dir string) int {
			ssts, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.sst"))
			for _, f := range ssts {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for j := len(b) / 3; j < len(b)/3+64 && j < len(b); j++ {
					b[j] ^= 0xff
				}
				if err := os.WriteFile(f, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return len(ssts)
		}},
		{"MANIFEST truncated", func(t *testing.T, dir string) int {
			ms, _ := filepath.Glob(filepath.Join(dir, "pebble", "MANIFEST-*"))
			for _, f := range ms {
				fi, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(f, fi.Size()/2); err != nil {
					t.Fatal(err)
				}
			}
			return len(ms)
		}},
	} {
		if n := damage.do(t, in.stateDir); n == 0 {
			t.Fatalf("%s: no file to damage in %s/pebble", damage.name, in.stateDir)
		}
		more := workload.Spec{Records: 5_000, Keys: first.Keys, Partitions: 2, Seed: int64(32 + i)}
		if err := p.produce(ctx, more); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, more)
		start := time.Now()
		in.start()
		p.waitCaughtUp(ctx, 90*time.Second, in)
		in.term()
		run := in.runs
		warn := in.logLines(run, "state store damaged: moved aside; every task restores its state from the changelog")
		if len(warn) != 1 || warn[0]["state_dir"] != in.stateDir || warn[0]["level"] != "WARN" {
			t.Errorf("%s: run %d logged %v, want one WARN naming state_dir %s", damage.name, run, warn, in.stateDir)
		} else {
			t.Logf("%s: %v", damage.name, warn[0]["damage"])
		}
		full := 0
		for _, l := range in.logLines(run, "state restored") {
			if l["full"] == true {
				full++
			}
		}
		if full != 2 {
			t.Errorf("%s: run %d logged %d full restores, want 2 (one per task)", damage.name, run, full)
		}
		p.verify(ctx, p.expected(specs...), in.id)
		t.Logf("%s: restart, rebuild and %d more records in %v", damage.name, more.Records, time.Since(start).Round(time.Millisecond))
	}
}

// TestKafkaUnreachableAtStartFake: started while no broker listens at its address, sluice keeps
// retrying with a WARN line naming the broker and how long it has waited, /readyz answers 503
// with the reason and /healthz 200; once a broker comes up there, it processes exactly.
func TestKafkaUnreachableAtStartFake(t *testing.T) {
	ctx := t.Context()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// A first broker at the address only to set the pipeline up (its topic and config).
	setup, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	addr := setup.ListenAddrs()[0]
	p := newPipeline(t, addr, pipelineOpts{partitions: 2, keys: 500, enterLag: 1000, exitLag: 100})
	setup.Close()

	in := p.newInstance("u0", true)
	start := time.Now()
	in.start()
	poll(ctx, t, "two retries logged, /readyz 503 waiting for Kafka, /healthz 200", 50*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		code, body, ok := in.get(ctx, "/readyz")
		if !ok || code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for Kafka") || !strings.Contains(body, addr) {
			return false, nil
		}
		if hc, _, _ := in.get(ctx, "/healthz"); hc != http.StatusOK {
			return false, fmt.Errorf("/healthz = %d while waiting for Kafka, want 200", hc)
		}
		return len(in.logLines(1, "kafka unreachable: no broker answers; retrying (not ready meanwhile)")) >= 2, nil
	})
	_, body, _ := in.get(ctx, "/readyz")
	lines := in.logLines(1, "kafka unreachable: no broker answers; retrying (not ready meanwhile)")
	last := lines[len(lines)-1]
	if fmt.Sprint(last["brokers"]) != fmt.Sprint([]any{addr}) || last["waiting"] == nil {
		t.Errorf("retry line %v: want the brokers [%s] and how long it has waited", last, addr)
	}
	t.Logf("after %v: /readyz %q; last retry line: %v", time.Since(start).Round(time.Millisecond), strings.TrimSpace(body), last)

	kafkatest.FakeCluster(t, kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(2, p.topic))
	up := time.Now()
	s := workload.Spec{Records: 10_000, Keys: 500, Partitions: 2, Seed: 41}
	if err := p.produce(ctx, s); err != nil {
		t.Fatal(err)
	}
	p.waitCaughtUp(ctx, 60*time.Second, in)
	poll(ctx, t, "/readyz 200", 50*time.Millisecond, func() (bool, error) {
		code, _, _ := in.get(ctx, "/readyz")
		return code == http.StatusOK, nil
	})
	t.Logf("broker up: caught up and ready %v later", time.Since(up).Round(time.Millisecond))
	if len(in.logLines(1, "kafka reachable")) != 1 {
		t.Error(`no "kafka reachable" line once the broker came up`)
	}
	in.term()
	p.verify(ctx, p.expected(s), in.id)
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted at cleanup, or skips
// the test when this process may not mount (it needs root or CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN; the in-process errorfs tests cover disk full without it): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file of n bytes in dir.
func fill(t *testing.T, dir string, n int64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDiskFullTmpfsFake runs sluice on a real, nearly full file system (a 16 MiB tmpfs with
// 4 MiB left; skipped where it cannot be mounted). With the default processing.min_free_space
// (64MiB, more than there is), the first state write refuses: exit 1 naming the dir. With
// 1MiB, a backlog that spills its sort runs and bulk-loads its fold fills the disk: whichever
// write fails first (a spill's ENOSPC, a bulk load's, or the store's reserve), sluice exits 1
// naming the state dir with no transaction left open; restarted with room (same instance, a new
// state dir: a full restore from the changelog), the totals are exact, so nothing was
// committed beyond what the changelog holds.
func TestDiskFullTmpfsFake(t *testing.T) {
	dir := mountTmpfs(t, 16<<20)
	fill(t, dir, 12<<20)
	brokers := kafkatest.Fake(t, 2)
	ctx := t.Context()
	s := workload.Spec{Records: 100_000, Keys: 100_000, Partitions: 2, Seed: 51}
	p := newPipeline(t, brokers, pipelineOpts{partitions: 2, keys: s.Keys, enterLag: 5000, exitLag: 500})
	if err := p.produce(ctx, s); err != nil {
		t.Fatal(err)
	}
	// A small sort budget and pre-aggregation table: the backlog spills runs to the state dir.
	sortEnv := []string{"SLUICE_BACKLOG__SORT_MEMORY=1MiB", "SLUICE_PROCESSING__CACHE_KEYS=1000"}
	failed := func(in *instance, wants ...string) {
		t.Helper()
		start := time.Now()
		in.start()
		code := in.exitCode(60 * time.Second)
		last := in.tail(1)
		if code != 1 || !strings.Contains(last, in.stateDir) || !slices.ContainsFunc(wants, func(w string) bool { return strings.Contains(last, w) }) {
			t.Errorf("%s: exit %d, last line %q; want exit 1 naming %s and one of %q", in.id, code, last, in.stateDir, wants)
		}
		t.Logf("%s: exit %d after %v: %s", in.id, code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(last))
	}

	// The reserve: a group of its own (an instance that exits stays a static member of its
	// group until its session times out).
	r := p.newInstance("f-reserve", false)
	r.stateDir = filepath.Join(dir, r.id)
	p.env = append([]string{"SLUICE_GROUP=" + p.group + "-reserve"}, sortEnv...)
	failed(r, "state: disk full")

	in := p.newInstance("f0", false)
	in.stateDir = filepath.Join(dir, in.id)
	p.env = append([]string{"SLUICE_PROCESSING__MIN_FREE_SPACE=1MiB"}, sortEnv...)
	failed(in, "no space left on device", "state: disk full")
	p.env = sortEnv
	in.stateDir = filepath.Join(t.TempDir(), in.id)
	in.start()
	p.waitCaughtUp(ctx, 120*time.Second, in)
	in.term()
	p.verify(ctx, p.expected(s), in.id)
}
