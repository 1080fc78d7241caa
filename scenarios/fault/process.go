package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// Faults that signal the leader's process.

// ---------------------------------------------------------------------------
// KILL_LEADER

// KillLeader sends SIGKILL to the leader process. It is not restarted:
// the run goes on with one replica fewer.
var KillLeader Fault = killLeader{}

type killLeader struct{}

func (killLeader) Name() string           { return "KILL_LEADER" }
func (killLeader) Available(Setting) bool { return true }

func (killLeader) Inject(ctx context.Context, t Target) error {
	l, err := processLeader(ctx, t)
	if err != nil {
		return err
	}
	// Stop it first, mid-work, so it cannot end that piece or begin
	// another after the killed event, which would then count as running
	// until the end of the run; log the event; then kill. Its open work
	// ends at the event, and the failover is measured from it
	// (oracle.FailoverFromInjection): the stopped leader still holds its
	// lease until the kill.
	if err := stopMidWork(ctx, t, l, strikeFresh(t), anyAge); err != nil {
		return err
	}
	kerr := t.Killed(ctx, l.ID)
	if err := signalGroup(l.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("SIGKILL %s (pid %d): %w", l.ID, l.PID, err)
	}
	if kerr != nil {
		return fmt.Errorf("log that %s was killed: %w", l.ID, kerr)
	}
	return waitGone(ctx, l.PID)
}

// ---------------------------------------------------------------------------
// FREEZE_LEADER

// FreezeLeader sends SIGSTOP to the leader in the first half of a piece
// of work, before its write, holds it for longer than the TTL, then
// sends SIGCONT: the paused holder that resumes believing it still
// leads, with a write to make.
var FreezeLeader Fault = freezeLeader{}

type freezeLeader struct{ holding }

func (freezeLeader) Name() string           { return "FREEZE_LEADER" }
func (freezeLeader) Available(Setting) bool { return true }

func (freezeLeader) Inject(ctx context.Context, t Target) error {
	l, err := processLeader(ctx, t)
	if err != nil {
		return err
	}
	// SIGCONT however the injection ends. A frozen replica is the one
	// fault that must never outlive Inject.
	defer func() { _ = signalGroup(l.PID, syscall.SIGCONT) }()
	if err := freezeMidWork(ctx, t, l); err != nil {
		return err
	}
	d := Hold(t.Setting())
	event(ctx, t, l.ID, "SIGSTOP pid %d in the middle of its work, for %s", l.PID, d)
	herr := hold(ctx, d)
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	if err := signalGroup(l.PID, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %s (pid %d): %w", l.ID, l.PID, err)
	}
	if err := waitState(rctx, l.PID, func(s byte) bool { return s != 'T' && s != 't' }); err != nil {
		return fmt.Errorf("resume %s: %w", l.ID, err)
	}
	event(rctx, t, l.ID, "SIGCONT pid %d", l.PID)
	return herr
}

// freezeMidWork stops the leader in the first half of a piece of work,
// before the piece's write, so that it resumes with the write still to
// make: the case fencing is for. A leader frozen between pieces would only
// find, on waking, that it lost the lease, and one frozen after its write
// would have nothing late to write.
func freezeMidWork(ctx context.Context, t Target, l Replica) error {
	half := max(t.Setting().Work/2, 10*time.Millisecond)
	return stopMidWork(ctx, t, l, half, half)
}

// stopMidWork stops the leader's process group while the oracle shows it
// in a piece of work: it waits for a piece begun within fresh, stops the
// leader, and checks while it is stopped that a piece begun within still
// is open. A stopped leader cannot end its piece, so what the fault does
// next lands mid-work however long the way from the first check to the
// stop took; on a loaded machine that way outlasted the piece, and the
// fault struck a leader between pieces (INCONCLUSIVE "it was not
// leading"). When the piece ended before the stop, the leader runs on and
// the wait starts again. After strikeWait the leader is stopped wherever
// it is, and the event says so. Caught by TestStopMidWork.
func stopMidWork(ctx context.Context, t Target, l Replica, fresh, still time.Duration) error {
	conn, err := oracleConn(ctx, t)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	late, err := waitMidWork(ctx, l, fresh, still, func(within time.Duration) (bool, error) {
		return oracle.WorkBegun(ctx, conn, l.ID, within)
	})
	if err == nil && late {
		event(ctx, t, l.ID, "stopped %s without waiting: it began no piece of work within %s", l.ID, strikeWait)
	}
	return err
}

// anyAge is the age of a piece of work that any open piece is younger
// than.
const anyAge = 24 * time.Hour

// waitMidWork is stopMidWork's loop, with the oracle's answer to "a piece
// begun within d and still open?" as begun. It reports whether it stopped
// the leader without a piece in flight, after strikeWait.
func waitMidWork(ctx context.Context, l Replica, fresh, still time.Duration, begun func(time.Duration) (bool, error)) (late bool, err error) {
	deadline := time.Now().Add(strikeWait)
	for {
		late := time.Now().After(deadline)
		if ok, err := begun(fresh); err != nil {
			return false, err
		} else if !ok && !late {
			if err := wait.Sleep(ctx, 2*time.Millisecond); err != nil {
				return false, err
			}
			continue
		}
		if err := signalGroup(l.PID, syscall.SIGSTOP); err != nil {
			return false, fmt.Errorf("SIGSTOP %s (pid %d): %w", l.ID, l.PID, err)
		}
		if err := waitState(ctx, l.PID, func(s byte) bool { return s == 'T' || s == 't' }); err != nil {
			return false, fmt.Errorf("stop %s: %w", l.ID, err)
		}
		if late {
			return true, nil
		}
		// Stopped now: a piece still open stays open.
		if ok, err := begun(still); err != nil || ok {
			return false, err
		}
		if err := signalGroup(l.PID, syscall.SIGCONT); err != nil {
			return false, fmt.Errorf("SIGCONT %s (pid %d): %w", l.ID, l.PID, err)
		}
	}
}

// ---------------------------------------------------------------------------
// GRACEFUL_HANDOVER

// GracefulHandover sends SIGTERM to the leader: it stops its worker,
// releases its lease and exits, and another replica takes over.
var GracefulHandover Fault = gracefulHandover{}

type gracefulHandover struct{}

func (gracefulHandover) Name() string           { return "GRACEFUL_HANDOVER" }
func (gracefulHandover) Available(Setting) bool { return true }

func (gracefulHandover) Inject(ctx context.Context, t Target) error {
	l, err := processLeader(ctx, t)
	if err != nil {
		return err
	}
	// The SIGTERM is sent to the leader stopped mid-work and acts when it
	// runs again, so the injected event lies inside a piece of work.
	defer func() { _ = signalGroup(l.PID, syscall.SIGCONT) }()
	if err := stopMidWork(ctx, t, l, strikeFresh(t), anyAge); err != nil {
		return err
	}
	// Caught by TestGracefulHandover.
	injected(ctx, t, l.ID, "SIGTERM pid %d", l.PID)
	if err := signalGroup(l.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", l.ID, l.PID, err)
	}
	if err := signalGroup(l.PID, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %s (pid %d): %w", l.ID, l.PID, err)
	}
	// The replica finishes its piece of work, closes its lease and exits.
	if err := waitGone(ctx, l.PID); err != nil {
		return fmt.Errorf("%s did not stop after SIGTERM: %w", l.ID, err)
	}
	return nil
}

// ---------------------------------------------------------------------------
// The process's state

// ProcessState returns the one-letter state of process pid from
// /proc/<pid>/stat: R running, S sleeping, T stopped, Z zombie, ... It
// fails where there is no /proc.
func ProcessState(pid int) (byte, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, data)
	}
	return data[i+2], nil
}

// waitState waits until pid's state satisfies ok. Without /proc it
// trusts the signal and returns at once.
func waitState(ctx context.Context, pid int, ok func(byte) bool) error {
	for {
		s, err := ProcessState(pid)
		if errors.Is(err, os.ErrNotExist) {
			if _, statErr := os.Stat("/proc/self/stat"); statErr != nil {
				return nil // no /proc on this system
			}
			return fmt.Errorf("process %d is gone", pid)
		}
		if err != nil {
			return err
		}
		if ok(s) {
			return nil
		}
		if err := wait.Sleep(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("process %d still in state %c: %w", pid, s, err)
		}
	}
}

// waitGone waits until process pid has exited (a zombie counts as gone:
// its parent, the runner, reaps it).
func waitGone(ctx context.Context, pid int) error {
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if s, err := ProcessState(pid); err == nil && s == 'Z' {
			return nil
		}
		if err := wait.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("process %d still running: %w", pid, err)
		}
	}
}

// signalGroup sends sig to the process group that pid leads, as every
// replica does (the runner starts each in a group of its own), so that a
// replica that is a user's command is stopped, frozen or killed with its
// children; to pid alone when it leads no group.
func signalGroup(pid int, sig syscall.Signal) error {
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		return syscall.Kill(-pid, sig)
	}
	return syscall.Kill(pid, sig)
}
