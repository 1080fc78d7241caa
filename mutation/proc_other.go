//go:build !unix

package mutation

import (
	"os/exec"
	"time"
)

// killGroup keeps exec.CommandContext's default, killing the go command
// only: without process groups the test binary may outlive it.
func killGroup(*exec.Cmd, time.Duration) (sweep func()) { return func() {} }
