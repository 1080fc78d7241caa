package worker

import "syscall"

// childProcAttr makes the kernel SIGKILL a worker process when the test
// binary dies, so no worker outlives an aborted run.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
