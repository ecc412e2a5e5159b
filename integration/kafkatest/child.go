package kafkatest

import (
	"os/exec"
	"syscall"
)

// DieWithTest makes the process cmd starts receive SIGKILL when the test binary that starts it
// exits, also when `go test -timeout` or a signal kills that binary before its cleanups run: a
// sluice child left running would go on reading and writing the test broker's topics. Call it
// before cmd.Start. (Linux's parent-death signal; the integration tests run on Linux only, as
// kafka.sh does.)
func DieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
