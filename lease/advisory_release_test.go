package lease

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// newLoggedAdvisory builds an Advisory on ep whose log lines are kept.
func newLoggedAdvisory(t *testing.T, ep stack.Endpoint, holder string) (*Advisory, *messages) {
	t.Helper()
	logged := &messages{}
	a := newAdvisoryT(t, ep, holder, allowTransactionPooling, func(c *AdvisoryConfig) { c.Logger = slog.New(logged) })
	return a, logged
}

// loggedLike reports whether a logged line starts with prefix.
func loggedLike(m *messages, prefix string) bool {
	return slices.ContainsFunc(m.list(), func(line string) bool { return strings.HasPrefix(line, prefix) })
}

// TestAdvisoryRelease checks that a release tells the truth: a
// clean hand-over only when pg_advisory_unlock returned true on the
// backend that took the lock.
func TestAdvisoryRelease(t *testing.T) {
	t.Parallel()

	t.Run("CleanReleaseUnlocksOnTheHoldersBackend", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{stack.PostgresName, stack.SessionName} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := stacktest.NewDB(t)
				ctx := testCtx(t)
				admin := stacktest.Connect(t, db.Postgres)
				l, logged := newLoggedAdvisory(t, db.Endpoint(name), "a")
				require.Equal(t, Leader, mustTry(t, ctx, l).Status)
				require.NoError(t, l.Release(ctx))
				require.True(t, loggedLike(logged, "lease: gave up leadership"), "logged %q", logged.list())
				require.False(t, loggedLike(logged, "lease: released, but"), "logged %q", logged.list())
				require.Zero(t, advisoryHolderPID(t, ctx, admin, 271, 1))
			})
		}
	})

	// A shutdown path often releases with a context that has already
	// ended; the unlock still runs, so the answer is still the truth.
	t.Run("ReleaseUnlocksAfterItsContextEnded", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		l, logged := newLoggedAdvisory(t, db.Postgres, "a")
		require.Equal(t, Leader, mustTry(t, ctx, l).Status)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, l.Close(ended))
		require.True(t, loggedLike(logged, "lease: gave up leadership"), "logged %q", logged.list())
	})

	// Through a transaction pool of one backend, another client unlocks
	// the lease's lock on that backend. The lease's own unlock then finds
	// nothing to free on the right backend.
	t.Run("UnlockThatFreedNothingIsReported", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		require.Equal(t, 1, db.Transaction.PoolSize)
		ctx := testCtx(t)
		l, logged := newLoggedAdvisory(t, db.Transaction, "a")
		require.Equal(t, Leader, mustTry(t, ctx, l).Status)
		pid := l.BackendPID()

		var freed bool
		require.NoError(t, stacktest.Connect(t, db.Transaction).QueryRow(ctx, "SELECT pg_advisory_unlock(271, 1)").Scan(&freed))
		require.True(t, freed, "another client of the pool freed the lease's lock on the shared backend")

		err := l.Release(ctx)
		require.ErrorIs(t, err, ErrUnlockUnconfirmed)
		require.ErrorContains(t, err, fmt.Sprintf("returned false on backend %d", pid))
		require.False(t, loggedLike(logged, "lease: gave up leadership"), "no clean hand-over is logged: %q", logged.list())
		require.True(t, loggedLike(logged, "lease: released, but the lock may remain held on a pooled server connection"), "logged %q", logged.list())
	})

	// Through a transaction pool of two backends, the unlock is sent
	// while the backend that took the lock is busy with another client's
	// transaction, so it runs on the other backend. The lock stays on a
	// pooled server connection that no lease owns.
	t.Run("UnlockOnAnotherBackendIsReported", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ep := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 2})
		ctx := testCtx(t)
		admin := stacktest.Connect(t, db.Postgres)
		l, logged := newLoggedAdvisory(t, ep, "a")
		require.Equal(t, Leader, mustTry(t, ctx, l).Status)
		holder := l.BackendPID()
		require.Equal(t, holder, advisoryHolderPID(t, ctx, admin, 271, 1))

		// Two open transactions take both server connections; keep the
		// one on the holder's backend and end the other.
		var onHolder, other pgx.Tx
		for range 2 {
			tx, err := stacktest.Connect(t, ep).Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			var pid int32
			require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
			if pid == holder {
				onHolder = tx
			} else {
				other = tx
			}
		}
		require.NotNil(t, onHolder, "one of the pool's two backends is the holder's")
		require.NotNil(t, other)
		require.NoError(t, other.Commit(ctx))

		err := l.Close(ctx)
		require.ErrorIs(t, err, ErrUnlockUnconfirmed)
		require.ErrorContains(t, err, fmt.Sprintf("but backend %d took the lock", holder))
		require.False(t, loggedLike(logged, "lease: gave up leadership"), "no clean hand-over is logged: %q", logged.list())

		require.NoError(t, onHolder.Rollback(ctx))
		require.Equal(t, holder, advisoryHolderPID(t, ctx, admin, 271, 1), "the lock is still held on the pooled backend after the lease closed")
	})

	// The PID guard resets by closing the connection; through a
	// transaction pool that leaves the lock on the pooled backend, so the
	// reset must not log a clean hand-over.
	t.Run("AResetThroughTransactionPoolingIsNoCleanHandOver", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ep := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 1})
		ctx := testCtx(t)
		admin := stacktest.Connect(t, db.Postgres)
		l, logged := newLoggedAdvisory(t, ep, "a")
		require.Equal(t, Leader, mustTry(t, ctx, l).Status)
		holder := l.BackendPID()
		l.probe = func(ctx context.Context, c conn) (int32, error) {
			pid, err := queryBackendPID(ctx, c)
			return pid + 1, err
		}
		mustTry(t, ctx, l)
		require.True(t, loggedLike(logged, "lease: gave up leadership by closing its connection, but the lock may remain held"), "logged %q", logged.list())
		for _, line := range logged.list() {
			require.NotEqual(t, "lease: gave up leadership", line, "no clean hand-over is logged")
		}
		require.Equal(t, holder, advisoryHolderPID(t, ctx, admin, 271, 1), "the lock stayed on the pooled backend")
	})
}
