package chaos_test

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Each test here shows that a fault really does to the stack what its name
// says, and that it is undone when Inject returns. scenario_test.go shows
// what each does to a run.

// shortTTL makes the holding faults hold 1.5s; its long Work keeps the
// piece of work newTarget shows fresh, so faults strike at once.
var shortTTL = scenarios.Scenario{Strategy: "advisory", TTL: time.Second, Work: time.Hour}

func TestTerminateLeaderBackend(t *testing.T) {
	t.Parallel()
	t.Run("EndsTheBackendThatHoldsTheLock", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		// The leader's lease connection, holding the lock on its backend.
		lease := mustConnect(t, db.Postgres.DSN)
		var got bool
		require.NoError(t, lease.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(271, 1)").Scan(&got))
		require.True(t, got)
		pid, err := backendPID(lease, 10*time.Second)
		require.NoError(t, err)
		tg := newTarget(t, db, shortTTL)
		tg.leader.LeaseBackendPID = pid

		require.NoError(t, chaos.TerminateLeaderBackend.Inject(context.Background(), tg))

		require.False(t, backendAlive(t, db.Stack, pid), "backend %d is gone from pg_stat_activity", pid)
		_, err = backendPID(lease, 5*time.Second)
		require.Error(t, err, "the lease connection lost its backend")
		other := mustConnect(t, db.Postgres.DSN)
		require.NoError(t, other.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(271, 1)").Scan(&got))
		require.True(t, got, "the lock died with its backend")
		require.Contains(t, fmtEvents(tg.Events()), "terminated")
	})
	t.Run("FindsTheLockHolderWhenNoPIDIsReported", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		tg := newTarget(t, db, shortTTL)
		require.ErrorContains(t, chaos.TerminateLeaderBackend.Inject(context.Background(), tg),
			"reported no lease backend PID and no backend holds advisory lock (271, 1)")
		lease := mustConnect(t, db.Postgres.DSN)
		var got bool
		require.NoError(t, lease.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(271, 1)").Scan(&got))
		require.True(t, got)
		pid, err := backendPID(lease, 10*time.Second)
		require.NoError(t, err)

		require.NoError(t, chaos.TerminateLeaderBackend.Inject(context.Background(), tg))

		require.False(t, backendAlive(t, db.Stack, pid))
		require.Contains(t, fmtEvents(tg.Events()), "holding the advisory lock")
	})
	t.Run("OnlyForStrategiesThatReportABackend", func(t *testing.T) {
		t.Parallel()
		for strategy, want := range map[string]bool{"advisory": true, "advisory-unguarded": true, "fenced": false, "my-own": false} {
			require.Equal(t, want, chaos.TerminateLeaderBackend.Available(scenarios.Scenario{Strategy: strategy}), strategy)
		}
	})
}

func TestKillLeader(t *testing.T) {
	t.Parallel()
	cmd, exited := startProcess(t)
	tg := newTarget(t, stacktest.NewDB(t), shortTTL)
	tg.leader.PID = cmd.Process.Pid

	require.NoError(t, chaos.KillLeader.Inject(context.Background(), tg))
	requireSignalled(t, exited, syscall.SIGKILL, "killed by SIGKILL", "the leader process is still running")
	require.Equal(t, []string{"replica-killed r1"}, tg.Events(), "the kill is logged so its open work ends there")
}

// requireSignalled waits up to 5s for the process behind exited to end by
// sig; why explains the signal, stillRunning the failure to end.
func requireSignalled(t *testing.T, exited <-chan *exec.ExitError, sig syscall.Signal, why, stillRunning string) {
	t.Helper()
	select {
	case ee := <-exited:
		require.NotNil(t, ee)
		require.Equal(t, sig, ee.Sys().(syscall.WaitStatus).Signal(), why)
	case <-time.After(5 * time.Second):
		t.Fatal(stillRunning)
	}
}

func TestFreezeLeader(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*fakeTarget, *exec.Cmd) {
		cmd, _ := startProcess(t)
		tg := newTarget(t, stacktest.NewDB(t), shortTTL)
		tg.leader.PID = cmd.Process.Pid
		return tg, cmd
	}
	t.Run("StoppedForLongerThanTheTTLThenRunning", func(t *testing.T) {
		t.Parallel()
		tg, cmd := setup(t)
		pid := cmd.Process.Pid
		begin := time.Now()
		done := inject(t, chaos.FreezeLeader, tg)
		tg.waitEvent(t, "SIGSTOP")
		for time.Since(begin) < time.Second { // the TTL
			s, err := chaos.ProcessState(pid)
			require.NoError(t, err)
			require.Equal(t, byte('T'), s, "stopped while frozen")
			time.Sleep(50 * time.Millisecond)
		}
		waitInjected(t, done, time.Minute)
		require.GreaterOrEqual(t, time.Since(begin), chaos.Hold(tg.Scenario()), "held for TTL + margin")
		require.Greater(t, chaos.Hold(tg.Scenario()), tg.Scenario().TTL)
		s, err := chaos.ProcessState(pid)
		require.NoError(t, err)
		require.NotEqual(t, byte('T'), s, "running again after Inject")
		require.Contains(t, fmtEvents(tg.Events()), "SIGCONT")
	})
	t.Run("ResumesEvenWhenCancelled", func(t *testing.T) {
		t.Parallel()
		tg, cmd := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- chaos.FreezeLeader.Inject(ctx, tg) }()
		tg.waitEvent(t, "SIGSTOP")
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		s, err := chaos.ProcessState(cmd.Process.Pid)
		require.NoError(t, err)
		require.NotEqual(t, byte('T'), s, "a cancelled freeze still resumes the process")
	})
}

func TestPartitionLeader(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	p, dsn := proxyTo(t, db.Postgres)
	tg := newTarget(t, db, scenarios.Scenario{Strategy: "advisory", TTL: 2 * time.Second}) // a 3s partition
	tg.proxies["r1"] = []*toxiproxy.Proxy{p}
	// The leader's lease connection, through its proxy, holding the lock.
	lease := mustConnect(t, dsn)
	var got bool
	require.NoError(t, lease.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(271, 1)").Scan(&got))
	require.True(t, got)
	leasePID, err := backendPID(lease, 10*time.Second)
	require.NoError(t, err)
	victim := mustConnect(t, dsn)
	_, err = backendPID(victim, 10*time.Second)
	require.NoError(t, err)
	closer := mustConnect(t, dsn)
	closerPID, err := backendPID(closer, 10*time.Second)
	require.NoError(t, err)
	observer := mustConnect(t, db.Postgres.DSN) // direct: not partitioned

	done := inject(t, chaos.PartitionLeader, tg)
	tg.waitEvent(t, "partition")

	// The server is not told: the lease's backend lives and keeps the lock.
	require.True(t, backendAlive(t, db.Stack, leasePID))
	require.NoError(t, observer.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(271, 1)").Scan(&got))
	require.False(t, got, "the partitioned leader's backend still holds the lock")
	// Nothing gets through, on an open connection or a new one.
	_, err = backendPID(victim, 300*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a query through the partition times out")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = connect(ctx, dsn)
	cancel()
	require.Error(t, err, "a new connection through the partition does not complete")
	// A client that gives up and closes its socket: the proxy passes the
	// close on, so unlike a real partition the server learns of it.
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_ = closer.Close(cctx)
	ccancel()
	require.Eventually(t, func() bool { return !backendAlive(t, db.Stack, closerPID) }, 10*time.Second, 20*time.Millisecond,
		"the backend of a connection its client closed during the partition ends")
	require.True(t, backendAlive(t, db.Stack, leasePID), "the silent one lives on")

	waitInjected(t, done, time.Minute)
	// Healed: new connections work at once.
	fresh := mustConnect(t, dsn)
	_, err = backendPID(fresh, 5*time.Second)
	require.NoError(t, err, "a new connection works after the heal")
	// Connections that lived through the partition lost bytes; healing
	// closes them, and their backends end, freeing the lock.
	_, err = backendPID(lease, 5*time.Second)
	require.Error(t, err, "a connection that lived through the partition is closed at the heal")
	require.Eventually(t, func() bool { return !backendAlive(t, db.Stack, leasePID) }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, observer.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(271, 1)").Scan(&got))
	require.True(t, got, "the lock is free after the heal")
	require.Empty(t, p.Toxics.GetToxicArray(), "no toxic left behind")
}

func TestDelayLeader(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	p, dsn := proxyTo(t, db.Postgres)
	sc := shortTTL
	sc.TTL = 2 * time.Second // a 3s delay of 500ms ± 250ms each way
	tg := newTarget(t, db, sc)
	tg.proxies["r1"] = []*toxiproxy.Proxy{p}
	conn := mustConnect(t, dsn)
	roundTrip := func() time.Duration {
		begin := time.Now()
		_, err := backendPID(conn, 30*time.Second)
		require.NoError(t, err)
		return time.Since(begin)
	}
	latency, jitter := chaos.Delay(tg.Scenario())
	require.Equal(t, 500*time.Millisecond, latency, "a quarter of the TTL")
	require.Equal(t, 250*time.Millisecond, jitter, "an eighth of the TTL")

	done := inject(t, chaos.DelayLeader, tg)
	tg.waitEvent(t, "delay")
	var rtts []time.Duration
	for range 2 {
		rtts = append(rtts, roundTrip())
	}
	if len(done) > 0 {
		t.Fatalf("the delay ended before two round trips were measured (%v); the machine is too busy for this test", rtts)
	}
	for _, rtt := range rtts {
		require.GreaterOrEqual(t, rtt, 2*(latency-jitter), "each direction is delayed by latency ± jitter")
	}
	waitInjected(t, done, time.Minute)
	require.Less(t, roundTrip(), latency, "the delay is gone and the connection survived it")
	require.Empty(t, p.Toxics.GetToxicArray())
}

func TestPgBouncerPause(t *testing.T) {
	t.Parallel()
	t.Run("TransactionPoolQueriesWaitUntilResume", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		tg := newTarget(t, db, shortTTL)
		client := mustConnect(t, db.Transaction.DSN)
		begin := time.Now()
		done := inject(t, chaos.PgBouncerPause, tg)
		tg.waitEvent(t, "took hold")
		_, err := backendPID(client, 300*time.Millisecond)
		require.ErrorIs(t, err, context.DeadlineExceeded, "a query waits while the database is paused")
		waitInjected(t, done, time.Minute)
		require.GreaterOrEqual(t, time.Since(begin), chaos.Hold(tg.Scenario()))
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
		waitInjected(t, inject(t, chaos.PgBouncerPause, tg), time.Minute)
		require.Contains(t, fmtEvents(tg.Events()), "still waiting")
		require.Contains(t, fmtEvents(tg.Events()), "RESUME")
		_, err = backendPID(session, 5*time.Second)
		require.NoError(t, err, "the open session carried on")
		_, err = backendPID(mustConnect(t, db.Session.DSN), 5*time.Second)
		require.NoError(t, err, "new clients get in after RESUME")
	})
	t.Run("NotOnDirect", func(t *testing.T) {
		t.Parallel()
		require.False(t, chaos.PgBouncerPause.Available(scenarios.Scenario{Topology: scenarios.Topology{Kind: scenarios.Direct}}))
		require.True(t, chaos.PgBouncerPause.Available(scenarios.Scenario{Topology: scenarios.Topology{Kind: scenarios.Pinned}}))
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

	require.NoError(t, chaos.PgBouncerKill.Inject(context.Background(), tg))

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

	require.NoError(t, chaos.PgBouncerReconnect.Inject(context.Background(), tg))

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
		require.Equal(t, []string{ep.Name}, chaos.Bouncers(tg))
		client := mustConnect(t, ep.DSN)
		_, err := backendPID(client, 10*time.Second)
		require.NoError(t, err)

		require.NoError(t, chaos.PgBouncerRestart.Inject(context.Background(), tg))

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
		require.Equal(t, []string{leaseEP.Name, workEP.Name}, chaos.Bouncers(tg))
		var clients []*pgxConn
		for _, ep := range []stack.Endpoint{leaseEP, workEP} {
			c := mustConnect(t, ep.DSN)
			_, err := backendPID(c, 10*time.Second)
			require.NoError(t, err)
			clients = append(clients, c)
		}

		require.NoError(t, chaos.PgBouncerRestart.Inject(context.Background(), tg))

		for i, c := range clients {
			_, err := backendPID(c, 5*time.Second)
			require.Error(t, err, "client %d was dropped", i)
		}
		require.Contains(t, fmtEvents(tg.Events()), "started pgbouncer "+leaseEP.Name+", "+workEP.Name)
	})
}

func TestGracefulHandover(t *testing.T) {
	t.Parallel()
	cmd, exited := startProcess(t)
	tg := newTarget(t, stacktest.NewDB(t), shortTTL)
	tg.leader.PID = cmd.Process.Pid

	require.NoError(t, chaos.GracefulHandover.Inject(context.Background(), tg))
	requireSignalled(t, exited, syscall.SIGTERM, "asked to stop with SIGTERM", "Inject returned before the leader exited")
}

func TestCatalogIsRegistered(t *testing.T) {
	t.Parallel()
	names := scenarios.FaultNames()
	for _, f := range chaos.Faults {
		require.Contains(t, names, f.Name())
		if _, ok := f.(scenarios.FaultTimeout); ok {
			require.Positive(t, f.(scenarios.FaultTimeout).Timeout())
		}
	}
	require.Len(t, chaos.Faults, 11)
	_, err := chaos.LookupFault("METEOR")
	require.EqualError(t, err, `unknown fault "METEOR"; valid: TERMINATE_LEADER_BACKEND, KILL_LEADER, FREEZE_LEADER, PARTITION_LEADER, DELAY_LEADER, PGBOUNCER_PAUSE, PGBOUNCER_KILL, PGBOUNCER_RECONNECT, PGBOUNCER_RESTART, POSTGRES_RESTART, GRACEFUL_HANDOVER`)
}
