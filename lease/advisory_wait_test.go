package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// withWait turns on Acquire's wait, bounded by d, and names the lease's
// connection after holder so a test can find it in pg_stat_activity.
func withWait(holder string, d time.Duration) func(*AdvisoryConfig) {
	return func(c *AdvisoryConfig) {
		c.Wait, c.WaitTimeout, c.ApplicationName = true, d, "wait-"+holder
	}
}

// waitForBackend waits until a backend of the current database whose
// application_name is app matches cond, a condition on the columns of
// pg_stat_activity.
func waitForBackend(t testing.TB, ctx context.Context, admin *pgx.Conn, app, cond string) {
	t.Helper()
	waitFor(t, 10*time.Second, app+": "+cond, func() (bool, error) {
		var found bool
		err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND `+cond+`)`, app).Scan(&found)
		return found, err
	})
}

// waitingForAdvisoryLock waits until the connection named app is waiting
// for an advisory lock on the server.
func waitingForAdvisoryLock(t testing.TB, ctx context.Context, admin *pgx.Conn, app string) {
	t.Helper()
	waitForBackend(t, ctx, admin, app, "wait_event_type = 'Lock' AND wait_event = 'advisory'")
}

// heldAndWaiting returns a lease "a" that leads on ep, with its first
// result, and a lease "b" whose Acquire waits for at most bound.
func heldAndWaiting(t *testing.T, b *serverBundle, ep stack.Endpoint, bound time.Duration, mods ...func(*AdvisoryConfig)) (holder, follower *Advisory, first Result) {
	t.Helper()
	holder = newAdvisoryT(t, ep, "a")
	follower = newAdvisoryT(t, ep, "b", append([]func(*AdvisoryConfig){withWait("b", bound)}, mods...)...)
	first = mustTry(t, b.ctx, holder)
	require.Equal(t, Leader, first.Status)
	return holder, follower, first
}

// mustAcquire calls l.Acquire and fails the test on its error.
func mustAcquire(t testing.TB, ctx context.Context, l Acquirer) Result {
	t.Helper()
	res, err := l.Acquire(ctx)
	require.NoError(t, err)
	return res
}

// acquireAsync runs l.Acquire in its own goroutine, as a waiting replica
// does, and delivers what it returned.
type acquired struct {
	res Result
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, l Acquirer) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		res, err := l.Acquire(ctx)
		out <- acquired{res: res, err: err, at: time.Now()}
	}()
	return out
}

// await returns what acquireAsync delivered, failing the test after within.
func await(t testing.TB, got <-chan acquired, within time.Duration) acquired {
	t.Helper()
	select {
	case a := <-got:
		return a
	case <-time.After(within):
		t.Fatalf("Acquire did not return within %s", within)
		return acquired{}
	}
}

// awaitAll returns the results of several acquireAsync calls, in order.
func awaitAll(t testing.TB, within time.Duration, got ...<-chan acquired) []Result {
	t.Helper()
	var results []Result
	for _, g := range got {
		a := await(t, g, within)
		require.NoError(t, a.err)
		results = append(results, a.res)
	}
	return results
}

// cancelWhileWaiting starts l.Acquire, lets waiting see it wait, cancels
// its context, and checks that the cancellation passed through at once.
func cancelWhileWaiting(t testing.TB, ctx context.Context, l Acquirer, waiting func()) {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := acquireAsync(cctx, l)
	waiting()
	cancel()
	a := await(t, got, 5*time.Second)
	require.ErrorIs(t, a.err, context.Canceled)
	require.Zero(t, a.res)
}

func TestAdvisoryWait(t *testing.T) {
	t.Parallel()

	setup := setupServer

	t.Run("FollowerWaitEndsAtItsBoundAsFollower", func(t *testing.T) {
		t.Parallel()
		const bound = 300 * time.Millisecond
		b := setup(t)
		_, follower, _ := heldAndWaiting(t, b, b.db.Postgres, bound, func(c *AdvisoryConfig) { c.ProbeTimeout = 3 * time.Second })

		start := time.Now()
		res := mustAcquire(t, b.ctx, follower)
		waited := time.Since(start)
		require.Equal(t, Follower, res.Status, "a wait that lock_timeout ended is a healthy follower: %+v", res)
		require.GreaterOrEqual(t, waited, bound, "it waited for the lock")
		require.Less(t, waited, bound+2*time.Second, "the server ended the wait at WaitTimeout")

		// A wait that ran out is not a fault, and its bound is gone with
		// its statement.
		require.NotNil(t, follower.conn, "a wait that ran out is not a fault: the connection is kept")
		var lockTimeout string
		require.NoError(t, follower.conn.QueryRow(b.ctx, "SHOW lock_timeout").Scan(&lockTimeout))
		require.Equal(t, "0", lockTimeout)
	})

	// The server grants the lock to the waiting follower the moment the
	// holder lets go: however it lets go, the follower is Leader long
	// before its WaitTimeout.
	t.Run("FollowerIsLeaderAsSoonAsTheHolderLetsGo", func(t *testing.T) {
		t.Parallel()
		faults := []struct {
			name string
			do   func(t *testing.T, b *serverBundle, holder *Advisory)
		}{
			{"Release", func(t *testing.T, b *serverBundle, holder *Advisory) { require.NoError(t, holder.Release(b.ctx)) }},
			{"Close", func(t *testing.T, b *serverBundle, holder *Advisory) { require.NoError(t, holder.Close(b.ctx)) }},
			{"ConnectionDrops", func(t *testing.T, b *serverBundle, holder *Advisory) { crash(b.ctx, holder) }},
			{"BackendIsTerminated", func(t *testing.T, b *serverBundle, holder *Advisory) {
				var ok bool
				require.NoError(t, b.admin.QueryRow(b.ctx, "SELECT pg_terminate_backend($1)", advisoryHolderPID(t, b.ctx, b.admin, 271, 1)).Scan(&ok))
				require.True(t, ok)
			}},
		}
		for _, epName := range []string{stack.PostgresName, stack.SessionName} {
			for _, fault := range faults {
				t.Run(epName+"/"+fault.name, func(t *testing.T) {
					t.Parallel()
					const bound = 20 * time.Second
					b := setup(t)
					holder, follower, first := heldAndWaiting(t, b, b.db.Endpoint(epName), bound)
					got := acquireAsync(b.ctx, follower)
					waitingForAdvisoryLock(t, b.ctx, b.admin, "wait-b")
					fault.do(t, b, holder)
					a := await(t, got, bound/2)
					require.NoError(t, a.err)
					require.Equal(t, Leader, a.res.Status, "%+v", a.res)
					require.Greater(t, a.res.Term.Token, first.Term.Token)
					require.Equal(t, follower.BackendPID(), advisoryHolderPID(t, b.ctx, b.admin, 271, 1))
				})
			}
		}
	})

	t.Run("WaitingAcquireRecordsTheLockHoldersPID", func(t *testing.T) {
		t.Parallel()
		// Through PgBouncer the cancel key's PID is the bouncer's own, so
		// only the PID read in the acquire statement can be the holder's.
		b := setup(t)
		holder, follower, _ := heldAndWaiting(t, b, b.db.Session, 20*time.Second)
		got := acquireAsync(b.ctx, follower)
		waitingForAdvisoryLock(t, b.ctx, b.admin, "wait-b")
		require.NoError(t, holder.Release(b.ctx))
		won := await(t, got, 10*time.Second)
		require.NoError(t, won.err)
		require.Equal(t, Leader, won.res.Status)

		pid := advisoryHolderPID(t, b.ctx, b.admin, 271, 1)
		require.NotZero(t, pid)
		require.Equal(t, pid, follower.BackendPID(), "the PID recorded is the lock holder's")
		require.Equal(t, won.res, mustAcquire(t, b.ctx, follower), "the PID guard's probe agrees, so the leader keeps its term")

		// The wait's bound ended with its statement: the leader's session
		// has the server's lock_timeout again, so a later statement that
		// must wait for a lock (the next token grant) is not cut short.
		var lockTimeout string
		require.NoError(t, follower.conn.QueryRow(b.ctx, "SHOW lock_timeout").Scan(&lockTimeout))
		require.Equal(t, "0", lockTimeout)
	})

	t.Run("RefusesATransactionPooledEndpointEvenWhenAllowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, allow := range []bool{false, true} {
			_, err := NewAdvisory(b.ctx, AdvisoryConfig{DSN: b.db.Transaction.DSN, Wait: true, AllowTransactionPooling: allow, Logger: testLogger(t)})
			require.ErrorIs(t, err, ErrTransactionPooled, "AllowTransactionPooling=%t", allow)
			require.ErrorContains(t, err, "waiting follower holds a pooled server connection")
			require.ErrorContains(t, err, "AllowTransactionPooling does not lift this refusal")
		}
		// The same endpoint without Wait is still the #556 reproduction.
		require.Equal(t, EndpointTransactionPooled, newAdvisoryT(t, b.db.Transaction, "a", allowTransactionPooling).Endpoint().Kind)
	})

	t.Run("CancelledWaitPassesThroughAndLeavesNoBackendWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, follower, _ := heldAndWaiting(t, b, b.db.Postgres, 30*time.Second)

		cancelWhileWaiting(t, b.ctx, follower, func() { waitingForAdvisoryLock(t, b.ctx, b.admin, "wait-b") })
		require.Nil(t, follower.conn, "a connection cancelled mid-statement is reset")
		// The server stops waiting too, long before the 30 s lock_timeout:
		// no backend of the follower is left queued for the lock.
		waitFor(t, 5*time.Second, "the follower's backend ends", func() (bool, error) {
			var n int
			err := b.admin.QueryRow(b.ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wait-b'").Scan(&n)
			return n == 0, err
		})
		require.Equal(t, Follower, mustTry(t, b.ctx, follower).Status, "the lease reconnects at its next call")
	})

	t.Run("OnlyOneOfTwoWaitersIsGrantedTheLock", func(t *testing.T) {
		t.Parallel()
		const bound = 2 * time.Second
		b := setup(t)
		holder := newAdvisoryT(t, b.db.Postgres, "a")
		waiters := []*Advisory{newAdvisoryT(t, b.db.Postgres, "b", withWait("b", bound)), newAdvisoryT(t, b.db.Postgres, "c", withWait("c", bound))}
		require.Equal(t, Leader, mustTry(t, b.ctx, holder).Status)
		var got []<-chan acquired
		for i, w := range waiters {
			got = append(got, acquireAsync(b.ctx, w))
			waitingForAdvisoryLock(t, b.ctx, b.admin, fmt.Sprintf("wait-%c", 'b'+i))
		}
		require.NoError(t, holder.Release(b.ctx))
		results := awaitAll(t, 2*bound, got...)
		require.Equal(t, 1, leaders(results), "results %+v", results)
		require.Equal(t, Leader, results[0].Status, "the server grants the lock to the waiter that queued first")
		require.Equal(t, Follower, results[1].Status)
	})

	t.Run("TryAcquireNeverWaits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, waiter, _ := heldAndWaiting(t, b, b.db.Postgres, 20*time.Second)
		polling := newAdvisoryT(t, b.db.Postgres, "c")
		for _, l := range []Acquirer{Acquirer(polling), tryOnly{waiter}} {
			start := time.Now()
			require.Equal(t, Follower, mustAcquire(t, b.ctx, l).Status)
			require.Less(t, time.Since(start), 5*time.Second, "without Wait, Acquire is TryAcquire; TryAcquire never waits")
		}
	})
}

// tryOnly calls TryAcquire where an Acquirer is expected.
type tryOnly struct{ l Lease }

func (t tryOnly) Acquire(ctx context.Context) (Result, error) { return t.l.TryAcquire(ctx) }
