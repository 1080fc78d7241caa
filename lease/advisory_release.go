package lease

import (
	"context"
	"errors"
	"fmt"
)

// advisoryReleaseSQL unlocks and names the backend that ran the unlock, in
// one statement, so the release can tell whether it freed the lock on the
// backend that took it.
const advisoryReleaseSQL = "SELECT pg_advisory_unlock($1, $2), pg_backend_pid()"

// ErrUnlockUnconfirmed is wrapped by Advisory's Release and Close when the
// unlock did not return true on the backend that took the lock: it ran on
// another backend, found no lock to free, or failed. Behind a pool the
// lock may then remain held on a server connection that no client owns,
// until that connection closes, and the next holder may re-enter it there.
var ErrUnlockUnconfirmed = errors.New("lease: advisory unlock not confirmed on the backend that took the lock; the lock may remain held on a pooled server connection")

// Release implements Lease. When the lease holds the lock it runs
// pg_advisory_unlock with pg_backend_pid() in one statement on its
// session, then closes the connection. A waiting follower is woken by the
// unlock itself; a polling one takes the lock at its next poll.
//
// When the unlock did not return true on the backend that took the lock
// (another backend answered, it freed nothing, or it failed), Release
// returns an error wrapping ErrUnlockUnconfirmed and logs it as a warning,
// never as a clean hand-over: behind a transaction pool the lock may
// remain held on a pooled server connection. The unlock runs even when
// ctx has ended, bounded by ProbeTimeout, so a shutdown whose context is
// already cancelled still reports the truth. A lease that does not hold
// the lock just closes its connection.
func (a *Advisory) Release(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.release(ctx)
}

// Close implements Lease: it releases, and TryAcquire and Acquire report
// Faulted with ErrClosed afterwards. It is idempotent. Its error is
// Release's.
func (a *Advisory) Close(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.release(ctx)
	a.dropped.wait(ctx)
	a.closed = true
	return err
}

// release unlocks on the session that holds the lock, checks the answer,
// and resets.
func (a *Advisory) release(ctx context.Context) error {
	if !a.held {
		a.reset(ctx)
		return nil
	}
	pid, token := a.pid, a.term.Token
	err := a.unlock(ctx)
	// Not held any more, whatever the unlock said: reset must not log a
	// clean hand-over. Caught by
	// TestAdvisoryRelease/UnlockThatFreedNothingIsReported.
	a.held = false
	// Closing the connection ends the session; on a direct or
	// session-pinned endpoint that frees the lock even if the unlock did
	// not. Caught by TestAdvisory/SurvivorTakesOverAfterTheLeaderReleases.
	a.reset(ctx)
	if err != nil {
		a.log.WarnContext(ctx, "lease: released, but the lock may remain held on a pooled server connection", "backend_pid", pid, "token", token, "err", err)
		return fmt.Errorf("lease %q: release token %d: %w", a.cfg.Name, token, err)
	}
	a.log.InfoContext(ctx, "lease: gave up leadership", "backend_pid", pid, "token", token)
	return nil
}

// unlock runs the unlock and says why it is not confirmed, or nil.
func (a *Advisory) unlock(ctx context.Context) error {
	// It runs even when ctx has ended. Caught by
	// TestAdvisoryRelease/ReleaseUnlocksAfterItsContextEnded.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ProbeTimeout)
	defer cancel()
	var (
		unlocked bool
		pid      int32
	)
	if err := a.conn.QueryRow(uctx, advisoryReleaseSQL, a.cfg.Key1, a.cfg.Key2).Scan(&unlocked, &pid); err != nil {
		return fmt.Errorf("%w: pg_advisory_unlock(%d, %d) on backend %d failed: %w", ErrUnlockUnconfirmed, a.cfg.Key1, a.cfg.Key2, a.pid, err)
	}
	// The unlock ran on another backend: the one that took the lock still
	// holds it. Caught by TestAdvisoryRelease/UnlockOnAnotherBackendIsReported.
	if pid != a.pid {
		return fmt.Errorf("%w: pg_advisory_unlock(%d, %d) ran on backend %d, but backend %d took the lock (unlock returned %t)", ErrUnlockUnconfirmed, a.cfg.Key1, a.cfg.Key2, pid, a.pid, unlocked)
	}
	// The right backend held no such lock: something else freed it, or
	// the lease's idea of its session is wrong. Caught by
	// TestAdvisoryRelease/UnlockThatFreedNothingIsReported.
	if !unlocked {
		return fmt.Errorf("%w: pg_advisory_unlock(%d, %d) returned false on backend %d: it held no such lock", ErrUnlockUnconfirmed, a.cfg.Key1, a.cfg.Key2, pid)
	}
	return nil
}
