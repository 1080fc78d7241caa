package pgbouncer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func admin(t *testing.T, dsn string) *pgbouncer.Admin {
	t.Helper()
	a, err := pgbouncer.ConnectAdmin(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

func pid(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var p int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&p))
	return p
}

func TestAdminShowsPoolsServersClientsConfigAndVersion(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx := context.Background()
	conn := stacktest.Connect(t, db.Session)
	backend := pid(t, conn)
	a := admin(t, db.Session.AdminDSN)

	pools, err := a.Pools(ctx)
	require.NoError(t, err)
	var found bool
	for _, p := range pools {
		if p.Database == db.Name {
			found = true
			require.Equal(t, pgbouncer.PoolSession, p.PoolMode)
			require.Equal(t, 1, p.ClActive, "our one client")
		}
	}
	require.True(t, found, "SHOW POOLS lists %s", db.Name)

	servers, err := a.Servers(ctx)
	require.NoError(t, err)
	var pids []int
	for _, s := range servers {
		if s.Database == db.Name {
			pids = append(pids, s.RemotePID)
		}
	}
	require.Equal(t, []int{backend}, pids, "SHOW SERVERS remote_pid is the client's backend")

	clients, err := a.Clients(ctx)
	require.NoError(t, err)
	var ours int
	for _, c := range clients {
		if c.Database == db.Name {
			ours++
		}
	}
	require.Equal(t, 1, ours)

	conf, err := a.Config(ctx)
	require.NoError(t, err)
	require.Equal(t, "session", conf["pool_mode"])

	v, err := a.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, db.Session.Version, v)
	_, err = pgbouncer.ParseVersion(v)
	require.NoError(t, err)
}

func TestAdminPauseHoldsQueriesUntilResume(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx := context.Background()
	conn := stacktest.Connect(t, db.Transaction)
	pid(t, conn) // the pool now exists
	a := admin(t, db.Transaction.AdminDSN)

	requireQueryWaits(t, conn, "paused",
		func() error { return a.Pause(ctx, db.Name) },
		func() error { return a.Resume(ctx, db.Name) })
}

func TestAdminKillDropsClientsUntilResume(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx := context.Background()
	conn := stacktest.Connect(t, db.Transaction)
	pid(t, conn)
	a := admin(t, db.Transaction.AdminDSN)

	require.NoError(t, a.Kill(ctx, db.Name))
	var one int
	require.Error(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one), "the killed client's connection is gone")
	require.NoError(t, a.Resume(ctx, db.Name))
	again := stacktest.Connect(t, db.Transaction)
	require.NoError(t, again.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.ErrorContains(t, a.Kill(ctx, ""), "KILL needs a database name")
}

func TestAdminReconnectGivesANewBackend(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx := context.Background()
	conn := stacktest.Connect(t, db.Transaction)
	before := pid(t, conn)
	require.Equal(t, before, pid(t, conn), "pool of one: the same backend every time")
	a := admin(t, db.Transaction.AdminDSN)

	require.NoError(t, a.Reconnect(ctx, db.Name))
	require.Eventually(t, func() bool { return pid(t, conn) != before }, 10*time.Second, 50*time.Millisecond,
		"after RECONNECT the next transaction runs on a new backend")
}

func TestAdminDisableRejectsNewClientsUntilEnable(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx := context.Background()
	pid(t, stacktest.Connect(t, db.Session))
	a := admin(t, db.Session.AdminDSN)

	require.NoError(t, a.Disable(ctx, db.Name))
	cfg, err := db.Session.ConnConfig()
	require.NoError(t, err)
	_, err = pgx.ConnectConfig(ctx, cfg)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a disabled database refuses logins: %v", err)
	require.NoError(t, a.Enable(ctx, db.Name))
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
}

// Suspend has its own bouncer: it stops every socket of the process.
func TestAdminSuspendStopsTrafficUntilResume(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ep := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 1})
	ctx := context.Background()
	conn := stacktest.Connect(t, ep)
	pid(t, conn)
	a := admin(t, ep.AdminDSN)

	requireQueryWaits(t, conn, "suspended",
		func() error { return a.Suspend(ctx) },
		func() error { return a.Resume(ctx, "") })
}

// requireQueryWaits checks that a query sent on conn after hold does not
// finish while held, and succeeds once release runs.
func requireQueryWaits(t *testing.T, conn *pgx.Conn, state string, hold, release func() error) {
	t.Helper()
	require.NoError(t, hold())
	done := make(chan error, 1)
	go func() {
		var one int
		done <- conn.QueryRow(context.Background(), "SELECT 1").Scan(&one)
	}()
	select {
	case err := <-done:
		t.Fatalf("query finished while %s (err %v)", state, err)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, release())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("query still waiting after RESUME")
	}
}

// Behind transaction pooling without protocol-level prepared statement
// support, pgx's default statement cache collides on the shared backend;
// the mode ExecMode picks does not. With support (PgBouncer 1.21+ and
// max_prepared_statements > 0, as in newer public images) the cache works.
func TestExecModeSurvivesTransactionPooling(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ep := db.Transaction
	supported := pgbouncer.SupportsPreparedStatements(ep.Version) && ep.MaxPreparedStatements > 0
	ctx := context.Background()

	run := func(mode pgx.QueryExecMode) error {
		cfg, err := pgx.ParseConfig(ep.DSN)
		require.NoError(t, err)
		cfg.DefaultQueryExecMode = mode
		var errs []error
		for range 3 {
			c, err := pgx.ConnectConfig(ctx, cfg)
			require.NoError(t, err)
			defer c.Close(ctx)
			for i := range 5 {
				var n int
				errs = append(errs, c.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n))
			}
		}
		return errors.Join(errs...)
	}
	err := run(pgx.QueryExecModeCacheStatement)
	if supported {
		require.NoError(t, err, "PgBouncer %s with max_prepared_statements=%d", ep.Version, ep.MaxPreparedStatements)
	} else {
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "the default statement cache fails on PgBouncer %s: %v", ep.Version, err)
		require.Contains(t, []string{"42P05", "26000"}, pgErr.Code)
	}
	require.NoError(t, run(ep.ExecMode()))
}
