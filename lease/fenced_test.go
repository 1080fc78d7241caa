package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestFencedConfig(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).

	t.Run("AppliesDefaults", func(t *testing.T) {
		t.Parallel()
		f, err := newFenced(FencedConfig{DSN: "postgres://u@localhost:5432/db"})
		require.NoError(t, err)
		require.Equal(t, "doublerun", f.cfg.Name)
		require.NotEmpty(t, f.cfg.Holder)
		require.Equal(t, `"doublerun_leases"`, f.table)
		require.Equal(t, 15*time.Second, f.cfg.TTL)
		require.Equal(t, 3*time.Second, f.cfg.Margin)
		require.Equal(t, pgx.QueryExecModeExec, f.connCfg.DefaultQueryExecMode)
		require.Equal(t, "doublerun-fenced-lease", f.connCfg.RuntimeParams["application_name"])
	})

	t.Run("AcceptsATTLOfOneMillisecond", func(t *testing.T) {
		t.Parallel()
		f, err := newFenced(FencedConfig{DSN: "postgres://u@localhost/db", TTL: time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, time.Millisecond, f.cfg.TTL)
	})

	t.Run("QuotesASchemaQualifiedTable", func(t *testing.T) {
		t.Parallel()
		f, err := newFenced(FencedConfig{DSN: "postgres://u@localhost/db", Table: "ops.Leases"})
		require.NoError(t, err)
		require.Equal(t, `"ops"."Leases"`, f.table)
	})

	for _, tt := range []struct {
		name string
		cfg  FencedConfig
		want string
	}{
		{"RejectsAnEmptyDSN", FencedConfig{}, "DSN is empty"},
		{"RejectsAMarginAsLongAsTheTTL", FencedConfig{DSN: "postgres://localhost/db", TTL: time.Second, Margin: time.Second}, "Margin"},
		{"RejectsANegativeMargin", FencedConfig{DSN: "postgres://localhost/db", Margin: -time.Second}, "Margin"},
		{"RejectsANegativeTTL", FencedConfig{DSN: "postgres://localhost/db", TTL: -time.Second}, "TTL"},
		{"RejectsABadTable", FencedConfig{DSN: "postgres://localhost/db", Table: "a..b"}, "Table"},
		{"RejectsAWaitTimeoutBelowAMillisecond", FencedConfig{DSN: "postgres://localhost/db", WaitTimeout: time.Microsecond}, "WaitTimeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := newFenced(tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestMigrateFenced(t *testing.T) {
	t.Parallel()

	t.Run("IsIdempotentAndSafeToRunConcurrently", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			c := stacktest.Connect(t, db.Postgres)
			wg.Go(func() { errs[i] = MigrateFenced(ctx, c, "") })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, MigrateFenced(ctx, stacktest.Connect(t, db.Postgres), ""))
	})

	t.Run("CreatesASchemaQualifiedTable", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ctx := testCtx(t)
		c := stacktest.Connect(t, db.Postgres)
		_, err := c.Exec(ctx, "CREATE SCHEMA ops")
		require.NoError(t, err)
		require.NoError(t, MigrateFenced(ctx, c, "ops.leader_leases"))
		f := newFencedT(t, db, db.Postgres, "a", func(cfg *FencedConfig) { cfg.Table = "ops.leader_leases" })
		require.Equal(t, Leader, mustTry(t, ctx, f).Status)
	})
}

func TestFenced(t *testing.T) {
	t.Parallel()

	setup := setupServer

	t.Run("ExactlyOneLeaderUnderContention", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name     string
			endpoint func(t *testing.T, db stacktest.DB) stack.Endpoint
		}{
			{"Direct", func(_ *testing.T, db stacktest.DB) stack.Endpoint { return db.Postgres }},
			{"TransactionPoolSizeOne", func(_ *testing.T, db stacktest.DB) stack.Endpoint { return db.Transaction }},
			{"TransactionPoolSizeFour", func(t *testing.T, db stacktest.DB) stack.Endpoint {
				return db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 4})
			}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ep := tt.endpoint(t, b.db)
				var leases []Lease
				for i := range 5 {
					leases = append(leases, newFencedT(t, b.db, ep, holderName(i)))
				}
				var holder string
				for round := range 3 {
					results := tryAll(t, b.ctx, leases...)
					require.Equal(t, 1, leaders(results), "round %d: %+v", round, results)
					for _, r := range results {
						if r.Status == Leader {
							if holder == "" {
								holder = r.Term.Holder
							}
							require.Equal(t, holder, r.Term.Holder, "the leader renews; nobody steals an unexpired term")
						}
					}
				}
			})
		}
	})

	t.Run("LeaderThatStopsRenewingLosesItAfterTheTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const ttl = time.Second
		old := newFencedT(t, b.db, b.db.Transaction, "a", withTTL(ttl))
		next := newFencedT(t, b.db, b.db.Transaction, "b", withTTL(ttl))
		start := time.Now()
		first := mustTry(t, b.ctx, old)
		require.Equal(t, Leader, first.Status)
		require.Equal(t, Follower, mustTry(t, b.ctx, next).Status)

		won := eventuallyLeader(t, b.ctx, next, 10*ttl)
		require.GreaterOrEqual(t, time.Since(start), ttl, "taken over only after the TTL")
		require.Greater(t, won.Term.Token, first.Term.Token)

		res := settled(t, b.ctx, old, 10*ttl)
		require.Equal(t, Follower, res.Status)
		require.Zero(t, old.Deadline())
	})

	t.Run("PausedOldLeadersFencedWriteIsStale", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		createWritesTable(t, b.db.Postgres.DSN)
		work := stacktest.Connect(t, b.db.Transaction) // the work goes through the pool too
		old := newFencedT(t, b.db, b.db.Transaction, "a", withTTL(time.Second))
		next := newFencedT(t, b.db, b.db.Transaction, "b", withTTL(time.Second))
		paused := mustTry(t, b.ctx, old)
		require.Equal(t, Leader, paused.Status)
		require.NoError(t, fencedWrite(b.ctx, work, old, paused.Term, "before-pause"))

		// old stops polling, as a frozen process would; next takes over.
		cur := eventuallyLeader(t, b.ctx, next, 10*time.Second)

		// old wakes up and writes with the term it still believes in.
		require.ErrorIs(t, fencedWrite(b.ctx, work, old, paused.Term, "after-pause"), ErrStaleToken)
		require.NoError(t, fencedWrite(b.ctx, work, next, cur.Term, "new-leader"))
		require.Equal(t, []string{
			fmt.Sprintf("before-pause@%d", paused.Term.Token),
			fmt.Sprintf("new-leader@%d", cur.Term.Token),
		}, writes(t, b.ctx, b.admin))
	})

	t.Run("TokensStrictlyIncrease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		leases := []*Fenced{
			newFencedT(t, b.db, b.db.Transaction, "a", withTTL(time.Second)),
			newFencedT(t, b.db, b.db.Transaction, "b", withTTL(time.Second)),
			newFencedT(t, b.db, b.db.Transaction, "c", withTTL(time.Second)),
		}
		var tokens []int64
		// Handovers by release.
		for i := range 5 {
			res := mustTry(t, b.ctx, leases[i%3])
			require.Equal(t, Leader, res.Status)
			tokens = append(tokens, res.Term.Token)
			require.NoError(t, leases[i%3].Release(b.ctx))
		}
		// A takeover after expiry, and a renewal that keeps the token.
		res := mustTry(t, b.ctx, leases[0])
		require.Equal(t, Leader, res.Status)
		tokens = append(tokens, res.Term.Token)
		res = eventuallyLeader(t, b.ctx, leases[1], 10*time.Second)
		tokens = append(tokens, res.Term.Token)
		renewed := mustTry(t, b.ctx, leases[1])
		require.Equal(t, res.Term, renewed.Term, "a renewal is not a grant")

		for i := 1; i < len(tokens); i++ {
			require.Greater(t, tokens[i], tokens[i-1], "tokens %v", tokens)
		}
	})

	t.Run("RenewsOnlyItsExactTerm", func(t *testing.T) {
		t.Parallel()

		t.Run("OtherHolderSameToken", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			owner := newFencedT(t, b.db, b.db.Transaction, "a")
			intruder := newFencedT(t, b.db, b.db.Transaction, "b")
			held := mustTry(t, b.ctx, owner)
			require.Equal(t, Leader, held.Status)

			// The intruder knows the token but is not the holder.
			intruder.term = Term{Name: held.Term.Name, Holder: "b", Token: held.Term.Token}
			require.Equal(t, Follower, mustTry(t, b.ctx, intruder).Status)
			require.Equal(t, held, mustTry(t, b.ctx, owner), "the owner's term is untouched")
		})

		t.Run("SameHolderOlderToken", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			current := newFencedT(t, b.db, b.db.Transaction, "a")
			first := mustTry(t, b.ctx, current)
			require.Equal(t, Leader, first.Status)
			require.NoError(t, current.Release(b.ctx))
			second := mustTry(t, b.ctx, current)
			require.Equal(t, Leader, second.Status)
			require.Greater(t, second.Term.Token, first.Term.Token)

			// An old instance of the same replica, restarted or paused,
			// still holding the first term.
			stale := newFencedT(t, b.db, b.db.Transaction, "a")
			stale.term = first.Term
			require.Equal(t, Follower, mustTry(t, b.ctx, stale).Status)
			require.Equal(t, second, mustTry(t, b.ctx, current))
		})
	})

	t.Run("ReleaseHandsOverAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A TTL far longer than the test: only the release can hand over.
		l1 := newFencedT(t, b.db, b.db.Transaction, "a", withTTL(time.Hour))
		l2 := newFencedT(t, b.db, b.db.Transaction, "b", withTTL(time.Hour))
		first := mustTry(t, b.ctx, l1)
		require.Equal(t, Leader, first.Status)
		require.Equal(t, Follower, mustTry(t, b.ctx, l2).Status)

		require.NoError(t, l1.Release(b.ctx))
		require.Zero(t, l1.Deadline())
		res := mustTry(t, b.ctx, l2)
		require.Equal(t, Leader, res.Status)
		require.Equal(t, first.Term.Token+1, res.Term.Token)
		require.Equal(t, Follower, mustTry(t, b.ctx, l1).Status)
	})

	t.Run("ReleaseOfAStaleTermLeavesTheNewHolderAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := newFencedT(t, b.db, b.db.Transaction, "a", withTTL(time.Second))
		cur := newFencedT(t, b.db, b.db.Transaction, "b", withTTL(time.Hour))
		other := newFencedT(t, b.db, b.db.Transaction, "c", withTTL(time.Hour))
		require.Equal(t, Leader, mustTry(t, b.ctx, old).Status)
		won := eventuallyLeader(t, b.ctx, cur, 10*time.Second)

		require.NoError(t, old.Release(b.ctx), "releasing a lost term is not an error")
		require.Equal(t, Follower, mustTry(t, b.ctx, other).Status, "the new holder's term still stands")
		require.Equal(t, won, mustTry(t, b.ctx, cur))
	})

	t.Run("TrustsItsLeaseOnlyUntilTTLMinusMargin", func(t *testing.T) {
		t.Parallel()
		const ttl, margin = 10 * time.Second, 2 * time.Second
		t0 := time.Now()
		for _, tt := range []struct {
			name     string
			answered time.Duration // after the poll was sent, on the local clock
			want     Status
		}{
			{"AnswerBeforeTheDeadlineIsTrusted", ttl - margin - time.Millisecond, Leader},
			{"AnswerAtTheDeadlineIsNot", ttl - margin, Follower},
			{"AnswerWithinTheTTLButPastTheMarginIsNot", ttl - margin/2, Follower},
			{"AnswerAfterTheTTLIsNot", ttl + time.Second, Follower},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				l := newFencedT(t, b.db, b.db.Postgres, "a", func(c *FencedConfig) { c.TTL, c.Margin = ttl, margin })
				l.now = fakeClock(t0, t0.Add(tt.answered))
				res := mustTry(t, b.ctx, l)
				require.Equal(t, tt.want, res.Status)
				if tt.want == Leader {
					require.Equal(t, t0.Add(ttl-margin), l.Deadline())
					return
				}
				require.Zero(t, l.Deadline())
				// The term was granted on the server and is kept, so a
				// prompt poll renews it rather than waiting out the TTL.
				granted := l.term
				require.NotZero(t, granted.Token)
				l.now = fakeClock(t0, t0)
				res = mustTry(t, b.ctx, l)
				require.Equal(t, Leader, res.Status)
				require.Equal(t, granted, res.Term)
			})
		}
	})

	t.Run("FenceHoldsOffANewGrantUntilTheWriteCommits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		createWritesTable(t, b.db.Postgres.DSN)
		old := newFencedT(t, b.db, b.db.Postgres, "a", withTTL(time.Second)) // 200ms timed the grant out once under CI load (TTL - Margin bounds it)
		next := newFencedT(t, b.db, b.db.Postgres, "b")
		term := mustTry(t, b.ctx, old)
		require.Equal(t, Leader, term.Status)
		waitFor(t, 10*time.Second, "the old term expires", func() (bool, error) {
			var expired bool
			err := b.admin.QueryRow(b.ctx, "SELECT expires_at <= clock_timestamp() FROM doublerun_leases").Scan(&expired)
			return expired, err
		})

		// Expired but not granted again: the old term is still the newest,
		// so its fence passes, and holds the row until the write commits.
		work := stacktest.Connect(t, b.db.Postgres)
		tx, err := work.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		require.NoError(t, old.Fence(b.ctx, tx, term.Term))

		granted := make(chan Result, 1)
		go func() {
			res, _ := next.TryAcquire(b.ctx)
			granted <- res
		}()
		waitFor(t, 5*time.Second, "the new grant waits for the fenced write", func() (bool, error) {
			var waiting bool
			err := b.admin.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'fenced-b' AND wait_event_type = 'Lock')`).Scan(&waiting)
			return waiting, err
		})
		_, err = tx.Exec(b.ctx, "INSERT INTO leader_writes (token, what) VALUES ($1, 'last-old-write')", term.Term.Token)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(b.ctx))

		res := <-granted
		require.Equal(t, Leader, res.Status)
		require.Equal(t, term.Term.Token+1, res.Term.Token)
		require.ErrorIs(t, fencedWrite(b.ctx, work, old, term.Term, "too-late"), ErrStaleToken)
		require.Equal(t, []string{fmt.Sprintf("last-old-write@%d", term.Term.Token)}, writes(t, b.ctx, b.admin))
	})

	t.Run("FenceDoesNotHoldUpTheLeadersRenewal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newFencedT(t, b.db, b.db.Postgres, "a")
		term := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, term.Status)

		work := stacktest.Connect(t, b.db.Postgres)
		tx, err := work.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		require.NoError(t, l.Fence(b.ctx, tx, term.Term))

		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
		defer cancel()
		res, err := l.TryAcquire(ctx)
		require.NoError(t, err, "the renewal must not wait for the open fenced transaction")
		require.Equal(t, term, res)
	})

	t.Run("FollowerPollDoesNotWaitForTheLeadersFencedWrite", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		leader := newFencedT(t, b.db, b.db.Postgres, "a")
		follower := newFencedT(t, b.db, b.db.Postgres, "b")
		term := mustTry(t, b.ctx, leader)
		require.Equal(t, Leader, term.Status)

		work := stacktest.Connect(t, b.db.Postgres)
		tx, err := work.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		require.NoError(t, leader.Fence(b.ctx, tx, term.Term))

		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
		defer cancel()
		res, err := follower.TryAcquire(ctx)
		require.NoError(t, err, "a follower's poll must not queue behind the leader's open transaction")
		require.Equal(t, Follower, res.Status)
	})

	t.Run("OnlyOneOfTwoRacingGrantsWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := newFencedT(t, b.db, b.db.Postgres, "a", withTTL(time.Second)) // 200ms timed the grant out once under CI load (TTL - Margin bounds it)
		racers := []*Fenced{newFencedT(t, b.db, b.db.Postgres, "b"), newFencedT(t, b.db, b.db.Postgres, "c")}
		require.Equal(t, Leader, mustTry(t, b.ctx, old).Status)
		waitFor(t, 10*time.Second, "the old term expires", func() (bool, error) {
			var expired bool
			err := b.admin.QueryRow(b.ctx, "SELECT expires_at <= clock_timestamp() FROM doublerun_leases").Scan(&expired)
			return expired, err
		})

		// Hold the expired row, so both grants see it expired in their
		// snapshot and then queue for the row lock.
		blocker, err := stacktest.Connect(t, b.db.Postgres).Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = blocker.Rollback(context.WithoutCancel(b.ctx)) }()
		_, err = blocker.Exec(b.ctx, "SELECT 1 FROM doublerun_leases FOR UPDATE")
		require.NoError(t, err)

		results := make(chan Result, len(racers))
		for _, r := range racers {
			go func() {
				res, _ := r.TryAcquire(b.ctx)
				results <- res
			}()
		}
		waitFor(t, 5*time.Second, "both grants queue for the row", func() (bool, error) {
			var n int
			err := b.admin.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name IN ('fenced-b', 'fenced-c') AND wait_event_type = 'Lock'`).Scan(&n)
			return n == 2, err
		})
		require.NoError(t, blocker.Commit(b.ctx))

		got := []Result{<-results, <-results}
		require.Equal(t, 1, leaders(got), "results %+v", got)
	})

	t.Run("RenewsItsTermAfterItsBackendIsKilled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newFencedT(t, b.db, b.db.Postgres, "a")
		first := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, first.Status)
		var pid int32
		require.NoError(t, b.admin.QueryRow(b.ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'fenced-a'").Scan(&pid))
		terminate(t, b.ctx, b.admin, pid)

		res := mustTry(t, b.ctx, l)
		require.Equal(t, Faulted, res.Status, "the poll on the dead connection fails")
		require.Error(t, res.Err)
		res = mustTry(t, b.ctx, l)
		require.Equal(t, first, res, "the next poll reconnects and renews the same term")
	})

	t.Run("MissingTableIsReportedWithAHint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := NewFenced(b.ctx, FencedConfig{DSN: b.db.Postgres.DSN, Table: "no_such_leases"})
		require.ErrorContains(t, err, "MigrateFenced")
	})

	t.Run("PassesCancellationThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newFencedT(t, b.db, b.db.Transaction, "a")
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		res, err := l.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
	})

	t.Run("ClosedLeaseIsFaultedAndHandsOver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l1 := newFencedT(t, b.db, b.db.Transaction, "a", withTTL(time.Hour))
		l2 := newFencedT(t, b.db, b.db.Transaction, "b", withTTL(time.Hour))
		require.Equal(t, Leader, mustTry(t, b.ctx, l1).Status)
		require.NoError(t, l1.Close(b.ctx))
		require.NoError(t, l1.Close(b.ctx), "Close is idempotent")
		res := mustTry(t, b.ctx, l1)
		require.Equal(t, Faulted, res.Status)
		require.ErrorIs(t, res.Err, ErrClosed)
		require.Equal(t, Leader, mustTry(t, b.ctx, l2).Status)
	})
}
