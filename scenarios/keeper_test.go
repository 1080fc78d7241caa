package scenarios_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
)

// envTestRunner makes this test binary start a replica command's process
// group as the runner does (runLikeARunner), write the PID of the
// command's child to the file it names, and wait to be killed.
const envTestRunner = "SCENARIOS_TEST_RUNNER_PIDFILE"

// runLikeARunner starts a command whose child outlives it unless killed,
// in its own process group with Pdeathsig and a keeper, as startCommand
// does, then waits.
func runLikeARunner(pidFile string) {
	cmd := exec.Command("sh", "-c", `sleep 600 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"; wait`, pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.Exit(3)
	}
	if _, err := KeepGroup(os.Args[0], cmd.Process.Pid); err != nil {
		os.Exit(4)
	}
	select {}
}

// A runner killed outright takes its replica command's whole process
// group with it: the kernel closes the keeper's pipe, and the keeper
// kills the group.
func TestAKilledRunnerTakesTheCommandsChildren(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	runner := exec.Command(os.Args[0], "-test.run=^$")
	runner.Env = append(os.Environ(), envTestRunner+"="+pidFile)
	require.NoError(t, runner.Start())
	var child int
	// Waits on an event (the file), bounded far above a loaded start.
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the command started its child")
	pgid, err := syscall.Getpgid(child)
	require.NoError(t, err)
	require.NotEqual(t, syscall.Getpgrp(), pgid, "the command runs in a group of its own")
	require.True(t, GroupAlive(pgid))
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })

	require.NoError(t, runner.Process.Signal(syscall.SIGKILL))
	_ = runner.Wait()
	// The keeper acts the moment the pipe closes; 30s bounds a loaded
	// machine's scheduling, not the mechanism.
	require.Eventually(t, func() bool { return !GroupAlive(pgid) }, 30*time.Second, 20*time.Millisecond,
		"the command's child %d outlived the killed runner", child)
}
