package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestAdvisoryConfig(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).

	t.Run("AppliesDefaults", func(t *testing.T) {
		t.Parallel()
		a, err := newAdvisory(AdvisoryConfig{DSN: "postgres://u@localhost:5432/db"})
		require.NoError(t, err)
		require.Equal(t, "doublerun", a.cfg.Name)
		require.NotEmpty(t, a.cfg.Holder)
		require.Equal(t, int32(271), a.cfg.Key1)
		require.Equal(t, int32(1), a.cfg.Key2)
		require.Equal(t, 5*time.Second, a.cfg.ProbeTimeout)
		require.Equal(t, "doublerun-leader-lease", a.connCfg.RuntimeParams["application_name"])
		require.Equal(t, 5*time.Second, a.connCfg.ConnectTimeout)
	})

	// A connection attempt counts against the probe's budget: a DSN's
	// longer connect_timeout is capped, a shorter one kept.
	for _, tt := range []struct {
		name, query string
		want        time.Duration
	}{
		{"CapsALongerConnectTimeout", "?connect_timeout=60", 2 * time.Second},
		{"KeepsAShorterConnectTimeout", "?connect_timeout=1", time.Second},
		{"SetsAMissingConnectTimeout", "", 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := newAdvisory(AdvisoryConfig{DSN: "postgres://u@localhost/db" + tt.query, ProbeTimeout: 2 * time.Second})
			require.NoError(t, err)
			require.Equal(t, tt.want, a.connCfg.ConnectTimeout)
		})
	}

	for _, tt := range []struct {
		name string
		cfg  AdvisoryConfig
		want string
	}{
		{"RejectsAnEmptyDSN", AdvisoryConfig{}, "DSN is empty"},
		{"RejectsANegativeProbeTimeout", AdvisoryConfig{DSN: "postgres://localhost/db", ProbeTimeout: -time.Second}, "ProbeTimeout"},
		{"RejectsABadTokenTable", AdvisoryConfig{DSN: "postgres://localhost/db", TokenTable: "a.b.c"}, "TokenTable"},
		{"RejectsAnUnparseableDSN", AdvisoryConfig{DSN: "postgres://localhost:notaport/db"}, "parse DSN"},
		{"RejectsAWaitTimeoutBelowAMillisecond", AdvisoryConfig{DSN: "postgres://localhost/db", WaitTimeout: time.Microsecond}, "WaitTimeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := newAdvisory(tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestAdvisory(t *testing.T) {
	t.Parallel()

	setup := setupServer

	t.Run("ExactlyOneOfTwoContendersIsLeader", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{stack.PostgresName, stack.SessionName} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ep := b.db.Endpoint(name)
				l1, l2 := newAdvisoryT(t, ep, "a"), newAdvisoryT(t, ep, "b")
				first := tryAll(t, b.ctx, l1, l2)
				require.Equal(t, 1, leaders(first), "results %+v", first)
				second := tryAll(t, b.ctx, l1, l2)
				require.Equal(t, 1, leaders(second), "results %+v", second)
				for i := range first {
					require.Equal(t, first[i], second[i], "a leader stays leader with the same term")
				}
			})
		}
	})

	t.Run("SurvivorTakesOverAfterTheLeaderCloses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		leader, survivor := newAdvisoryT(t, b.db.Postgres, "a"), newAdvisoryT(t, b.db.Postgres, "b")
		old := mustTry(t, b.ctx, leader)
		require.Equal(t, Leader, old.Status)
		require.Equal(t, Follower, mustTry(t, b.ctx, survivor).Status)

		require.NoError(t, leader.Close(b.ctx))
		res := eventuallyLeader(t, b.ctx, survivor, 10*time.Second)
		require.Greater(t, res.Term.Token, old.Term.Token)
		require.Equal(t, "b", res.Term.Holder)

		closed := mustTry(t, b.ctx, leader)
		require.Equal(t, Faulted, closed.Status)
		require.ErrorIs(t, closed.Err, ErrClosed)
	})

	t.Run("SurvivorTakesOverAfterTheLeaderReleases", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l1, l2 := newAdvisoryT(t, b.db.Postgres, "a"), newAdvisoryT(t, b.db.Postgres, "b")
		require.Equal(t, Leader, mustTry(t, b.ctx, l1).Status)
		require.Equal(t, Follower, mustTry(t, b.ctx, l2).Status)
		pid := l1.BackendPID()

		require.NoError(t, l1.Release(b.ctx))
		waitBackendGone(t, b.ctx, b.admin, pid) // the release closed the lease's session
		eventuallyLeader(t, b.ctx, l2, 10*time.Second)
		require.Equal(t, Follower, mustTry(t, b.ctx, l1).Status, "a released lease can compete again")

		require.NoError(t, l2.Release(b.ctx))
		eventuallyLeader(t, b.ctx, l1, 10*time.Second)
	})

	t.Run("OldLeaderIsFollowerAfterItsBackendIsTerminated", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name      string
			unguarded bool
		}{{"Guarded", false}, {"Unguarded", true}} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				unguarded := func(c *AdvisoryConfig) { c.DisablePIDGuard = tt.unguarded }
				leader := newAdvisoryT(t, b.db.Postgres, "a", unguarded)
				competitor := newAdvisoryT(t, b.db.Postgres, "b", unguarded)
				require.Equal(t, Leader, mustTry(t, b.ctx, leader).Status)
				require.Equal(t, Follower, mustTry(t, b.ctx, competitor).Status)

				pid := advisoryHolderPID(t, b.ctx, b.admin, 271, 1)
				require.NotZero(t, pid)
				terminate(t, b.ctx, b.admin, pid)

				won := eventuallyLeader(t, b.ctx, competitor, 10*time.Second)
				require.Equal(t, "b", won.Term.Holder)
				res := mustTry(t, b.ctx, leader)
				require.Equal(t, Follower, res.Status, "the old leader must notice its session died; got %+v", res)
			})
		}
	})

	t.Run("ReconnectsOnPIDMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newAdvisoryT(t, b.db.Postgres, "a")
		first := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, first.Status)
		oldPID := advisoryHolderPID(t, b.ctx, b.admin, 271, 1)
		require.Equal(t, l.pid, oldPID, "the PID recorded is the lock holder's")

		// The probe reports a backend other than the one that took the
		// lock, as a transaction pool that moved the session would.
		l.probe = func(ctx context.Context, c conn) (int32, error) {
			pid, err := queryBackendPID(ctx, c)
			return pid + 1, err
		}
		// Let the old session end before the fresh acquire, so the
		// outcome does not depend on how fast Postgres reaps it.
		dials := 0
		l.connect = func(ctx context.Context) (conn, error) {
			dials++
			waitBackendGone(t, ctx, b.admin, oldPID)
			return l.dial(ctx)
		}

		res := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, res.Status, "after giving up, the fresh acquire on a new connection wins the free lock")
		require.Equal(t, 1, dials, "it reconnected")
		require.Greater(t, res.Term.Token, first.Term.Token, "a fresh grant, not the old term")
		newPID := advisoryHolderPID(t, b.ctx, b.admin, 271, 1)
		require.NotEqual(t, oldPID, newPID)
		require.Equal(t, newPID, l.pid)
	})

	t.Run("UnguardedIgnoresAPIDMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newAdvisoryT(t, b.db.Postgres, "a", func(c *AdvisoryConfig) { c.DisablePIDGuard = true })
		first := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, first.Status)
		l.probe = func(ctx context.Context, c conn) (int32, error) {
			pid, err := queryBackendPID(ctx, c)
			return pid + 1, err
		}
		res := mustTry(t, b.ctx, l)
		require.Equal(t, first, res, "the unguarded baseline keeps its term")
	})

	t.Run("FaultedNotFollowerWhenTheServerIsUnreachable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newAdvisoryT(t, b.db.Postgres, "a")
		l.connCfg.Port = closedPort(t)
		res := mustTry(t, b.ctx, l)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "connect")
	})

	t.Run("LeaderIsFaultedWhenItsDatabaseDisappears", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newAdvisoryT(t, b.db.Postgres, "a")
		require.Equal(t, Leader, mustTry(t, b.ctx, l).Status)

		stacktest.MustExec(t, b.db.Stack.Postgres().DSN, fmt.Sprintf("DROP DATABASE %s WITH (FORCE)", b.db.Name))
		res := mustTry(t, b.ctx, l)
		require.Equal(t, Faulted, res.Status, "the probe fails, the fresh acquire cannot connect: %+v", res)
		require.Error(t, res.Err)
	})

	t.Run("PassesCancellationThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newAdvisoryT(t, b.db.Postgres, "a")
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		res, err := l.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
	})

	t.Run("TokensRiseAcrossGrants", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		leases := []*Advisory{newAdvisoryT(t, b.db.Postgres, "a"), newAdvisoryT(t, b.db.Postgres, "b")}
		var tokens []int64
		for i := range 6 {
			l := leases[i%2]
			res := eventuallyLeader(t, b.ctx, l, 10*time.Second)
			tokens = append(tokens, res.Term.Token)
			require.NoError(t, l.Release(b.ctx))
		}
		for i := 1; i < len(tokens); i++ {
			require.Greater(t, tokens[i], tokens[i-1], "tokens %v", tokens)
		}
	})

	t.Run("FenceRejectsAStaleTerm", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		createWritesTable(t, b.db.Postgres.DSN)
		l1, l2 := newAdvisoryT(t, b.db.Postgres, "a"), newAdvisoryT(t, b.db.Postgres, "b")
		old := mustTry(t, b.ctx, l1)
		require.Equal(t, Leader, old.Status)
		require.NoError(t, fencedWrite(b.ctx, b.admin, l1, old.Term, "first"))

		require.NoError(t, l1.Close(b.ctx))
		cur := eventuallyLeader(t, b.ctx, l2, 10*time.Second)

		require.ErrorIs(t, fencedWrite(b.ctx, b.admin, l1, old.Term, "stale"), ErrStaleToken)
		require.NoError(t, fencedWrite(b.ctx, b.admin, l2, cur.Term, "second"))
		require.Equal(t, []string{fmt.Sprintf("first@%d", old.Term.Token), fmt.Sprintf("second@%d", cur.Term.Token)}, writes(t, b.ctx, b.admin))

		err := fencedWrite(b.ctx, b.admin, l2, Term{Name: "other", Token: cur.Term.Token}, "wrong lease")
		require.ErrorContains(t, err, "checked against lease")
	})

	t.Run("FenceHoldsOffANewGrantUntilTheWriteCommits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		createWritesTable(t, b.db.Postgres.DSN)
		old := newAdvisoryT(t, b.db.Postgres, "a")
		next := newAdvisoryT(t, b.db.Postgres, "b", func(c *AdvisoryConfig) { c.ApplicationName = "lease-b" })
		term := mustTry(t, b.ctx, old)
		require.Equal(t, Leader, term.Status)

		// The old leader's write passed its fence and has not committed
		// when it loses the lock.
		work := stacktest.Connect(t, b.db.Postgres)
		tx, err := work.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		require.NoError(t, old.Fence(b.ctx, tx, term.Term))
		require.NoError(t, old.Release(b.ctx))

		granted := make(chan Result, 1)
		go func() {
			for {
				res, err := next.TryAcquire(b.ctx)
				if err != nil || res.Status == Leader {
					granted <- res
					return
				}
			}
		}()
		waitFor(t, 5*time.Second, "the new grant waits for the fenced write", func() (bool, error) {
			var waiting bool
			err := b.admin.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'lease-b' AND wait_event_type = 'Lock')`).Scan(&waiting)
			return waiting, err
		})
		_, err = tx.Exec(b.ctx, "INSERT INTO leader_writes (token, what) VALUES ($1, 'last-old-write')", term.Term.Token)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(b.ctx))

		res := <-granted
		require.Equal(t, Leader, res.Status)
		require.Equal(t, term.Term.Token+1, res.Term.Token)
	})

	t.Run("UsesItsOwnApplicationName", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := newAdvisoryT(t, b.db.Postgres, "a")
		require.Equal(t, Leader, mustTry(t, b.ctx, l).Status)
		var app string
		require.NoError(t, b.admin.QueryRow(b.ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
			advisoryHolderPID(t, b.ctx, b.admin, 271, 1)).Scan(&app))
		require.Equal(t, "doublerun-leader-lease", app)
	})

	t.Run("RefusesATransactionPooledEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := NewAdvisory(b.ctx, AdvisoryConfig{DSN: b.db.Transaction.DSN, Logger: testLogger(t)})
		require.ErrorIs(t, err, ErrTransactionPooled)
		require.ErrorContains(t, err, "AllowTransactionPooling")
		require.ErrorContains(t, err, "pool_mode=session")

		l := newAdvisoryT(t, b.db.Transaction, "a", allowTransactionPooling)
		require.Equal(t, EndpointTransactionPooled, l.Endpoint().Kind)
		require.Equal(t, pgx.QueryExecModeExec, l.connCfg.DefaultQueryExecMode)
	})

	t.Run("AcceptsDirectAndSessionPinnedEndpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, EndpointDirect, newAdvisoryT(t, b.db.Postgres, "a").Endpoint().Kind)
		require.Equal(t, EndpointPinned, newAdvisoryT(t, b.db.Session, "b").Endpoint().Kind)
	})
}

// TestAdvisoryTransactionPooling measures issue #556: the advisory lease
// through PgBouncer in transaction pooling.
func TestAdvisoryTransactionPooling(t *testing.T) {
	t.Parallel()

	t.Run("TwoLeasesAreLeaderAtOnceWithPoolSizeOne", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ep := noPreparedStatements(t, db)
		require.Equal(t, 1, ep.PoolSize)
		ctx := testCtx(t)
		a := newAdvisoryT(t, ep, "a", allowTransactionPooling)
		b := newAdvisoryT(t, ep, "b", allowTransactionPooling)

		ra, rb := mustTry(t, ctx, a), mustTry(t, ctx, b)
		require.Equal(t, Leader, ra.Status)
		require.Equal(t, Leader, rb.Status, "#556: the second lease's pg_try_advisory_lock ran on the lock-holding backend and succeeded")
		require.Equal(t, a.pid, b.pid, "one backend serves both")

		// The PID guard cannot fire: there is only one backend to see.
		again := tryAll(t, ctx, a, b)
		require.Equal(t, 2, leaders(again), "results %+v", again)

		// Fencing is what still tells the two apart.
		createWritesTable(t, db.Postgres.DSN)
		admin := stacktest.Connect(t, db.Postgres)
		require.ErrorIs(t, fencedWrite(ctx, admin, a, ra.Term, "a"), ErrStaleToken)
		require.NoError(t, fencedWrite(ctx, admin, b, rb.Term, "b"))
	})

	// With one backend every second acquire succeeds, and the PID guard
	// never fires: every probe sees the one PID. How often a second leader
	// appears and the guard removes it at larger pool sizes is measured by
	// BenchmarkPIDGuardAtPoolSizes.
	t.Run("PIDGuardNeverFiresWithPoolSizeOne", func(t *testing.T) {
		t.Parallel()
		const trials = 5
		db := stacktest.NewDB(t)
		ep := db.Transaction
		require.Equal(t, 1, ep.PoolSize)
		ctx := testCtx(t)
		// One NewAdvisory runs the endpoint check and creates the token
		// table; the trials skip the check.
		newAdvisoryT(t, ep, "setup", allowTransactionPooling)
		for i := range trials {
			opened, caught := guardTrial(t, ctx, ep, int32(1000+i))
			require.True(t, opened, "trial %d: with one backend every second acquire succeeds", i)
			require.False(t, caught, "trial %d: with one backend the PID guard never fires", i)
		}
	})
}

// noPreparedStatements is a transaction-pooled endpoint of pool size one
// that keeps no prepared statement for its clients, as PgBouncer before
// 1.24 does by default: there, pgx's statement cache fails with 42P05
// unless the lease runs in QueryExecModeExec, which is what the exec-mode
// guard needs a test to see. PgBouncer 1.24 serves the cache by default
// (max_prepared_statements = 200), so wherever the setting exists (1.21
// and later) the test builds a bouncer with max_prepared_statements = 0;
// before 1.21 the stack's own transaction endpoint already is one.
func noPreparedStatements(t *testing.T, db stacktest.DB) stack.Endpoint {
	t.Helper()
	if !pgbouncer.SupportsPreparedStatements(db.Transaction.Version) {
		return db.Transaction
	}
	ep := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 1, MaxPreparedStatements: -1})
	require.Zero(t, ep.MaxPreparedStatements, "the bouncer read back keeps prepared statements")
	return ep
}

// BenchmarkPIDGuardAtPoolSizes measures issue #556 at transaction pool
// sizes 1 to 4: in how many trials, in percent, a second leader appeared,
// and in how many the PID guard removed it by the next poll or missed it.
// Each iteration is one trial on a lock key of its own. Only pool size 1
// has a provable outcome, asserted. Run it with
//
//	DOUBLERUN_PROVIDER=native go test -run '^$' -bench '^BenchmarkPIDGuardAtPoolSizes$' -benchtime=20x ./lease/
func BenchmarkPIDGuardAtPoolSizes(b *testing.B) {
	for _, size := range []int{1, 2, 3, 4} {
		b.Run(fmt.Sprintf("Size%d", size), func(b *testing.B) {
			db := stacktest.NewDB(b)
			ep := db.Transaction
			if size != 1 {
				ep = db.AddBouncer(b, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: size})
			}
			ctx := testCtx(b)
			newAdvisoryT(b, ep, "setup", allowTransactionPooling)
			b.ResetTimer()
			var opened, caught, missed int
			for i := range b.N {
				o, c := guardTrial(b, ctx, ep, int32(1000+i))
				switch {
				case o && c:
					opened++
					caught++
				case o:
					opened++
					missed++
				}
			}
			pct := func(n int) float64 { return 100 * float64(n) / float64(b.N) }
			b.ReportMetric(pct(opened), "%second-leader")
			b.ReportMetric(pct(caught), "%guard-removed")
			b.ReportMetric(pct(missed), "%guard-missed")
			if size == 1 {
				require.Equal(b, b.N, opened, "with one backend every second acquire succeeds")
				require.Zero(b, caught, "with one backend the PID guard never fires")
			}
		})
	}
}

// guardTrial runs one #556 trial on its own lock key. opened reports that
// both leases were Leader in the same round; caught that one round later
// at most one was.
func guardTrial(t testing.TB, ctx context.Context, ep stack.Endpoint, key2 int32) (opened, caught bool) {
	t.Helper()
	mk := func(holder string) *Advisory {
		a, err := newAdvisory(AdvisoryConfig{DSN: ep.DSN, Holder: holder, Key2: key2, AllowTransactionPooling: true, Logger: testLogger(t)})
		require.NoError(t, err)
		a.connCfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		return a
	}
	a, b := mk("a"), mk("b")
	defer func() {
		_ = a.Close(context.WithoutCancel(ctx))
		_ = b.Close(context.WithoutCancel(ctx))
	}()
	require.Equal(t, Leader, mustTry(t, ctx, a).Status, "a fresh key is free")
	// b's acquire races a's next poll, as two replicas' polls do.
	round := tryAll(t, ctx, a, b)
	if leaders(round) < 2 {
		return false, false
	}
	next := tryAll(t, ctx, a, b)
	return true, leaders(next) < 2
}
