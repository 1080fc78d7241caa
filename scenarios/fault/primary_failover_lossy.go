package fault

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// ---------------------------------------------------------------------------
// PRIMARY_FAILOVER_LOSSY

// PrimaryFailoverLossy is PRIMARY_FAILOVER after the standby has stopped
// receiving, so that the failover loses the last grants and writes on
// purpose, as an asynchronous standby that lagged does:
//
//  1. the standby is detached (stack.DetachStandby): from here on every
//     commit is on the primary alone;
//  2. the leader is frozen (SIGSTOP) in the first half of a piece of work,
//     before its write, for Hold: its term expires, and another replica
//     is granted the lease, and works and writes, on the primary alone;
//  3. the primary is killed, the standby promoted and the address
//     repointed, as PRIMARY_FAILOVER does: the new primary has the old
//     leader's term as the newest, and none of what came after it;
//  4. the old leader is resumed, with its write to make.
//
// The freeze is what makes the lag hold a grant every time. A lag alone
// loses a grant only when leadership happens to change inside it, and the
// same cell would show a regressed token in one run and none in the next.
// The standby's replay is not paused: pg_promote() replays every record
// a paused standby received, and nothing would be lost
// (TestKillInAsyncModeLosesWhatTheStandbyNeverReceived in package stack).
var PrimaryFailoverLossy Fault = primaryFailoverLossy{}

type primaryFailoverLossy struct{ holding }

func (primaryFailoverLossy) Name() string { return "PRIMARY_FAILOVER_LOSSY" }

// Available: asynchronous replication only; a synchronous standby has
// every acknowledged commit, and a commit waits for it while it is
// detached.
func (primaryFailoverLossy) Available(s Setting) bool { return s.Replication == stack.ReplicationAsync }

func (primaryFailoverLossy) Inject(ctx context.Context, t Target) error {
	l, err := leader(ctx, t)
	if err == nil && l.PID <= 0 {
		err = fmt.Errorf("leader %s has no process", l.ID)
	}
	if err != nil {
		return err
	}
	s := t.Stack()
	_, standby, err := pair(s)
	if err != nil {
		return err
	}
	conn, err := oracleConn(ctx, t)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var detached time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&detached); err != nil {
		return fmt.Errorf("read the oracle's clock: %w", err)
	}
	// SIGCONT however the injection ends: see FREEZE_LEADER.
	defer func() { _ = signalGroup(l.PID, syscall.SIGCONT) }()
	if err := s.DetachStandby(ctx); err != nil {
		return err
	}
	event(ctx, t, "", "standby %s detached: from here on the primary alone has the commits", standby)
	if err := freezeMidWork(ctx, t, l); err != nil {
		return err
	}
	d := Hold(t.Setting())
	event(ctx, t, l.ID, "SIGSTOP pid %d in the middle of its work, for %s, while the primary alone takes the commits", l.PID, d)
	herr := hold(ctx, d)
	if herr == nil {
		herr = awaitNewerGrant(ctx, t, conn, l.ID, detached)
	}
	var ferr error
	if herr == nil {
		ferr = failOver(ctx, t, l.ID, "SIGKILL", s.KillPrimary)
	}
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	if err := signalGroup(l.PID, syscall.SIGCONT); err != nil {
		return errors.Join(herr, ferr, fmt.Errorf("SIGCONT %s (pid %d): %w", l.ID, l.PID, err))
	}
	if err := waitState(rctx, l.PID, func(s byte) bool { return s != 'T' && s != 't' }); err != nil {
		return errors.Join(herr, ferr, fmt.Errorf("resume %s: %w", l.ID, err))
	}
	event(rctx, t, l.ID, "SIGCONT pid %d, on the new primary", l.PID)
	return errors.Join(herr, ferr)
}

// newerGrantWait bounds how much longer than Hold the lossy failover
// holds the frozen leader for another replica's grant.
const newerGrantWait = 30 * time.Second

// awaitNewerGrant waits, after the hold, until a replica other than the
// frozen leader has been granted the lease since the standby was detached,
// on the primary alone: that grant is what the failover is to lose.
// Beside two CPU hogs the follower's grant once came after the hold, the
// failover lost nothing, and the run was rightly INCONCLUSIVE ("grant
// lost"). After newerGrantWait the failover goes ahead without one, and
// the validity says so. Caught by TestPrimaryFailoverLossy.
func awaitNewerGrant(ctx context.Context, t Target, conn oracle.Querier, frozen string, since time.Time) error {
	begin := time.Now()
	deadline := begin.Add(newerGrantWait)
	for {
		ok, err := oracle.GrantedSince(ctx, conn, frozen, since)
		if err != nil {
			return err
		}
		if ok {
			if waited := time.Since(begin); waited > 100*time.Millisecond {
				event(ctx, t, frozen, "held %s longer, until another replica was granted the lease on the primary alone", waited.Round(time.Millisecond))
			}
			return nil
		}
		if time.Now().After(deadline) {
			event(ctx, t, frozen, "no other replica was granted the lease within %s after the hold: failing over anyway", newerGrantWait)
			return nil
		}
		if err := wait.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}
