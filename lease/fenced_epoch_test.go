package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// newFencedOn builds a Fenced lease on table through ep, migrating the
// table first, and closes it when the test ends; mods change its config.
func newFencedOn(t testing.TB, ep stack.Endpoint, table, holder string, epoch bool, mods ...func(*FencedConfig)) *Fenced {
	t.Helper()
	ctx := testCtx(t)
	require.NoError(t, MigrateFenced(ctx, stacktest.Connect(t, ep), table))
	cfg := FencedConfig{DSN: ep.DSN, Table: table, Holder: holder, Epoch: epoch,
		ApplicationName: "fenced-" + holder, Logger: testLogger(t)}
	for _, m := range mods {
		m(&cfg)
	}
	f, err := NewFenced(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

// A term that expired on the server is not renewed, even by its holder
// and with nobody else holding it: the next poll takes a new term with a
// higher token, so that the fence refuses what the holder's expired term
// had on its way. Both the plain and the epoch lease.
func TestFencedExpiredTermIsNotRenewed(t *testing.T) {
	t.Parallel()
	for _, epoch := range []bool{false, true} {
		t.Run(map[bool]string{false: "Plain", true: "Epoch"}[epoch], func(t *testing.T) {
			t.Parallel()
			db := stacktest.NewDB(t)
			ctx := testCtx(t)
			// A TTL far longer than the test: only the UPDATE below ends
			// the term.
			l := newFencedOn(t, db.Postgres, "expiry_leases", "a", epoch, withTTL(time.Hour))
			held := mustTry(t, ctx, l)
			require.Equal(t, Leader, held.Status)
			require.Equal(t, held, mustTry(t, ctx, l), "an unexpired term is renewed as it is")
			_, err := stacktest.Connect(t, db.Postgres).Exec(ctx, "UPDATE expiry_leases SET expires_at = clock_timestamp() - interval '1 millisecond'")
			require.NoError(t, err)
			again := mustTry(t, ctx, l)
			require.Equal(t, Leader, again.Status, "nobody else holds it, so the holder takes it again")
			require.Greater(t, again.Term.Token, held.Term.Token, "as a new term, not the expired one revived")
		})
	}
}

func TestFencedEpoch(t *testing.T) {
	t.Parallel()

	t.Run("PicksTheEpochGrant", func(t *testing.T) {
		t.Parallel()
		plain, err := newFenced(FencedConfig{DSN: "postgres://u@localhost/db"})
		require.NoError(t, err)
		require.NotContains(t, plain.grant, "pg_walfile_name")
		epoch, err := newFenced(FencedConfig{DSN: "postgres://u@localhost/db", Epoch: true})
		require.NoError(t, err)
		require.Contains(t, epoch.grant, "FROM (SELECT "+epochFirstSQL+" AS first) e")
		require.NotContains(t, plain.renew, "pg_walfile_name")
		require.Contains(t, epoch.renew, "FROM (SELECT "+epochFirstSQL+" AS first) e")
	})

	t.Run("OneHolderAtATime", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		a := newFencedOn(t, db.Transaction, "epoch_leases", "a", true)
		b := newFencedOn(t, db.Transaction, "epoch_leases", "b", true)
		held := mustTry(t, ctx, a)
		require.Equal(t, Leader, held.Status)
		require.Equal(t, Follower, mustTry(t, ctx, b).Status, "the lease is held and unexpired")
		require.Equal(t, held, mustTry(t, ctx, a), "a renewal keeps the token on its timeline")
	})

	// As TestFenced/OnlyOneOfTwoRacingGrantsWins: both grants see the
	// expired row in their snapshot, and the ON CONFLICT's own check on
	// the row they lock decides.
	t.Run("OnlyOneOfTwoRacingGrantsWins", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		admin := stacktest.Connect(t, db.Postgres)
		old := newFencedOn(t, db.Postgres, "epoch_leases", "a", true, withTTL(time.Second))
		racers := []*Fenced{newFencedOn(t, db.Postgres, "epoch_leases", "b", true), newFencedOn(t, db.Postgres, "epoch_leases", "c", true)}
		require.Equal(t, Leader, mustTry(t, ctx, old).Status)
		waitFor(t, 10*time.Second, "the old term expires", func() (bool, error) {
			var expired bool
			err := admin.QueryRow(ctx, "SELECT expires_at <= clock_timestamp() FROM epoch_leases").Scan(&expired)
			return expired, err
		})
		blocker, err := stacktest.Connect(t, db.Postgres).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = blocker.Rollback(context.WithoutCancel(ctx)) }()
		_, err = blocker.Exec(ctx, "SELECT 1 FROM epoch_leases FOR UPDATE")
		require.NoError(t, err)
		results := make(chan Result, len(racers))
		for _, r := range racers {
			go func() {
				res, _ := r.TryAcquire(ctx)
				results <- res
			}()
		}
		waitFor(t, 5*time.Second, "both grants queue for the row", func() (bool, error) {
			var n int
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name IN ('fenced-b', 'fenced-c') AND wait_event_type = 'Lock'`).Scan(&n)
			return n == 2, err
		})
		require.NoError(t, blocker.Commit(ctx))
		got := []Result{<-results, <-results}
		require.Equal(t, 1, leaders(got), "results %+v", got)
	})

	t.Run("RenewsOnlyItsExactTerm", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		owner := newFencedOn(t, db.Transaction, "epoch_leases", "a", true)
		held := mustTry(t, ctx, owner)
		require.Equal(t, Leader, held.Status)
		// Another replica that learnt the token, and an old instance of
		// the owner with an older token of the same lease.
		intruder := newFencedOn(t, db.Transaction, "epoch_leases", "b", true)
		intruder.term = Term{Name: held.Term.Name, Holder: "b", Token: held.Term.Token}
		require.Equal(t, Follower, mustTry(t, ctx, intruder).Status)
		stale := newFencedOn(t, db.Transaction, "epoch_leases", "a", true)
		stale.term = Term{Name: held.Term.Name, Holder: "a", Token: held.Term.Token - 1}
		require.Equal(t, Follower, mustTry(t, ctx, stale).Status)
		require.Equal(t, held, mustTry(t, ctx, owner), "the owner's term is untouched")
	})

	// On a server that was never promoted (timeline 1) the first grant is
	// 1<<32 | 1, and the grants after it count up from there.
	t.Run("FirstGrantIsOnTheServersTimeline", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		a := newFencedOn(t, db.Transaction, "epoch_leases", "a", true)
		b := newFencedOn(t, db.Transaction, "epoch_leases", "b", true)
		var tokens []int64
		for _, l := range []*Fenced{a, b, a} {
			res := mustTry(t, ctx, l)
			require.Equal(t, Leader, res.Status)
			tokens = append(tokens, res.Term.Token)
			require.NoError(t, l.Release(ctx))
		}
		require.Equal(t, []int64{1<<32 | 1, 1<<32 | 2, 1<<32 | 3}, tokens)
	})
}

// After a promotion that lost the last grant, the plain lease grants that
// token again while the replica it was granted to still holds it, and that
// replica's fenced write is accepted beside the new leader's: the fence
// lets two writers through. With Epoch the new primary's first grant is
// above every token the old one granted, lost ones included, and the old
// holder's write is refused.
func TestFencedEpochAcrossALossyFailover(t *testing.T) {
	t.Parallel()
	s := stacktest.OwnHA(t, stack.ReplicationAsync)
	db := stacktest.NewDBOn(t, s)
	ctx := testCtx(t)
	createWritesTable(t, db.Postgres.DSN)
	const plainTable, epochTable = "plain_leases", "epoch_leases"

	// a's grants and releases reach the standby, and so does d's grant
	// of a lease of another name, which d keeps across the failover.
	for _, l := range []*Fenced{newFencedOn(t, db.Postgres, plainTable, "a", false), newFencedOn(t, db.Postgres, epochTable, "a", true)} {
		require.Equal(t, Leader, mustTry(t, ctx, l).Status)
		require.NoError(t, l.Release(ctx))
	}
	// d keeps its term only if the term outlives the span from its grant
	// to its first renewal on the new primary. With the default 15 s TTL
	// that span ran out once: make test beside the mutation gate (load
	// average 10) took 16.2 s from d's grant to that renewal, and d was
	// granted token 2 instead of renewing 1. A minute is 3.7 times that.
	held := func(c *FencedConfig) { c.Name, c.TTL = "held", time.Minute }
	d, de := newFencedOn(t, db.Postgres, plainTable, "d", false, held), newFencedOn(t, db.Postgres, epochTable, "d", true, held)
	kept, keptEpoch := mustTry(t, ctx, d), mustTry(t, ctx, de)
	require.Equal(t, Leader, kept.Status)
	require.Equal(t, Leader, keptEpoch.Status)
	require.NoError(t, s.CatchUp(ctx))

	// b's do not: the standby stopped receiving before b was granted.
	require.NoError(t, s.DetachStandby(ctx))
	b, be := newFencedOn(t, db.Postgres, plainTable, "b", false), newFencedOn(t, db.Postgres, epochTable, "b", true)
	lost, lostEpoch := mustTry(t, ctx, b), mustTry(t, ctx, be)
	require.Equal(t, Leader, lost.Status)
	require.Equal(t, Leader, lostEpoch.Status)
	require.Equal(t, int64(2), lost.Term.Token)
	require.Equal(t, int64(1<<32|2), lostEpoch.Term.Token)

	require.NoError(t, s.KillPrimary(ctx))
	require.NoError(t, s.Promote(ctx))
	require.NoError(t, s.Repoint(ctx))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := s.WaitPrimary(wctx, db.Postgres.DSN)
	require.NoError(t, err)

	// c polls the new primary, where the lease looks free since a's
	// release; b still trusts its term (TTL 15s) and writes.
	c, ce := newFencedOn(t, db.Postgres, plainTable, "c", false), newFencedOn(t, db.Postgres, epochTable, "c", true)
	again, above := mustTry(t, ctx, c), mustTry(t, ctx, ce)
	require.Equal(t, Leader, again.Status)
	require.Equal(t, Leader, above.Status)
	writer := stacktest.Connect(t, db.Postgres)

	require.Equal(t, lost.Term.Token, again.Term.Token, "the plain lease grants the lost token again")
	require.NoError(t, fencedWrite(ctx, writer, c, again.Term, "c"))
	require.NoError(t, fencedWrite(ctx, writer, b, lost.Term, "b"), "and the fence lets its old holder write beside the new one")

	require.Equal(t, int64(2<<32|1), above.Term.Token, "the epoch lease's first grant on timeline 2")
	require.Greater(t, above.Term.Token, lostEpoch.Term.Token)
	require.NoError(t, fencedWrite(ctx, writer, ce, above.Term, "ce"))
	require.ErrorIs(t, fencedWrite(ctx, writer, be, lostEpoch.Term, "be"), ErrStaleToken)

	// d's term was kept by the promotion. The epoch fence refuses it
	// until d's renewal moves it to timeline 2, and d writes again.
	require.NoError(t, fencedWrite(ctx, writer, d, kept.Term, "d"))
	// Their connections died with the old primary: the first poll after
	// it may be Faulted.
	require.Equal(t, kept, eventuallyLeader(t, ctx, d, 10*time.Second), "the plain lease renews its token")
	require.ErrorIs(t, fencedWrite(ctx, writer, de, keptEpoch.Term, "de"), ErrStaleToken)
	moved := eventuallyLeader(t, ctx, de, 10*time.Second)
	require.Equal(t, int64(2<<32|1), moved.Term.Token, "the renewal moved the term to timeline 2")
	require.NoError(t, fencedWrite(ctx, writer, de, moved.Term, "de"))

	require.Equal(t, []string{"d@1", "b@2", "c@2", "ce@8589934593", "de@8589934593"}, writes(t, ctx, writer))
}

// BenchmarkFencedGrant is the cost of one grant, with and without Epoch,
// on the test stack's direct endpoint: each iteration takes the free
// lease, and gives it back outside the timer, so only the grant is timed.
//
//	go test -run '^$' -bench BenchmarkFencedGrant -count 6 ./lease
func BenchmarkFencedGrant(b *testing.B) {
	for _, tc := range []struct {
		name  string
		epoch bool
	}{{"Plain", false}, {"Epoch", true}} {
		b.Run(tc.name, func(b *testing.B) {
			db := stacktest.NewDB(b)
			ctx := context.Background()
			require.NoError(b, MigrateFenced(ctx, stacktest.Connect(b, db.Postgres), ""))
			// No logger: a grant's log line would cost more than the
			// timeline it reads.
			l, err := NewFenced(ctx, FencedConfig{DSN: db.Postgres.DSN, Holder: "bench", Epoch: tc.epoch})
			require.NoError(b, err)
			b.Cleanup(func() { _ = l.Close(context.Background()) })
			for b.Loop() {
				res, err := l.TryAcquire(ctx)
				if err != nil || res.Status != Leader {
					b.Fatalf("grant: %v %v", res, err)
				}
				b.StopTimer()
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
