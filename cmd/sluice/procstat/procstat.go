// Package procstat reads a process's own resource figures from /proc, for the benchmarks that
// report a child's peak memory (`sluice bench` and the peer harness, integration/peers/harness). (wait4's ru_maxrss is no use there: a child starts with the
// maximum resident set its parent had when it forked, so a bench whose parent holds the
// embedded broker's data reported that data as the child's peak.)
package procstat

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// PeakRSS returns the peak resident set (VmHWM) of process pid, in KiB, while it runs.
func PeakRSS(pid int) (int64, bool) {
	return VmHWM("/proc/" + strconv.Itoa(pid) + "/status")
}

// VmHWM reads the VmHWM line of a /proc/<pid>/status file, in KiB.
func VmHWM(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("VmHWM:")) {
			continue
		}
		f := bytes.Fields(line[len("VmHWM:"):])
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		return n, err == nil
	}
	return 0, false
}
