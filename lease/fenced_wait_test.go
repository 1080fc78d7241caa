package lease

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack"
)

func withFencedWait(d time.Duration) func(*FencedConfig) {
	return func(c *FencedConfig) { c.Wait, c.WaitTimeout = true, d }
}

// waitingForRelease waits until the Fenced follower holder has asked how
// long the term has left and gone idle: it is in its wait, listening.
func waitingForRelease(t testing.TB, ctx context.Context, admin *pgx.Conn, holder string) {
	t.Helper()
	waitForBackend(t, ctx, admin, "fenced-"+holder, "state = 'idle' AND query LIKE '%expires_at - clock_timestamp()%'")
}

// leaderAndWaiter returns a Fenced lease "a" that leads directly with a
// one-hour TTL, with its first result, and a lease "b" whose Acquire waits
// for at most bound.
func leaderAndWaiter(t *testing.T, b *serverBundle, bound time.Duration) (leader, follower *Fenced, first Result) {
	t.Helper()
	leader = newFencedT(t, b.db, b.db.Postgres, "a", withTTL(time.Hour))
	follower = newFencedT(t, b.db, b.db.Postgres, "b", withTTL(time.Hour), withFencedWait(bound))
	first = mustTry(t, b.ctx, leader)
	require.Equal(t, Leader, first.Status)
	return leader, follower, first
}

func TestFencedWait(t *testing.T) {
	t.Parallel()

	setup := setupServer

	t.Run("WaitsOnADirectEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		f := newFencedT(t, b.db, b.db.Postgres, "a", withFencedWait(time.Second))
		require.True(t, f.Waits())
		require.Equal(t, EndpointDirect, f.Endpoint().Kind)
		require.False(t, newFencedT(t, b.db, b.db.Postgres, "b").Waits(), "without Wait, Acquire is TryAcquire")
	})

	// A release's notification wakes a follower waiting in Acquire, long
	// before its WaitTimeout or the one-hour TTL.
	t.Run("ReleaseWakesAWaitingFollower", func(t *testing.T) {
		t.Parallel()
		const bound = 20 * time.Second
		b := setup(t)
		leader, follower, first := leaderAndWaiter(t, b, bound)
		ctx, cancel := context.WithCancel(b.ctx)
		t.Cleanup(cancel) // before the leases' Close, which waits for Acquire

		got := acquireAsync(ctx, follower)
		waitingForRelease(t, b.ctx, b.admin, "b")
		require.NoError(t, leader.Release(ctx))
		a := await(t, got, bound/4)
		require.NoError(t, a.err)
		require.Equal(t, Leader, a.res.Status, "%+v", a.res)
		require.Equal(t, first.Term.Token+1, a.res.Term.Token)
	})

	t.Run("FollowerWaitEndsAtItsBoundAsFollower", func(t *testing.T) {
		t.Parallel()
		const bound = 300 * time.Millisecond
		b := setup(t)
		_, follower, _ := leaderAndWaiter(t, b, bound)

		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		res, err := follower.Acquire(ctx)
		waited := time.Since(start)
		require.NoError(t, err, "the lease's own bound ends the wait, not the caller's context")
		require.Equal(t, Follower, res.Status)
		require.GreaterOrEqual(t, waited, bound)
		require.Less(t, waited, bound+2*time.Second)
		require.NotNil(t, follower.conn, "a wait that ran out keeps its connection")
	})

	// A holder that dies sends no notification: the follower takes over
	// when the term expires, not when its WaitTimeout does.
	t.Run("FollowerWakesWhenTheTermExpires", func(t *testing.T) {
		t.Parallel()
		const ttl = time.Second
		b := setup(t)
		leader := newFencedT(t, b.db, b.db.Postgres, "a", withTTL(ttl))
		follower := newFencedT(t, b.db, b.db.Postgres, "b", withTTL(ttl), withFencedWait(time.Minute))
		first := mustTry(t, b.ctx, leader)
		require.Equal(t, Leader, first.Status)
		crash(b.ctx, leader)

		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		res, err := follower.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, Leader, res.Status, "taken over when the dead holder's term expired")
		require.Greater(t, res.Term.Token, first.Term.Token)
	})

	// Through PgBouncer Acquire does not wait: a transaction pool has no
	// session for LISTEN, and a session pool can be desynchronised by a
	// notification (see checkEndpoint). Acquire is TryAcquire there, and
	// the lease stays exactly as correct as Fenced always is.
	t.Run("ThroughPgBouncerAcquireDoesNotWait", func(t *testing.T) {
		t.Parallel()
		for name, kind := range map[string]EndpointKind{stack.SessionName: EndpointPinned, stack.TransactionName: EndpointTransactionPooled} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				throughPgBouncerAcquireDoesNotWait(t, setup(t), name, kind)
			})
		}
	})

	t.Run("OnlyOneOfTwoWaitersWins", func(t *testing.T) {
		t.Parallel()
		const bound = 2 * time.Second
		b := setup(t)
		leader := newFencedT(t, b.db, b.db.Postgres, "a", withTTL(time.Hour))
		waiters := []*Fenced{
			newFencedT(t, b.db, b.db.Postgres, "b", withTTL(time.Hour), withFencedWait(bound)),
			newFencedT(t, b.db, b.db.Postgres, "c", withTTL(time.Hour), withFencedWait(bound)),
		}
		require.Equal(t, Leader, mustTry(t, b.ctx, leader).Status)
		var got []<-chan acquired
		for i, w := range waiters {
			got = append(got, acquireAsync(b.ctx, w))
			waitingForRelease(t, b.ctx, b.admin, string(rune('b'+i)))
		}
		require.NoError(t, leader.Release(b.ctx))
		results := awaitAll(t, 2*bound, got...)
		require.Equal(t, 1, leaders(results), "results %+v", results)
		require.ElementsMatch(t, []Status{Leader, Follower}, []Status{results[0].Status, results[1].Status},
			"the loser's wait ran out, and its connection served the last try: %+v", results)
	})

	t.Run("HolderRenewsWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newFencedT(t, b.db, b.db.Postgres, "a", withFencedWait(20*time.Second))
		first := mustAcquire(t, b.ctx, l)
		require.Equal(t, Leader, first.Status)
		start := time.Now()
		require.Equal(t, first, mustAcquire(t, b.ctx, l))
		require.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("CancelledWaitPassesThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		leader, follower, _ := leaderAndWaiter(t, b, 30*time.Second)
		cancelWhileWaiting(t, b.ctx, follower, func() { waitingForRelease(t, b.ctx, b.admin, "b") })
		require.Nil(t, follower.conn, "the connection is dropped")

		require.NoError(t, leader.Release(b.ctx))
		require.Equal(t, Leader, mustAcquire(t, b.ctx, follower).Status, "the next call reconnects and listens again")
	})
}

// throughPgBouncerAcquireDoesNotWait checks that a Fenced lease with Wait
// on the stack's PgBouncer endpoint called name, which CheckEndpoint
// reports as kind, does not wait and still hands over.
func throughPgBouncerAcquireDoesNotWait(t *testing.T, b *serverBundle, name string, kind EndpointKind) {
	ep := b.db.Endpoint(name)
	leader := newFencedT(t, b.db, ep, "a", withTTL(time.Hour), withFencedWait(20*time.Second))
	follower := newFencedT(t, b.db, ep, "b", withTTL(time.Hour), withFencedWait(20*time.Second))
	require.Equal(t, kind, follower.Endpoint().Kind)
	require.False(t, follower.Waits())
	first := mustAcquire(t, b.ctx, leader)
	require.Equal(t, Leader, first.Status)

	start := time.Now()
	require.Equal(t, Follower, mustAcquire(t, b.ctx, follower).Status)
	require.Less(t, time.Since(start), 5*time.Second, "no wait through PgBouncer")

	require.NoError(t, leader.Release(b.ctx))
	res := mustAcquire(t, b.ctx, follower)
	require.Equal(t, Leader, res.Status, "the next poll takes the released lease")
	require.Equal(t, first.Term.Token+1, res.Term.Token)
	require.Equal(t, Follower, mustAcquire(t, b.ctx, leader).Status)
}
