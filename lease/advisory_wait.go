package lease

import (
	"context"
	"fmt"
)

// advisoryWaitSQL waits for the lock for at most $3 (a lock_timeout such
// as '1000ms') and reports the backend that took it, in one statement.
//
// The bound is set with set_config(..., true), which is local to the
// statement's own implicit transaction: it covers this wait and nothing
// else, and it is gone when the statement ends, however it ends. A
// session-level SET lock_timeout would outlive the wait, both on the lease's
// session, where it would make the token grant fail instead of waiting for
// an open fenced write, and on a session-pooled server connection. SET
// LOCAL in an explicit transaction would be as tight, but needs BEGIN and
// COMMIT around the wait: more round trips, or a pipeline whose failure
// modes are harder to read. The MATERIALIZED CTE is evaluated before the
// outer select list, so the bound is in force before pg_advisory_lock
// starts to wait. The advisory lock itself is session-level: it outlives
// the implicit transaction, as pg_try_advisory_lock's does.
//
// The lock_timeout bound is caught by
// TestAdvisoryWait/FollowerWaitEndsAtItsBoundAsFollower; the bound being
// local (true) and the PID taken in the same statement by
// TestAdvisoryWait/WaitingAcquireRecordsTheLockHoldersPID.
const advisoryWaitSQL = "WITH bound AS MATERIALIZED (SELECT set_config('lock_timeout', $3, true)) SELECT pg_advisory_lock($1, $2), pg_backend_pid() FROM bound"

// Acquire implements Acquirer. With Wait set, a follower waits in
// pg_advisory_lock for at most WaitTimeout and is Leader as soon as the
// server grants it the lock: when the holder unlocks, or its session ends
// (a killed process, a terminated backend). A wait that lock_timeout ends
// is Follower; a wait that fails, or a server silent for WaitTimeout +
// ProbeTimeout, is Faulted and resets the lease; the error is non-nil only
// when ctx ended, and the lease is reset then too, so no statement is left
// running on its connection (pgx sends the server a cancel request as it
// closes a connection cancelled mid-statement). A leader probes its session
// as TryAcquire does and does not wait.
//
// Without Wait, Acquire is TryAcquire. Release and Close wait for an
// Acquire in progress; cancel its ctx to end a wait at once.
func (a *Advisory) Acquire(ctx context.Context) (Result, error) {
	return a.poll(ctx, a.cfg.Wait)
}

// waitLock waits for the lock on the lease connection. locked is false
// with a nil error when lock_timeout ended the wait: the lock is held
// elsewhere, the healthy Follower state.
func (a *Advisory) waitLock(ctx context.Context) (locked bool, pid int32, err error) {
	// The server ends the wait after WaitTimeout; the client gives it one
	// round trip more before it calls the server silent. Caught by
	// TestAdvisoryMock/WaitOnASilentServerIsFaultedAfterItsBound.
	wctx, cancel := context.WithTimeout(ctx, a.cfg.WaitTimeout+a.cfg.ProbeTimeout)
	defer cancel()
	err = a.conn.QueryRow(wctx, advisoryWaitSQL, a.cfg.Key1, a.cfg.Key2, a.lockTimeout()).Scan(nil, &pid)
	// A wait that ran out is a follower, not a fault. Caught by
	// TestAdvisoryWait/FollowerWaitEndsAtItsBoundAsFollower.
	if isLockTimeout(err) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	return true, pid, nil
}

// lockTimeout is WaitTimeout as a lock_timeout value, in whole
// milliseconds; validate keeps it at least 1ms, because 0 would mean no
// bound at all.
func (a *Advisory) lockTimeout() string {
	return fmt.Sprintf("%dms", a.cfg.WaitTimeout.Milliseconds())
}
