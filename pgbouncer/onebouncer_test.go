package pgbouncer_test

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

// The one-bouncer #556 fix: one PgBouncer, in transaction pooling, serves
// the test's database under two names. <db>_lease is in session pooling and
// carries only the lease's lock; <db> is in transaction pooling and carries
// the work.

// oneBouncer is what every one-bouncer test starts with.
type oneBouncer struct {
	db     stacktest.DB
	cfg    pgbouncer.Config
	lease  stack.Endpoint // <db>_lease, session pooling
	work   stack.Endpoint // <db>, transaction pooling
	direct *pgx.Conn      // to <db>, through no bouncer: the observer
	admin  *pgbouncer.Admin
}

// leasePoolSize is 2 so that a second client of the lease name gets a
// backend of its own in session pooling instead of waiting for the first.
const leasePoolSize = 2

func setupOneBouncer(t *testing.T, workPoolSize int, opts ...func(*pgbouncer.Config)) oneBouncer {
	t.Helper()
	db := stacktest.NewDB(t)
	leaseName := db.Name + "_lease"
	cfg := pgbouncer.Config{
		PoolMode:        pgbouncer.PoolTransaction,
		DefaultPoolSize: workPoolSize,
		Databases: []pgbouncer.Database{
			{Name: leaseName, DBName: db.Name, PoolSize: leasePoolSize, PoolMode: pgbouncer.PoolSession},
			{Name: db.Name, PoolSize: workPoolSize, PoolMode: pgbouncer.PoolTransaction},
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	ep := db.AddBouncer(t, cfg)
	lease := ep.WithDatabase(leaseName)
	lease.PoolMode = cfg.EffectivePoolMode(leaseName, "")
	work := ep
	work.PoolMode = cfg.EffectivePoolMode(db.Name, "")
	require.Equal(t, pgbouncer.PoolSession, lease.PoolMode)
	require.Equal(t, pgbouncer.PoolTransaction, work.PoolMode)
	return oneBouncer{
		db: db, cfg: cfg, lease: lease, work: work,
		direct: stacktest.Connect(t, db.Postgres),
		admin:  admin(t, ep.AdminDSN),
	}
}

// tryLock runs the original's acquire statement: the answer and the PID of
// the backend that gave it.
func tryLock(t *testing.T, conn *pgx.Conn) (bool, int) {
	t.Helper()
	var got bool
	var backend int
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT pg_try_advisory_lock(271, 1), pg_backend_pid()").Scan(&got, &backend))
	return got, backend
}

// acquire connects a client to ep that takes lock (271, 1), and returns it
// with the PID of the backend that took the lock.
func acquire(t *testing.T, ep stack.Endpoint) (*pgx.Conn, int) {
	t.Helper()
	conn := stacktest.Connect(t, ep)
	got, backend := tryLock(t, conn)
	require.True(t, got, "the first client of %s takes the lock", ep.Name)
	return conn, backend
}

// holders lists the backends that hold lock (271, 1) on the test's
// database, as pg_locks says through the direct connection.
func (b oneBouncer) holders(t *testing.T) []int {
	t.Helper()
	rows, err := b.direct.Query(context.Background(), `
		SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND classid = 271 AND objid = 1 AND objsubid = 2 AND granted
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY pid`)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return pids
}

// alive reports whether backend pid still exists.
func (b oneBouncer) alive(t *testing.T, pid int) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.direct.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&ok))
	return ok
}

// poolModes returns SHOW POOLS' mode for each of the test's two names.
func (b oneBouncer) poolModes(t *testing.T) map[string]pgbouncer.PoolMode {
	t.Helper()
	pools, err := b.admin.Pools(context.Background())
	require.NoError(t, err)
	out := map[string]pgbouncer.PoolMode{}
	for _, p := range pools {
		if p.Database == b.db.Name || p.Database == b.db.Name+"_lease" {
			out[p.Database] = p.PoolMode
		}
	}
	return out
}

func TestOneBouncerServesSessionAndTransactionNames(t *testing.T) {
	t.Parallel()

	t.Run("SessionNameKeepsItsBackendAndItsLock", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1)
		leader, backend := acquire(t, b.lease)
		for range 5 {
			require.Equal(t, backend, pid(t, leader), "a session-pooled client keeps its backend across transactions")
		}
		other := stacktest.Connect(t, b.lease)
		got, otherBackend := tryLock(t, other)
		require.NotEqual(t, backend, otherBackend, "a second client of the session name gets a backend of its own")
		require.False(t, got, "and the lock excludes it")
		require.Equal(t, []int{backend}, b.holders(t), "the lock stays on the leader's backend")
		var unlocked bool
		require.NoError(t, leader.QueryRow(context.Background(), "SELECT pg_advisory_unlock(271, 1)").Scan(&unlocked))
		require.True(t, unlocked, "the client that took the lock can release it")
		require.Empty(t, b.holders(t))
	})

	// The transaction name on the same bouncer is the #556 topology: two
	// clients share the pool's one backend, and the second re-enters the
	// first one's lock.
	t.Run("TransactionNameSharesItsBackend", func(t *testing.T) {
		t.Parallel()
		b := setupOneBouncer(t, 1)
		first := stacktest.Connect(t, b.work)
		second := stacktest.Connect(t, b.work)
		got, backend := tryLock(t, first)
		require.True(t, got)
		got, secondBackend := tryLock(t, second)
		require.Equal(t, backend, secondBackend, "pool of one: both clients run on the same backend")
		require.True(t, got, "the second client re-enters the lock through the shared backend")
		require.Equal(t, []int{backend}, b.holders(t))
	})
}

// A lock taken through the session name lives on a backend of the session
// name's pool, which the transaction name's pool never hands out. Every
// backend of the transaction pool is tried at once: each client holds a
// transaction open, so the pool has to give each a backend of its own.
func TestSessionNameLockExcludesTransactionNameClients(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 2} {
		t.Run(fmt.Sprintf("PoolSize%d", size), func(t *testing.T) {
			t.Parallel()
			b := setupOneBouncer(t, size)
			ctx := context.Background()
			_, leaderBackend := acquire(t, b.lease) // open until the test ends

			seen := map[int]bool{}
			for round := range 3 {
				var txs []pgx.Tx
				for range size {
					tx, err := stacktest.Connect(t, b.work).Begin(ctx)
					require.NoError(t, err)
					txs = append(txs, tx)
				}
				for i, tx := range txs {
					var got bool
					var backend int
					require.NoError(t, tx.QueryRow(ctx, "SELECT pg_try_advisory_lock(271, 1), pg_backend_pid()").Scan(&got, &backend))
					require.False(t, got, "round %d, work client %d on backend %d got the lease's lock", round, i, backend)
					require.NotEqual(t, leaderBackend, backend)
					seen[backend] = true
				}
				for _, tx := range txs {
					require.NoError(t, tx.Rollback(ctx))
				}
			}
			require.Len(t, seen, size, "every backend of the transaction pool was tried")
			require.Equal(t, []int{leaderBackend}, b.holders(t))
		})
	}
}

func TestShowPoolsListsBothNamesWithTheirModes(t *testing.T) {
	t.Parallel()
	b := setupOneBouncer(t, 1)
	pid(t, stacktest.Connect(t, b.lease))
	pid(t, stacktest.Connect(t, b.work))
	require.Equal(t, map[string]pgbouncer.PoolMode{
		b.db.Name + "_lease": pgbouncer.PoolSession,
		b.db.Name:            pgbouncer.PoolTransaction,
	}, b.poolModes(t))
}

// Each name's pool gets the mode Config.EffectivePoolMode predicts: its own
// entry's, the global one for an entry without a mode, the "*" entry's for
// a database reached through the fallback.
func TestPoolModePerDatabaseReachesPgBouncer(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	cfg := pgbouncer.Config{
		PoolMode: pgbouncer.PoolTransaction,
		Databases: []pgbouncer.Database{
			{Name: db.Name + "_lease", DBName: db.Name, PoolMode: pgbouncer.PoolSession},
			{Name: db.Name + "_work", DBName: db.Name},
			{Name: "*", PoolMode: pgbouncer.PoolStatement},
		},
	}
	ep := db.AddBouncer(t, cfg)
	want := map[string]pgbouncer.PoolMode{}
	for _, name := range []string{db.Name + "_lease", db.Name + "_work", db.Name} {
		want[name] = cfg.EffectivePoolMode(name, "")
		named := ep.WithDatabase(name)
		named.PoolMode = want[name]
		pid(t, stacktest.Connect(t, named))
	}
	require.Equal(t, map[string]pgbouncer.PoolMode{
		db.Name + "_lease": pgbouncer.PoolSession,
		db.Name + "_work":  pgbouncer.PoolTransaction,
		db.Name:            pgbouncer.PoolStatement,
	}, want)

	pools, err := admin(t, ep.AdminDSN).Pools(context.Background())
	require.NoError(t, err)
	got := map[string]pgbouncer.PoolMode{}
	for _, p := range pools {
		if _, ours := want[p.Database]; ours {
			got[p.Database] = p.PoolMode
		}
	}
	require.Equal(t, want, got)
}

// A [users] entry gives every pool of that user its mode, over the
// database's own: the order Config.EffectivePoolMode follows.
func TestUserPoolModeWinsOverDatabasePoolMode(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	user := stacktest.Shared(t).Postgres()
	pgcfg, err := pgx.ParseConfig(user.DSN)
	require.NoError(t, err)
	cfg := pgbouncer.Config{
		PoolMode:      pgbouncer.PoolTransaction,
		Databases:     []pgbouncer.Database{{Name: db.Name, PoolMode: pgbouncer.PoolTransaction}},
		UserPoolModes: map[string]pgbouncer.PoolMode{pgcfg.User: pgbouncer.PoolSession},
	}
	ep := db.AddBouncer(t, cfg)
	ep.PoolMode = cfg.EffectivePoolMode(db.Name, pgcfg.User)
	require.Equal(t, pgbouncer.PoolSession, ep.PoolMode)

	_, backend := acquire(t, ep) // the first client, open until the test ends
	second := stacktest.Connect(t, ep)
	got, secondBackend := tryLock(t, second)
	require.NotEqual(t, backend, secondBackend, "session pooling: the second client gets a backend of its own")
	require.False(t, got)

	pools, err := admin(t, ep.AdminDSN).Pools(context.Background())
	require.NoError(t, err)
	var modes []pgbouncer.PoolMode
	for _, p := range pools {
		if p.Database == db.Name && p.User == pgcfg.User {
			modes = append(modes, p.PoolMode)
		}
	}
	require.Equal(t, []pgbouncer.PoolMode{pgbouncer.PoolSession}, modes)
}

// waitFor polls cond every millisecond for up to 10 s and returns how long
// it took to hold.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, what)
	return time.Since(start)
}
