package fault_test

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The process faults signal a stand-in replica process; each test shows
// that the signal arrived and, for the freeze, that it was undone.

func TestKillLeader(t *testing.T) {
	t.Parallel()
	cmd, exited := startProcess(t)
	tg := newTarget(t, stacktest.NewDB(t), shortTTL)
	tg.leader.PID = cmd.Process.Pid

	require.NoError(t, fault.KillLeader.Inject(context.Background(), tg))
	requireSignalled(t, exited, syscall.SIGKILL, "killed by SIGKILL", "the leader process is still running")
	require.Equal(t, []string{"replica-killed r1"}, tg.Events(), "the kill is logged so its open work ends there")
}

func requireSignalled(t *testing.T, exited <-chan *exec.ExitError, sig syscall.Signal, why, stillRunning string) {
	t.Helper()
	select {
	case ee := <-exited:
		require.NotNil(t, ee)
		require.Equal(t, sig, ee.Sys().(syscall.WaitStatus).Signal(), why)
	case <-time.After(5 * time.Second):
		t.Fatal(stillRunning)
	}
}

func TestFreezeLeader(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*fakeTarget, *exec.Cmd) {
		cmd, _ := startProcess(t)
		tg := newTarget(t, stacktest.NewDB(t), shortTTL)
		tg.leader.PID = cmd.Process.Pid
		return tg, cmd
	}
	t.Run("StoppedForLongerThanTheTTLThenRunning", func(t *testing.T) {
		t.Parallel()
		tg, cmd := setup(t)
		pid := cmd.Process.Pid
		begin := time.Now()
		done := inject(t, fault.FreezeLeader, tg)
		tg.waitEvent(t, "SIGSTOP")
		for time.Since(begin) < time.Second { // the TTL
			s, err := fault.ProcessState(pid)
			require.NoError(t, err)
			require.Equal(t, byte('T'), s, "stopped while frozen")
			time.Sleep(50 * time.Millisecond)
		}
		waitInjected(t, done, time.Minute)
		require.GreaterOrEqual(t, time.Since(begin), fault.Hold(tg.Setting()), "held for TTL + margin")
		require.Greater(t, fault.Hold(tg.Setting()), tg.Setting().TTL)
		s, err := fault.ProcessState(pid)
		require.NoError(t, err)
		require.NotEqual(t, byte('T'), s, "running again after Inject")
		require.Contains(t, fmtEvents(tg.Events()), "SIGCONT")
	})
	t.Run("ResumesEvenWhenCancelled", func(t *testing.T) {
		t.Parallel()
		tg, cmd := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- fault.FreezeLeader.Inject(ctx, tg) }()
		tg.waitEvent(t, "SIGSTOP")
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		s, err := fault.ProcessState(cmd.Process.Pid)
		require.NoError(t, err)
		require.NotEqual(t, byte('T'), s, "a cancelled freeze still resumes the process")
	})
}

func TestGracefulHandover(t *testing.T) {
	t.Parallel()
	cmd, exited := startProcess(t)
	tg := newTarget(t, stacktest.NewDB(t), shortTTL)
	tg.leader.PID = cmd.Process.Pid

	require.NoError(t, fault.GracefulHandover.Inject(context.Background(), tg))
	requireSignalled(t, exited, syscall.SIGTERM, "asked to stop with SIGTERM", "Inject returned before the leader exited")
	require.Equal(t, []string{fmt.Sprintf("injected r1 SIGTERM pid %d", cmd.Process.Pid)}, tg.Events(),
		"the SIGTERM is marked, so the failover is measured from it")
}
