package mutation

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	ppid, pgrp, ok := parseStat([]byte("4242 (worker.test) S 17 99 99 0 -1 4194560 …\n"))
	require.True(t, ok)
	require.Equal(t, 17, ppid)
	require.Equal(t, 99, pgrp)
	ppid, pgrp, ok = parseStat([]byte("7 (a) b (c)) R 3 5 5 0\n"))
	require.True(t, ok, "a name with spaces and parentheses")
	require.Equal(t, []int{3, 5}, []int{ppid, pgrp})
	for _, bad := range []string{"", "7 no parens R 3 5", "7 (x) R 3", "7 (x) R a 5", "7 (x) R 3 b"} {
		_, _, ok := parseStat([]byte(bad))
		require.False(t, ok, "%q", bad)
	}
}

// A process left in the group after its parent exited is killed; the
// leader and a process whose parent is alive in the group are not.
func TestReapOrphans(t *testing.T) {
	t.Parallel()
	// The leader starts two sleeps: one under a subshell that exits at
	// once (its sleep is orphaned, as a test binary is when gremlins kills
	// its go command), one it keeps as its own child.
	leader := exec.Command("sh", "-c", `(sleep 300 & echo $!) ; sleep 300 & echo $!; wait`)
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := leader.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, leader.Start())
	pgid := leader.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = leader.Wait()
	})
	sc := bufio.NewScanner(out)
	var pids []int
	for len(pids) < 2 && sc.Scan() {
		pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.Len(t, pids, 2)
	orphan, kept := pids[0], pids[1]
	// The subshell may still be exiting: wait for the orphan's parent to
	// leave the group (an event; the subshell exits right after its echo).
	require.Eventually(t, func() bool { return len(orphansOf(pgid)) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []int{orphan}, orphansOf(pgid))

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { reapOrphans(ctx, pgid, 10*time.Millisecond); close(done) }()
	require.Eventually(t, func() bool {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat")
		if err != nil {
			return true // gone
		}
		i := strings.LastIndexByte(string(data), ')')
		return strings.HasPrefix(string(data[i+1:]), " Z") // dead, not yet reaped by its new parent
	}, 10*time.Second, 10*time.Millisecond, "the orphan is killed")
	cancel()
	<-done
	_, pgrp, ok := readStat(kept)
	require.True(t, ok && pgrp == pgid, "the leader's own child still runs")
	_, pgrp, ok = readStat(pgid)
	require.True(t, ok && pgrp == pgid, "the leader still runs")
}
