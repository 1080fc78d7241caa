//go:build !linux

package worker

import "syscall"

// childProcAttr has no parent-death signal off Linux; t.Cleanup still
// kills the workers.
func childProcAttr() *syscall.SysProcAttr { return nil }
