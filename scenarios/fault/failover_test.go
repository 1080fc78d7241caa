package fault_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The failover faults act on a primary and its standby (stacktest.OwnHA),
// with the oracle on the stack's third server.

func TestFailoverFaultsNeedAStandby(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault       fault.Fault
		sync, async bool
	}{
		{fault.PrimaryFailover, true, true},
		{fault.PrimaryFailoverLossy, false, true},
		{fault.Switchover, true, true},
	} {
		t.Run(tc.fault.Name(), func(t *testing.T) {
			t.Parallel()
			require.False(t, tc.fault.Available(fault.Setting{}), "without a standby")
			require.Equal(t, tc.sync, tc.fault.Available(fault.Setting{Replication: stack.ReplicationSync}), "sync")
			require.Equal(t, tc.async, tc.fault.Available(fault.Setting{Replication: stack.ReplicationAsync}), "async")
		})
	}
}

// newHATarget is newTarget on a stack with a standby: the oracle's tables
// are on its third server, where r1 is in the middle of a piece of work,
// and the work goes through the transaction bouncer.
func newHATarget(t *testing.T, s *stack.Stack, setting fault.Setting) *fakeTarget {
	t.Helper()
	db := stacktest.NewDBOn(t, s)
	oracleDSN := s.Oracle().WithDatabase(db.Name).DSN
	require.NoError(t, oracle.Migrate(context.Background(), mustConnect(t, oracleDSN)))
	rec, err := oracle.NewRecorder(context.Background(), oracleDSN, "r1")
	require.NoError(t, err)
	defer rec.Close()
	_, err = rec.Begin(context.Background(), 1, 0)
	require.NoError(t, err)
	return &fakeTarget{setting: setting, db: db, lease: db.Transaction, work: db.Transaction,
		leader: fault.Replica{ID: "r1"}, proxies: nil}
}

// requireSteps checks that the events name each step of a failover in
// order, and logs them: run with -v, they are the steps' times.
func requireSteps(t *testing.T, tg *fakeTarget, how string) {
	t.Helper()
	steps := []string{
		"injected r1 " + how + " of primary pg1",
		"chaos primary pg1 down, ",
		"chaos pg2 promoted, timeline 2, ",
		"chaos address leads to pg2, ",
		"chaos first statement on the new primary through transaction, ",
	}
	var got []string
	for _, e := range tg.Events() {
		e = strings.Join(strings.Fields(e), " ") // an event of no replica has two spaces
		for _, s := range steps {
			if strings.HasPrefix(e, s) {
				got = append(got, s)
				t.Log(e)
			}
		}
	}
	require.Equal(t, steps, got, "events %s", fmtEvents(tg.Events()))
}

func ints(t *testing.T, dsn, sql string) []int {
	t.Helper()
	rows, err := mustConnect(t, dsn).Query(context.Background(), sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return out
}

func TestPrimaryFailover(t *testing.T) {
	t.Parallel()
	s := stacktest.OwnHA(t, stack.ReplicationAsync)
	tg := newHATarget(t, s, fault.Setting{Replication: stack.ReplicationAsync, Pooled: true, TTL: time.Second, Work: time.Hour})
	_, err := mustConnect(t, tg.db.Transaction.DSN).Exec(context.Background(), "CREATE TABLE acked (i int)")
	require.NoError(t, err)
	// A session on the primary, as the leader's lease holds one.
	session := mustConnect(t, tg.db.Postgres.DSN)

	require.NoError(t, fault.PrimaryFailover.Inject(context.Background(), tg))

	requireSteps(t, tg, "SIGKILL")
	_, err = backendPID(session, 5*time.Second)
	require.Error(t, err, "every session on the old primary ended")
	r, _ := s.Replication()
	require.Equal(t, stack.StandbyName, r.Routed)
	_, err = mustConnect(t, tg.db.Transaction.DSN).Exec(context.Background(), "INSERT INTO acked VALUES (1)")
	require.NoError(t, err)
	require.Equal(t, []int{1}, ints(t, tg.db.Postgres.DSN, "SELECT i FROM acked"), "the new primary takes writes through the bouncer")
}

// The planned failover in sync mode loses nothing acknowledged.
func TestSwitchover(t *testing.T) {
	t.Parallel()
	s := stacktest.OwnHA(t, stack.ReplicationSync)
	tg := newHATarget(t, s, fault.Setting{Replication: stack.ReplicationSync, Pooled: true, TTL: time.Second, Work: time.Hour})
	work := mustConnect(t, tg.db.Transaction.DSN)
	_, err := work.Exec(context.Background(), "CREATE TABLE acked (i int)")
	require.NoError(t, err)
	for i := 1; i <= 5; i++ {
		_, err := work.Exec(context.Background(), "INSERT INTO acked VALUES ($1)", i)
		require.NoError(t, err)
	}

	require.NoError(t, fault.Switchover.Inject(context.Background(), tg))

	requireSteps(t, tg, "fast shutdown")
	require.Equal(t, []int{1, 2, 3, 4, 5}, ints(t, tg.db.Postgres.DSN, "SELECT i FROM acked ORDER BY i"))
}

// The lossy failover: commits acknowledged while the leader was frozen are
// gone, and the leader runs again afterwards.
func TestPrimaryFailoverLossy(t *testing.T) {
	t.Parallel()
	s := stacktest.OwnHA(t, stack.ReplicationAsync)
	tg := newHATarget(t, s, fault.Setting{Replication: stack.ReplicationAsync, Pooled: true, TTL: time.Second, Work: time.Hour})
	leader, _ := startProcess(t)
	tg.leader.PID = leader.Process.Pid
	work := mustConnect(t, tg.db.Transaction.DSN)
	_, err := work.Exec(context.Background(), "CREATE TABLE acked (i int)")
	require.NoError(t, err)
	_, err = work.Exec(context.Background(), "INSERT INTO acked VALUES (1)")
	require.NoError(t, err)
	require.NoError(t, s.CatchUp(context.Background()))

	done := inject(t, fault.PrimaryFailoverLossy, tg)
	tg.waitEvent(t, "SIGSTOP pid")
	st, err := fault.ProcessState(tg.leader.PID)
	require.NoError(t, err)
	require.Contains(t, "Tt", string(st), "the leader is frozen")
	frozen := time.Now()
	// Another replica's write while the leader is frozen: acknowledged
	// by the primary alone.
	_, err = work.Exec(context.Background(), "INSERT INTO acked VALUES (2)")
	require.NoError(t, err)
	// The hold is over and nobody else has been granted the lease: the
	// failover waits for that grant, which is what it is to lose.
	time.Sleep(time.Until(frozen.Add(fault.Hold(tg.Setting()) + time.Second)))
	require.NotContains(t, fmtEvents(tg.Events()), "SIGKILL", "failed over before another replica was granted the lease")
	rec, err := oracle.NewRecorder(context.Background(), s.Oracle().WithDatabase(tg.db.Name).DSN, "r2")
	require.NoError(t, err)
	defer rec.Close()
	require.NoError(t, rec.Grant(context.Background(), 2))
	require.NoError(t, <-done)

	requireSteps(t, tg, "SIGKILL")
	events := fmtEvents(tg.Events())
	require.Regexp(t, regexp.MustCompile(`standby pg2 detached.*SIGSTOP pid.*held .* longer, until another replica was granted.*injected r1 SIGKILL of primary pg1.*SIGCONT pid`), events, "in this order")
	st, err = fault.ProcessState(tg.leader.PID)
	require.NoError(t, err)
	require.NotContains(t, "Tt", string(st), "the leader runs again")
	require.Equal(t, []int{1}, ints(t, tg.db.Postgres.DSN, "SELECT i FROM acked"), "2 was acknowledged after the standby stopped receiving")
}
