package fault_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestPgBouncerPause(t *testing.T) {
	t.Parallel()
	t.Run("TransactionPoolQueriesWaitUntilResume", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		tg := newTarget(t, db, shortTTL)
		client := mustConnect(t, db.Transaction.DSN)
		begin := time.Now()
		done := inject(t, fault.PgBouncerPause, tg)
		tg.waitEvent(t, "took hold")
		_, err := backendPID(client, 300*time.Millisecond)
		require.ErrorIs(t, err, context.DeadlineExceeded, "a query waits while the database is paused")
		waitInjected(t, done, time.Minute)
		require.GreaterOrEqual(t, time.Since(begin), fault.Hold(tg.Setting()))
		_, err = backendPID(mustConnect(t, db.Transaction.DSN), 5*time.Second)
		require.NoError(t, err, "queries run again after RESUME")
	})
	t.Run("SessionPoolNeverPausesUnderAnOpenSession", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		tg := newTarget(t, db, shortTTL)
		tg.lease, tg.work = db.Session, db.Session
		session := mustConnect(t, db.Session.DSN) // like the advisory lease: never lets go
		_, err := backendPID(session, 10*time.Second)
		require.NoError(t, err)
		waitInjected(t, inject(t, fault.PgBouncerPause, tg), time.Minute)
		require.Contains(t, fmtEvents(tg.Events()), "still waiting")
		require.Contains(t, fmtEvents(tg.Events()), "RESUME")
		_, err = backendPID(session, 5*time.Second)
		require.NoError(t, err, "the open session carried on")
		_, err = backendPID(mustConnect(t, db.Session.DSN), 5*time.Second)
		require.NoError(t, err, "new clients get in after RESUME")
	})
	t.Run("NotOnDirect", func(t *testing.T) {
		t.Parallel()
		for _, f := range []fault.Fault{fault.PgBouncerPause, fault.PgBouncerKill, fault.PgBouncerReconnect, fault.PgBouncerRestart} {
			require.False(t, f.Available(fault.Setting{Pooled: false}), f.Name())
			require.True(t, f.Available(fault.Setting{Pooled: true}), f.Name())
		}
	})
}

func TestPgBouncerKill(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	other := stacktest.NewDB(t)
	tg := newTarget(t, db, shortTTL)
	client := mustConnect(t, db.Transaction.DSN)
	bystander := mustConnect(t, other.Transaction.DSN)
	for _, c := range []*pgxConn{client, bystander} {
		_, err := backendPID(c, 10*time.Second)
		require.NoError(t, err)
	}

	require.NoError(t, fault.PgBouncerKill.Inject(context.Background(), tg))

	_, err := backendPID(client, 5*time.Second)
	require.Error(t, err, "the run's client connection was dropped")
	_, err = backendPID(bystander, 5*time.Second)
	require.NoError(t, err, "KILL is scoped to the run's database")
	_, err = backendPID(mustConnect(t, db.Transaction.DSN), 5*time.Second)
	require.NoError(t, err, "the database was resumed after KILL")
}

func TestPgBouncerReconnect(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	tg := newTarget(t, db, shortTTL)
	client := mustConnect(t, db.Transaction.DSN)
	before, err := backendPID(client, 10*time.Second)
	require.NoError(t, err)

	require.NoError(t, fault.PgBouncerReconnect.Inject(context.Background(), tg))

	require.Eventually(t, func() bool { return !backendAlive(t, db.Stack, before) }, 10*time.Second, 20*time.Millisecond,
		"the server connection the client last used is closed")
	after, err := backendPID(client, 5*time.Second)
	require.NoError(t, err, "the client connection itself survives")
	require.NotEqual(t, before, after, "the next transaction runs on a fresh backend")
}

func TestPgBouncerRestart(t *testing.T) {
	t.Parallel()
	// Bouncers of their own: restarting the shared ones would disturb the
	// tests running beside this one.
	t.Run("Transaction", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		ep := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 1})
		tg := newTarget(t, db, shortTTL)
		tg.lease, tg.work = ep, ep
		require.Equal(t, []string{ep.Name}, fault.Bouncers(tg))
		client := mustConnect(t, ep.DSN)
		_, err := backendPID(client, 10*time.Second)
		require.NoError(t, err)

		require.NoError(t, fault.PgBouncerRestart.Inject(context.Background(), tg))

		_, err = backendPID(client, 5*time.Second)
		require.Error(t, err, "the restart dropped the client connection")
		_, err = backendPID(mustConnect(t, ep.DSN), 5*time.Second)
		require.NoError(t, err, "the bouncer is back on the same address")
	})
	t.Run("PinnedRestartsBothPools", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		leaseEP := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolSession})
		workEP := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 1})
		tg := newTarget(t, db, shortTTL)
		tg.lease, tg.work = leaseEP, workEP
		require.Equal(t, []string{leaseEP.Name, workEP.Name}, fault.Bouncers(tg))
		var clients []*pgxConn
		for _, ep := range []stack.Endpoint{leaseEP, workEP} {
			c := mustConnect(t, ep.DSN)
			_, err := backendPID(c, 10*time.Second)
			require.NoError(t, err)
			clients = append(clients, c)
		}

		require.NoError(t, fault.PgBouncerRestart.Inject(context.Background(), tg))

		for i, c := range clients {
			_, err := backendPID(c, 5*time.Second)
			require.Error(t, err, "client %d was dropped", i)
		}
		require.Contains(t, fmtEvents(tg.Events()), "started pgbouncer "+leaseEP.Name+", "+workEP.Name)
	})
}
