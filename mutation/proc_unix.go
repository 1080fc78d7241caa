//go:build unix

package mutation

import (
	"os/exec"
	"syscall"
	"time"
)

// killGroup makes cmd the leader of a process group of its own and makes
// cancelling it signal the whole group: SIGTERM first, so that go test
// passes it on and a TestMain can close its stack, then SIGKILL after
// grace. Killing only the go command would leave the test binary, and
// whatever it started, running.
//
// Call the returned sweep once cmd has been waited for: it kills whatever
// is left in the group (a test binary that outlived a go command killed by
// SIGTERM) and waits, up to a few seconds, until the group is gone.
func killGroup(cmd *exec.Cmd, grace time.Duration) (sweep func()) {
	done := make(chan struct{})
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
			return err
		}
		go func() {
			select {
			case <-done:
			case <-time.After(grace):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}()
		return nil
	}
	return func() {
		close(done)
		if cmd.Process == nil {
			return
		}
		// A group whose leader has been reaped keeps its id only while
		// members remain, so this reaches stragglers or nothing (ESRCH).
		pgid := cmd.Process.Pid
		if syscall.Kill(-pgid, syscall.SIGKILL) != nil {
			return
		}
		// SIGKILL is asynchronous; a killed process stays in the group
		// until it is reaped.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if syscall.Kill(-pgid, 0) != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
