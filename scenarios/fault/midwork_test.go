package fault

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A fault that signals the leader mid-work stops it first and checks,
// while it is stopped, that its piece is still open: on a loaded machine
// the piece seen begun could end before the stop arrived, and the fault
// then struck a leader between pieces. The oracle's answers are scripted;
// the stopped and continued process is real.
func TestStopMidWork(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "120")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	l := Replica{ID: "r1", PID: cmd.Process.Pid}
	state := func() byte {
		s, err := ProcessState(l.PID)
		require.NoError(t, err)
		return s
	}

	const fresh, still = 50 * time.Millisecond, time.Hour
	// The first piece is seen begun and has ended by the time the leader
	// is stopped; the second is still open once it is.
	answers := []bool{true, false, true, true}
	var asked []time.Duration
	var stopped []bool
	late, err := waitMidWork(context.Background(), l, fresh, still, func(within time.Duration) (bool, error) {
		asked = append(asked, within)
		s := state()
		stopped = append(stopped, s == 'T' || s == 't')
		ok := answers[0]
		answers = answers[1:]
		return ok, nil
	})
	require.NoError(t, err)
	require.False(t, late)
	require.Equal(t, []time.Duration{fresh, still, fresh, still}, asked,
		"a piece that ended before the stop is not struck: the wait starts again")
	require.Equal(t, []bool{false, true, false, true}, stopped,
		"asked about the open piece while stopped, and let run on in between")
	require.Equal(t, byte('T'), state(), "left stopped mid-work for the fault to act on")
}
