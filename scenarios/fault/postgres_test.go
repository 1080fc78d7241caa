package fault_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The Postgres faults act on real backends and a real postmaster.

func TestTerminateLeaderBackend(t *testing.T) {
	t.Parallel()
	t.Run("EndsTheBackendThatHoldsTheLock", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		// The leader's lease connection, holding the lock on its backend.
		lease := mustConnect(t, db.Postgres.DSN)
		require.True(t, tryLock(t, lease))
		pid, err := backendPID(lease, 10*time.Second)
		require.NoError(t, err)
		tg := newTarget(t, db, shortTTL)
		tg.leader.LeaseBackendPID = pid

		require.NoError(t, fault.TerminateLeaderBackend.Inject(context.Background(), tg))

		require.False(t, backendAlive(t, db.Stack, pid), "backend %d is gone from pg_stat_activity", pid)
		_, err = backendPID(lease, 5*time.Second)
		require.Error(t, err, "the lease connection lost its backend")
		other := mustConnect(t, db.Postgres.DSN)
		require.True(t, tryLock(t, other), "the lock died with its backend")
		require.Contains(t, fmtEvents(tg.Events()), "terminated")
		require.Equal(t, fmt.Sprintf("injected r1 pg_terminate_backend(%d) (reported by the leader)", pid), tg.Events()[0],
			"the act is marked first, so the failover is measured from it")
	})
	t.Run("FindsTheLockHolderWhenNoPIDIsReported", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		tg := newTarget(t, db, shortTTL)
		require.ErrorContains(t, fault.TerminateLeaderBackend.Inject(context.Background(), tg),
			"reported no lease backend PID and no backend holds advisory lock (271, 1)")
		lease := mustConnect(t, db.Postgres.DSN)
		require.True(t, tryLock(t, lease))
		pid, err := backendPID(lease, 10*time.Second)
		require.NoError(t, err)

		require.NoError(t, fault.TerminateLeaderBackend.Inject(context.Background(), tg))

		require.False(t, backendAlive(t, db.Stack, pid))
		require.Contains(t, fmtEvents(tg.Events()), "holding the advisory lock")
	})
	t.Run("FindsACommandsBackendByApplicationName", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		tg := newTarget(t, db, fault.Setting{AppNames: true, TTL: time.Second, Work: time.Hour})
		require.ErrorContains(t, fault.TerminateLeaderBackend.Inject(context.Background(), tg),
			"reported no lease backend PID and no backend of "+db.Name+" has application_name doublerun-r1")
		u, err := url.Parse(db.Postgres.DSN)
		require.NoError(t, err)
		q := u.Query()
		q.Set("application_name", fault.AppName("r1"))
		u.RawQuery = q.Encode()
		lease := mustConnect(t, u.String())
		pid, err := backendPID(lease, 10*time.Second)
		require.NoError(t, err)

		require.NoError(t, fault.TerminateLeaderBackend.Inject(context.Background(), tg))

		require.False(t, backendAlive(t, db.Stack, pid))
		require.Contains(t, fmtEvents(tg.Events()), "application_name doublerun-r1")
	})
	t.Run("NeedsABackendItCanFind", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			s    fault.Setting
			want bool
		}{
			{"ReportsItsBackend", fault.Setting{ReportsBackendPID: true}, true},
			{"HoldsAnAdvisoryLock", fault.Setting{AdvisoryLock: &lock}, true},
			{"Both", shortTTL, true},
			{"AReplicaCommandByItsApplicationName", fault.Setting{AppNames: true}, true},
			{"Neither", fault.Setting{Pooled: true, TTL: time.Second}, false},
		} {
			require.Equal(t, tc.want, fault.TerminateLeaderBackend.Available(tc.s), tc.name)
		}
	})
	t.Run("NoPIDAndNoLockIsAnError", func(t *testing.T) {
		t.Parallel()
		tg := newTarget(t, stacktest.NewDB(t), fault.Setting{ReportsBackendPID: true, TTL: time.Second, Work: time.Hour})
		require.ErrorContains(t, fault.TerminateLeaderBackend.Inject(context.Background(), tg),
			"leader r1 reported no lease backend PID, and its lease holds no advisory lock to find it by")
	})
}

// A Postgres restart needs a stack of its own: it would cut every other
// test off the shared one.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := stacktest.NewDBOn(t, stacktest.Own(t))
	tg := newTarget(t, db, shortTTL)
	client := mustConnect(t, db.Postgres.DSN)
	startedAt := func(c *pgxConn) time.Time {
		var at time.Time
		require.NoError(t, c.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&at))
		return at
	}
	before := startedAt(client)

	require.NoError(t, fault.PostgresRestart.Inject(ctx, tg))

	_, err := backendPID(client, 5*time.Second)
	require.Error(t, err, "the restart ended every backend")
	require.True(t, startedAt(mustConnect(t, db.Postgres.DSN)).After(before), "Postgres started again")
	require.Contains(t, fmtEvents(tg.Events()), "postgres restarted")
}
