package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/procstat"
)

// proc is one running contender process. It is started in its own process group with
// SIGKILL as its parent-death signal, so a harness that dies takes its children with it.
// Methods are safe for concurrent use.
type proc struct {
	cmd     *exec.Cmd
	start   time.Time
	exited  chan struct{} // closed when Wait returned
	waitErr error         // valid once exited is closed
	exitAt  time.Time     // valid once exited is closed
	peakKiB atomic.Int64  // highest VmHWM sampled; the rusage max RSS only if never sampled
	log     *os.File
}

// startProc starts argv with env added to the harness's environment, stdout and stderr to
// logPath.
func startProc(argv, env []string, dir, logPath string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating log: %w", err)
	}
	fmt.Fprintf(f, "# %q\n# env %q\n", argv, env)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{cmd: cmd, exited: make(chan struct{}), log: f}
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	go p.wait()
	go p.sample()
	return p, nil
}

func (p *proc) wait() {
	err := p.cmd.Wait()
	p.exitAt = time.Now()
	// The sampled VmHWM is the process's own peak. wait4's ru_maxrss was seen to report far
	// more (2.8 GiB for a sluice run whose VmHWM peaked at 458 MiB), so it is only a fallback
	// for a process too short-lived to be sampled.
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru != nil && p.peakKiB.Load() == 0 {
		p.notePeak(ru.Maxrss) // KiB on Linux
	}
	p.waitErr = err
	p.log.Close()
	close(p.exited)
}

// sample polls VmHWM (peak resident set) every 100 ms until the process exits.
func (p *proc) sample() {
	path := "/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status"
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if kib, ok := procstat.VmHWM(path); ok {
			p.notePeak(kib)
		}
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
	}
}

func (p *proc) notePeak(kib int64) {
	for {
		old := p.peakKiB.Load()
		if kib <= old || p.peakKiB.CompareAndSwap(old, kib) {
			return
		}
	}
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's utime and stime: 100 on
// every Linux the harness runs on.
const clockTicks = 100

// cpuSeconds returns the user+system CPU seconds the process has used so far (every thread: a
// JVM's GC and JIT threads included), read from /proc/<pid>/stat while it runs and from its
// rusage once it has exited; 0 if neither can be read.
func (p *proc) cpuSeconds() float64 {
	if p.done() {
		if st := p.cmd.ProcessState; st != nil {
			return (st.UserTime() + st.SystemTime()).Seconds()
		}
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	return statCPU(string(b))
}

// statCPU parses utime + stime (fields 14 and 15) of a /proc/<pid>/stat line into seconds, or
// returns 0. The command name (field 2) is in parentheses and may hold spaces.
func statCPU(stat string) float64 {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return float64(u+s) / clockTicks
}

// done reports whether the process has exited.
func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group. It
// returns once the process has been reaped.
func (p *proc) stop(grace time.Duration) {
	if p.done() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return
	case <-t.C:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// exitError describes how the process ended, or nil for exit status 0.
func (p *proc) exitError() error {
	<-p.exited
	if p.waitErr == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return fmt.Errorf("exited: %s", ee.ProcessState.String())
	}
	return p.waitErr
}

// tail returns the last n bytes of the process log, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	b := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// lastLine returns the last non-empty line of the process log (at most 300 bytes of it).
func lastLine(path string) string {
	lines := strings.Split(strings.TrimRight(tail(path, 4096), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "# ") {
			if len(l) > 300 {
				l = l[:300] + "..."
			}
			return l
		}
	}
	return ""
}
