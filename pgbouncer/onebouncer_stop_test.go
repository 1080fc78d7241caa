package pgbouncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// What becomes of the lease's lock on the one-bouncer topology when its
// holder stops gracefully and when the admin console sends RECONNECT. The
// assertions are the outcomes; how long each took is logged (run with -v),
// and doc.go records the figures measured on PgBouncer 1.18.
func TestOneBouncerLockAtStopAndReconnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Session pooling runs server_reset_query (DISCARD ALL, which unlocks
	// every advisory lock) when the client leaves, and keeps the backend.
	t.Run("CloseOfTheLeaseClientFreesTheLockAndKeepsTheBackend", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1)
		leader, backend := acquire(t, b.lease)
		before := b.holders(t)
		require.Equal(t, []int{backend}, before)

		require.NoError(t, leader.Close(ctx))
		took := waitFor(t, "the lock is released after a graceful close", func() bool { return len(b.holders(t)) == 0 })
		require.True(t, b.alive(t, backend), "the backend stays in the pool, reset")
		next := stacktest.Connect(t, b.lease)
		got, nextBackend := tryLock(t, next)
		require.Equal(t, backend, nextBackend, "the reset backend is handed to the next lease client")
		require.True(t, got, "which acquires")
		t.Logf("close: pg_locks before %v, empty %v after close; backend %d alive; next client acquired on backend %d",
			before, took.Round(time.Microsecond), backend, nextBackend)
	})

	// The reset query is what frees it: with one that unlocks nothing, the
	// lock outlives the client on the idle session-name backend, and the
	// next lease client is handed that backend and re-enters the lock.
	t.Run("WithoutAnUnlockingResetQueryTheLockOutlivesTheClient", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1, func(c *pgbouncer.Config) { c.ServerResetQuery = "SELECT 1" })
		// Without DISCARD ALL the next client would also inherit pgx's
		// cached statements (42P05): session pooling passes named
		// statements through even where max_prepared_statements is on
		// (1.21+). The endpoint's pool mode and prepared-statement limit
		// pick the query mode; transaction pooling with no limit picks one
		// that prepares nothing, on every version.
		b.lease.PoolMode, b.lease.MaxPreparedStatements = pgbouncer.PoolTransaction, 0
		leader, backend := acquire(t, b.lease)

		b.closeAndKeep(t, leader, backend)
		next := stacktest.Connect(t, b.lease)
		got, nextBackend := tryLock(t, next)
		require.Equal(t, backend, nextBackend, "the idle backend is handed to the next client")
		require.True(t, got, "which re-enters the lock it never took")
		t.Logf("server_reset_query = SELECT 1: backend %d held the lock 200 ms after close (pg_locks %v); next client re-entered it on backend %d",
			backend, b.holders(t), nextBackend)
	})

	// RECONNECT closes a server connection only once it is released. In
	// session pooling that is when the client leaves, so the leader keeps
	// its backend and its lock until then.
	t.Run("ReconnectOfTheLeaseNameWaitsForTheClient", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1)
		leader, backend := acquire(t, b.lease)

		require.NoError(t, b.admin.Reconnect(ctx, b.db.Name+"_lease"))
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			require.Equal(t, backend, pid(t, leader), "the leader keeps its backend after RECONNECT")
			require.Equal(t, []int{backend}, b.holders(t), "and its lock")
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, leader.Close(ctx))
		took := waitFor(t, "the backend ends once the leader leaves", func() bool {
			return !b.alive(t, backend) && len(b.holders(t)) == 0
		})
		t.Logf("RECONNECT lease name: backend %d and its lock kept for 500 ms while the leader stayed; after close, backend gone and pg_locks empty %v later",
			backend, took.Round(time.Microsecond))
	})

	// RECONNECT of the work name touches only the work name's pool.
	t.Run("ReconnectOfTheWorkNameLeavesTheLeaseAlone", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1)
		leader, backend := acquire(t, b.lease)
		worker := stacktest.Connect(t, b.work)
		workBackend := pid(t, worker)

		require.NoError(t, b.admin.Reconnect(ctx, b.db.Name))
		took := waitFor(t, "the work name gets a new backend", func() bool { return pid(t, worker) != workBackend })
		require.Equal(t, backend, pid(t, leader))
		require.Equal(t, []int{backend}, b.holders(t))
		t.Logf("RECONNECT work name: work backend %d replaced after %v; lease backend %d kept the lock (pg_locks %v)",
			workBackend, took.Round(time.Microsecond), backend, b.holders(t))
	})

	// For contrast: a lock taken through the work name outlives its client
	// on the pooled backend (an orphaned lock), and RECONNECT
	// of the work name is what ends it, since that backend is idle.
	t.Run("OrphanedLockOnTheWorkNameEndsAtReconnect", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1)
		client, backend := acquire(t, b.work)
		b.closeAndKeep(t, client, backend)
		servers, err := b.admin.Servers(ctx)
		require.NoError(t, err)
		var state string
		for _, s := range servers {
			if s.RemotePID == backend {
				state = s.State
			}
		}
		require.Equal(t, "idle", state, "SHOW SERVERS: the holder is an idle server no client is linked to")

		require.NoError(t, b.admin.Reconnect(ctx, b.db.Name))
		took := waitFor(t, "RECONNECT closes the idle holder", func() bool {
			return !b.alive(t, backend) && len(b.holders(t)) == 0
		})
		t.Logf("orphan on work name: backend %d (SHOW SERVERS %s) held the lock 200 ms after its client closed; gone %v after RECONNECT",
			backend, state, took.Round(time.Microsecond))
	})
}

// closeAndKeep closes conn, the client that holds the lock on backend, and
// checks that 200 ms later the lock is still held there, by no client.
func (b oneBouncer) closeAndKeep(t *testing.T, conn *pgx.Conn, backend int) {
	t.Helper()
	require.NoError(t, conn.Close(context.Background()))
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, []int{backend}, b.holders(t), "nothing unlocked the lock on backend %d", backend)
}
