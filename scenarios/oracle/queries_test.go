package oracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// The queries the runner and the faults ask of the oracle, on a real
// database: who led last, whether a piece just began, whether anyone led,
// and the side-effect write that Load reads back.
func TestQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := oracleDB(t)
	start := time.Now().Add(-time.Minute)

	_, _, err := oracle.LatestWork(ctx, conn)
	require.ErrorIs(t, err, oracle.ErrNoWork)
	led, err := oracle.AnyWork(ctx, conn)
	require.NoError(t, err)
	require.False(t, led)

	r1 := recorder(t, db.Postgres.DSN, "r1")
	r2 := recorder(t, db.Postgres.DSN, "r2")
	first, err := r1.Begin(ctx, 1, 101)
	require.NoError(t, err)
	require.NoError(t, r1.End(ctx, first))
	_, err = r2.Begin(ctx, 2, 202)
	require.NoError(t, err)

	led, err = oracle.AnyWork(ctx, conn)
	require.NoError(t, err)
	require.True(t, led)
	open, err := oracle.OpenWork(ctx, conn, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, []string{"r2"}, open, "r1's piece ended, r2's is still open")
	open, err = oracle.OpenWork(ctx, conn, start)
	require.NoError(t, err)
	require.Empty(t, open, "no piece began before start")
	n, err := oracle.PiecesSince(ctx, conn, start)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = oracle.PiecesSince(ctx, conn, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, n)
	replica, pid, err := oracle.LatestWork(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, "r2", replica, "the piece begun last")
	require.Equal(t, int32(202), pid)
	for _, tc := range []struct {
		replica string
		within  time.Duration
		want    bool
	}{
		{"r2", time.Minute, true},
		{"r2", 0, false},           // begun, but not within no time at all
		{"r1", time.Minute, false}, // ended
		{"r3", time.Minute, false}, // never worked
	} {
		begun, err := oracle.WorkBegun(ctx, conn, tc.replica, tc.within)
		require.NoError(t, err)
		require.Equal(t, tc.want, begun, "%s within %s", tc.replica, tc.within)
	}

	// The side-effect write goes through the leader's own transaction: it
	// counts only once committed.
	work := stacktest.Connect(t, db.Transaction)
	write := func(commit bool) {
		tx, err := work.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, r2.SideEffect(ctx, tx, 2, true))
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	write(false)
	write(true)
	h, err := oracle.Load(ctx, conn, start, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, h.Writes, 1)
	require.Equal(t, oracle.Write{Replica: "r2", Token: 2, Call: h.Writes[0].Call, At: h.Writes[0].At, Accepted: true, Fenced: true}, h.Writes[0])
}

// oracleDB is a database of the test's own with the oracle's tables, and
// a direct connection to it.
func oracleDB(t *testing.T) (stacktest.DB, *pgx.Conn) {
	t.Helper()
	db := stacktest.NewDB(t)
	conn := stacktest.Connect(t, db.Postgres)
	require.NoError(t, oracle.Migrate(context.Background(), conn))
	return db, conn
}

// fencedLease is lease l of table leases, closed when t ends.
func fencedLease(t *testing.T, cfg lease.FencedConfig) *lease.Fenced {
	t.Helper()
	cfg.Table, cfg.Name = "leases", "l"
	l, err := lease.NewFenced(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func recorder(t *testing.T, dsn, replica string) *oracle.Recorder {
	t.Helper()
	rec, err := oracle.NewRecorder(context.Background(), dsn, replica)
	require.NoError(t, err)
	t.Cleanup(rec.Close)
	return rec
}

// A write's interval is its transaction's start and the instant its row
// was written, on the server's clock; a refused write's is read in its
// own transaction, or, when that transaction broke, is the moment the
// oracle learnt of it.
func TestWriteIntervals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := oracleDB(t)
	rec := recorder(t, db.Postgres.DSN, "r1")
	work := stacktest.Connect(t, db.Transaction)
	clock := func() time.Time {
		var now time.Time
		require.NoError(t, conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now))
		return now
	}

	before := clock()
	tx, err := work.Begin(ctx)
	require.NoError(t, err)
	var began time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT transaction_timestamp()").Scan(&began))
	require.NoError(t, rec.SideEffect(ctx, tx, 4, false))
	require.NoError(t, tx.Commit(ctx))

	tx, err = work.Begin(ctx)
	require.NoError(t, err)
	var refusedBegan time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT transaction_timestamp()").Scan(&refusedBegan))
	require.NoError(t, rec.Rejected(ctx, tx, 3))
	require.NoError(t, tx.Rollback(ctx))

	// A transaction that broke cannot tell its times.
	tx, err = work.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1/0")
	require.Error(t, err)
	brokeAfter := clock()
	require.NoError(t, rec.Rejected(ctx, tx, 2))
	require.NoError(t, tx.Rollback(ctx))
	after := clock()

	h, err := oracle.Load(ctx, conn, before, after)
	require.NoError(t, err)
	require.Len(t, h.Writes, 3)
	w := h.Writes[0]
	require.Equal(t, oracle.Write{Replica: "r1", Token: 4, Call: began, At: w.At, Accepted: true}, w, "an unfenced write, from its transaction's start")
	require.True(t, w.At.After(began) && w.At.Before(refusedBegan), "written inside its transaction: %+v", w)
	w = h.Writes[1]
	require.Equal(t, oracle.Write{Replica: "r1", Token: 3, Call: refusedBegan, At: w.At, Fenced: true}, w, "a refusal, from its transaction's start")
	require.True(t, w.At.After(refusedBegan) && w.At.Before(brokeAfter), "read inside its transaction: %+v", w)
	w = h.Writes[2]
	require.Equal(t, oracle.Write{Replica: "r1", Token: 2, Call: w.Call, At: w.At, Fenced: true}, w)
	require.True(t, w.Call.After(brokeAfter) && !w.At.Before(w.Call) && w.At.Before(after), "logged when the oracle learnt of it: %+v", w)
}

// The server records every grant and renewal of a lease's token table, in
// the statement that made it: lease.Fenced's (whose holder column names
// the replica), and a table without a holder in a schema of its own. A
// statement that changed nothing, or was rolled back, is no operation.
func TestRecordTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := oracleDB(t)
	start := time.Now()

	require.NoError(t, lease.MigrateFenced(ctx, conn, "leases"))
	require.NoError(t, oracle.RecordTokens(ctx, conn, "leases"))
	require.NoError(t, oracle.RecordTokens(ctx, conn, "leases"), "again: it replaces its trigger")
	a := fencedLease(t, lease.FencedConfig{DSN: db.Transaction.DSN, Holder: "a", TTL: time.Minute})
	b := fencedLease(t, lease.FencedConfig{DSN: db.Transaction.DSN, Holder: "b", TTL: time.Minute})
	for _, want := range []lease.Status{lease.Leader, lease.Leader} { // a grant, then a renewal
		res, err := a.TryAcquire(ctx)
		require.NoError(t, err)
		require.Equal(t, want, res.Status)
	}
	res, err := b.TryAcquire(ctx) // no statement changes a row
	require.NoError(t, err)
	require.Equal(t, lease.Follower, res.Status)
	require.NoError(t, a.Release(ctx)) // expires the term: keeps its token
	res, err = b.TryAcquire(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.Leader, res.Status)

	_, err = conn.Exec(ctx, "CREATE SCHEMA other; CREATE TABLE other.tokens (name text PRIMARY KEY, token bigint NOT NULL)")
	require.NoError(t, err)
	require.NoError(t, oracle.RecordTokens(ctx, conn, "other.tokens"))
	grant := "INSERT INTO other.tokens AS t VALUES ('l', 1) ON CONFLICT (name) DO UPDATE SET token = t.token + 1"
	_, err = conn.Exec(ctx, grant)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, grant)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = conn.Exec(ctx, grant)
	require.NoError(t, err)

	h, err := oracle.Load(ctx, conn, start, time.Now())
	require.NoError(t, err)
	var got []oracle.TokenOp
	for _, op := range h.TokenOps {
		require.False(t, op.Return.Before(op.Call), "%+v", op)
		require.True(t, op.Call.After(start.Add(-time.Minute)), "on the server's clock: %+v", op)
		got = append(got, oracle.TokenOp{Kind: op.Kind, Replica: op.Replica, Token: op.Token})
	}
	require.Equal(t, []oracle.TokenOp{
		{Kind: oracle.TokenGrant, Replica: "a", Token: 1},
		{Kind: oracle.TokenRenewal, Replica: "a", Token: 1},
		{Kind: oracle.TokenRenewal, Replica: "a", Token: 1},
		{Kind: oracle.TokenGrant, Replica: "b", Token: 2},
		{Kind: oracle.TokenGrant, Token: 1},
		{Kind: oracle.TokenGrant, Token: 2},
	}, got)
	for k := 1; k < len(h.TokenOps); k++ {
		require.True(t, h.TokenOps[k].Call.After(h.TokenOps[k-1].Return), "one after another: %+v", h.TokenOps)
	}
	require.ErrorContains(t, oracle.RecordTokens(ctx, conn, "no_such_table"), "oracle: record the tokens of no_such_table: ")
}

// The intervals hold the order the server imposed: a fenced write holds
// off the next grant until it commits, so the old leader's write, begun
// before the grant, is written while the grant waits, and the grant
// returns after it. The history is linearizable, with the write first.
func TestAFencedWriteHoldsOffTheGrantInTheHistory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, conn := oracleDB(t)
	require.NoError(t, lease.MigrateFenced(ctx, conn, "leases"))
	require.NoError(t, oracle.RecordTokens(ctx, conn, "leases"))
	start := time.Now()
	a := fencedLease(t, lease.FencedConfig{DSN: db.Postgres.DSN, Holder: "a", TTL: time.Second, ApplicationName: "holdoff-a"})
	b := fencedLease(t, lease.FencedConfig{DSN: db.Postgres.DSN, Holder: "b", TTL: time.Second, ApplicationName: "holdoff-b"})
	old, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.Leader, old.Status)
	// The old term expires unrenewed; its write passes the fence and
	// holds the row.
	require.NoError(t, waitFor(ctx, func() bool {
		var expired bool
		return conn.QueryRow(ctx, "SELECT expires_at < clock_timestamp() FROM leases").Scan(&expired) == nil && expired
	}))
	rec := recorder(t, db.Postgres.DSN, "a")
	work := stacktest.Connect(t, db.Postgres)
	tx, err := work.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Fence(ctx, tx, old.Term))
	granted := make(chan lease.Result, 1)
	go func() {
		res, _ := b.TryAcquire(ctx)
		granted <- res
	}()
	// The grant waits on the write's row lock. Its statement may wait for
	// TTL - Margin, 800 ms; the write commits two statements after the
	// wait is seen, a few milliseconds even under load.
	require.NoError(t, waitFor(ctx, func() bool {
		var waiting bool
		return conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'holdoff-b' AND wait_event_type = 'Lock')").Scan(&waiting) == nil && waiting
	}))
	require.NoError(t, rec.SideEffect(ctx, tx, old.Term.Token, true))
	require.NoError(t, tx.Commit(ctx))
	res := <-granted
	require.Equal(t, lease.Leader, res.Status)
	require.Equal(t, old.Term.Token+1, res.Term.Token)

	h, err := oracle.Load(ctx, conn, start, time.Now())
	require.NoError(t, err)
	require.Len(t, h.Writes, 1)
	require.Len(t, h.TokenOps, 2)
	write, grant := h.Writes[0], h.TokenOps[1]
	require.Equal(t, oracle.TokenGrant, grant.Kind)
	require.True(t, write.Call.Before(grant.Call), "the write began first: %+v %+v", write, grant)
	require.True(t, write.At.After(grant.Call) && write.At.Before(grant.Return), "written while the grant waited: %+v %+v", write, grant)
	l := oracle.Analyze(h, oracle.Options{}).Linearizability
	require.NotNil(t, l)
	require.Equal(t, oracle.LinearizableYes, l.Linearizable)
}

// waitFor polls cond every 5 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// What a replica logs comes back from Load as it happened: a grant once
// per token, events in order, the pieces of work with their ends, and a
// piece never ended ending at its replica's death; the first lock claim
// names the lock.
func TestLoadReadsTheRunBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := oracleDB(t)
	r1, r2 := recorder(t, db.Postgres.DSN, "r1"), recorder(t, db.Postgres.DSN, "r2")
	start, err := oracle.LogEvent(ctx, conn, oracle.EventMeasureStart, "", "")
	require.NoError(t, err)

	_, _, ok, err := oracle.ClaimedLock(ctx, conn)
	require.NoError(t, err)
	require.False(t, ok, "no claim yet")
	require.NoError(t, r1.Grant(ctx, 1))
	require.NoError(t, r1.Grant(ctx, 1), "the first grant of a token is kept")
	require.NoError(t, r1.Event(ctx, oracle.EventLockClaim, oracle.ClaimDetail(77, 271, -3)))
	k1, k2, ok, err := oracle.ClaimedLock(ctx, conn)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []int32{271, -3}, []int32{k1, k2})
	ended, err := r1.Begin(ctx, 1, 77)
	require.NoError(t, err)
	require.NoError(t, r1.End(ctx, ended))
	_, err = r1.Begin(ctx, 1, 77) // never ended: r1 dies
	require.NoError(t, err)
	require.NoError(t, r2.Grant(ctx, 2))
	_, err = r2.Begin(ctx, 2, 0) // never ended: still working at the end
	require.NoError(t, err)
	died, err := oracle.LogEvent(ctx, conn, oracle.EventReplicaKilled, "r1", "SIGKILL")
	require.NoError(t, err)
	end, err := oracle.LogEvent(ctx, conn, oracle.EventMeasureEnd, "", "")
	require.NoError(t, err)

	h, err := oracle.Load(ctx, conn, start, end)
	require.NoError(t, err)
	require.Equal(t, start, h.Start)
	require.Equal(t, end, h.End)
	var kinds []string
	for _, e := range h.Events {
		kinds = append(kinds, e.Replica+" "+e.Kind+" "+e.Detail)
	}
	require.Equal(t, []string{" measure-start ", "r1 lock-claim backend 77 lock 271,-3", "r1 replica-killed SIGKILL", " measure-end "}, kinds)
	require.Len(t, h.Grants, 2)
	require.Equal(t, []oracle.Grant{{Replica: "r1", Token: 1, At: h.Grants[0].At}, {Replica: "r2", Token: 2, At: h.Grants[1].At}}, h.Grants)
	require.Len(t, h.Intervals, 3)
	first, dead, working := h.Intervals[0], h.Intervals[1], h.Intervals[2]
	require.False(t, first.Open)
	require.True(t, first.End.After(first.Start))
	require.Equal(t, oracle.Interval{Replica: "r1", Token: 1, Start: dead.Start, End: died, Open: true, BackendPID: 77}, dead)
	require.Equal(t, oracle.Interval{Replica: "r2", Token: 2, Start: working.Start, End: end, Open: true}, working)

	// A first claim that does not parse names no lock.
	other, oconn := oracleDB(t)
	require.NoError(t, recorder(t, other.Postgres.DSN, "r1").Event(ctx, oracle.EventLockClaim, "backend x"))
	_, _, _, err = oracle.ClaimedLock(ctx, oconn)
	require.ErrorContains(t, err, `oracle: lock claim "backend x"`)
}

// The runner waits for every replica's start before a fault, and the
// lossy failover for another replica's grant after its hold: the two
// queries they ask, on a real database.
func TestStartsAndGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := oracleDB(t)

	n, err := oracle.StartedReplicas(ctx, conn)
	require.NoError(t, err)
	require.Zero(t, n)
	for _, id := range []string{"r1", "r1", "r2"} {
		_, err := oracle.LogEvent(ctx, conn, oracle.EventReplicaStarted, id, "")
		require.NoError(t, err)
	}
	_, err = oracle.LogEvent(ctx, conn, oracle.EventReplicaKilled, "r3", "")
	require.NoError(t, err)
	n, err = oracle.StartedReplicas(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, 2, n, "r1 started twice is one replica; r3 never started")

	var since time.Time
	require.NoError(t, conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&since))
	r1, r2 := recorder(t, db.Postgres.DSN, "r1"), recorder(t, db.Postgres.DSN, "r2")
	require.NoError(t, r1.Grant(ctx, 1))
	granted, err := oracle.GrantedSince(ctx, conn, "r1", since)
	require.NoError(t, err)
	require.False(t, granted, "the frozen leader's own grant is not another's")
	require.NoError(t, r2.Grant(ctx, 2))
	granted, err = oracle.GrantedSince(ctx, conn, "r1", since)
	require.NoError(t, err)
	require.True(t, granted)
	granted, err = oracle.GrantedSince(ctx, conn, "r1", since.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, granted, "a grant before the moment asked about does not count")

	_, err = oracle.GrantedSince(ctx, conn, "r1", time.Time{}.AddDate(-5000, 0, 0))
	require.Error(t, err, "an error of the query is returned")
}
