package fault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// Faults that act on Postgres itself.

// ---------------------------------------------------------------------------
// TERMINATE_LEADER_BACKEND

// TerminateLeaderBackend runs pg_terminate_backend on the Postgres
// backend that holds the leader's lease, through a direct connection:
// the PID the strategy reports (Replica.LeaseBackendPID) or, when it
// reports none, the backend holding the strategy's advisory lock in
// the run's database, or, for a replica command, its oldest backend by
// application_name (AppName).
var TerminateLeaderBackend Fault = terminateLeaderBackend{}

type terminateLeaderBackend struct{}

func (terminateLeaderBackend) Name() string { return "TERMINATE_LEADER_BACKEND" }

// Available: only a lease whose leadership lives on one backend has a
// backend to lose, and the fault must be able to find it: reported by the
// lease, or holding its advisory lock.
func (terminateLeaderBackend) Available(s Setting) bool {
	return s.ReportsBackendPID || s.AdvisoryLock != nil || s.AppNames
}

func (terminateLeaderBackend) Inject(ctx context.Context, t Target) error {
	// Connect before the strike: a new backend takes tens of milliseconds
	// to start (90 ms was seen on the docker provider), which after the
	// strike left the leader's piece nearly over when the fault landed, so
	// that a follower polling after it ended saw no overlap.
	db := t.Database()
	conn, err := pgx.Connect(ctx, t.Stack().Postgres().DSN)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	l, err := strike(ctx, t)
	if err != nil {
		return err
	}
	pid, how := l.LeaseBackendPID, "reported by the leader"
	if lock := t.Setting().AdvisoryLock; pid == 0 && lock != nil {
		// A lease that does not report its backend: the backend that holds
		// the advisory lock in the run's database is the one.
		err := conn.QueryRow(ctx, `SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1 AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 2
			ORDER BY l.pid LIMIT 1`, db, lock.Key1, lock.Key2).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("leader %s reported no lease backend PID and no backend holds advisory lock (%d, %d) in %s", l.ID, lock.Key1, lock.Key2, db)
		}
		if err != nil {
			return fmt.Errorf("find the lock holder in pg_locks: %w", err)
		}
		how = "holding the advisory lock"
	}
	if pid == 0 && t.Setting().AppNames {
		// A replica command that reports no backend: the oldest backend
		// its connections opened, which its lease's usually is.
		err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2
			ORDER BY backend_start LIMIT 1`, db, AppName(l.ID)).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("leader %s reported no lease backend PID and no backend of %s has application_name %s", l.ID, db, AppName(l.ID))
		}
		if err != nil {
			return fmt.Errorf("find the leader's backend in pg_stat_activity: %w", err)
		}
		how = "application_name " + AppName(l.ID)
	}
	if pid == 0 {
		return fmt.Errorf("leader %s reported no lease backend PID, and its lease holds no advisory lock to find it by", l.ID)
	}
	// Only a backend of the run's own database: a PID the leader reported
	// may have ended and been reused since.
	var done bool
	// Caught by TestTerminateLeaderBackend/EndsTheBackendThatHoldsTheLock.
	injected(ctx, t, l.ID, "pg_terminate_backend(%d) (%s)", pid, how)
	err = conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND datname = $2`,
		pid, db).Scan(&done)
	if errors.Is(err, pgx.ErrNoRows) {
		event(ctx, t, l.ID, "backend %d (%s) already gone", pid, how)
		return nil
	}
	if err != nil {
		return fmt.Errorf("pg_terminate_backend(%d): %w", pid, err)
	}
	if !done {
		return fmt.Errorf("pg_terminate_backend(%d) returned false", pid)
	}
	// pg_terminate_backend only signals; wait until the backend is gone, so
	// the fault has really happened when Inject returns.
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			event(ctx, t, l.ID, "backend %d (%s) terminated", pid, how)
			return nil
		}
		if err := wait.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("backend %d still running: %w", pid, err)
		}
	}
}

// ---------------------------------------------------------------------------
// POSTGRES_RESTART

// PostgresRestart stops Postgres (fast shutdown: every backend ends) and
// starts it again on the same address.
var PostgresRestart Fault = postgresRestart{}

type postgresRestart struct{}

func (postgresRestart) Name() string           { return "POSTGRES_RESTART" }
func (postgresRestart) Available(Setting) bool { return true }
func (postgresRestart) Timeout() time.Duration { return 3 * time.Minute }

// Inject restarts Postgres. The oracle's own connections are pools that
// reconnect, but a pool hands out a dead connection it has not yet pinged;
// Inject therefore logs an event until one succeeds, so the runner's next
// event finds a live connection.
func (postgresRestart) Inject(ctx context.Context, t Target) error {
	if _, err := strike(ctx, t); err != nil {
		return err
	}
	s := t.Stack()
	rerr := s.StopPostgres(ctx)
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	if err := s.StartPostgres(rctx); err != nil {
		return errors.Join(rerr, fmt.Errorf("start postgres: %w", err))
	}
	if rerr != nil {
		return fmt.Errorf("stop postgres: %w", rerr)
	}
	for {
		err := t.Event(rctx, oracle.EventChaos, "", "postgres restarted")
		if err == nil {
			return nil
		}
		if herr := wait.Sleep(rctx, 50*time.Millisecond); herr != nil {
			return fmt.Errorf("the oracle did not come back after the restart: %w", err)
		}
	}
}
