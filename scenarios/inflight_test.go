package scenarios

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The measurement goes on past its planned end for a piece a fault's heal
// left in flight, on a real oracle: a resumed holder's late write is what
// a freeze is about, and a loaded machine can delay it by seconds.
func TestAwaitInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, rec := oracleRecorder(t)

	// setup opens a piece of r1's, then the heal, and returns a run whose
	// replica r1 is alive or not.
	setup := func(t *testing.T, alive bool, bound time.Duration) (*run, int64, time.Time) {
		t.Helper()
		_, err := pool.Exec(ctx, "TRUNCATE doublerun_oracle_work, doublerun_oracle_events")
		require.NoError(t, err)
		piece, err := rec.Begin(ctx, 1, 0)
		require.NoError(t, err)
		healed, err := oracle.LogEvent(ctx, pool, oracle.EventHealed, "r1", "FREEZE_LEADER")
		require.NoError(t, err)
		rp := &proc{id: "r1", done: make(chan struct{})}
		if !alive {
			close(rp.done)
		}
		return &run{conn: pool, replicas: []*proc{rp}, opts: RunOptions{inFlightWait: bound}}, piece, healed
	}

	t.Run("WaitsForAPieceOpenAtTheHeal", func(t *testing.T) {
		r, piece, healed := setup(t, true, time.Minute)
		done := make(chan error, 1)
		go func() { done <- r.awaitInFlight(ctx, healed) }()
		select {
		case err := <-done:
			t.Fatalf("the wait ended with r1's piece still open (%v)", err)
		case <-time.After(300 * time.Millisecond):
		}
		require.NoError(t, rec.End(ctx, piece))
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the wait did not end with the piece")
		}
	})
	// A wait that ran into its bound says so in an event; these two must
	// end without one.
	noBoundEvent := func(t *testing.T) {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM doublerun_oracle_events WHERE kind = $1", oracle.EventChaos).Scan(&n))
		require.Zero(t, n, "the wait ran into its bound")
	}
	t.Run("ADeadReplicaIsNotWaitedFor", func(t *testing.T) {
		r, piece, healed := setup(t, false, 2*time.Second)
		defer func() { _ = rec.End(ctx, piece) }()
		require.NoError(t, r.awaitInFlight(ctx, healed), "a killed replica never ends its piece")
		noBoundEvent(t)
	})
	t.Run("ThePieceBegunAfterTheHealIsNotWaitedFor", func(t *testing.T) {
		r, piece, healed := setup(t, true, 2*time.Second)
		require.NoError(t, rec.End(ctx, piece))
		_, err := rec.Begin(ctx, 2, 0)
		require.NoError(t, err)
		require.NoError(t, r.awaitInFlight(ctx, healed))
		noBoundEvent(t)
	})
	t.Run("ItsBoundEndsTheWaitWithAnEvent", func(t *testing.T) {
		r, piece, healed := setup(t, true, 200*time.Millisecond)
		defer func() { _ = rec.End(ctx, piece) }()
		require.NoError(t, r.awaitInFlight(ctx, healed))
		var detail string
		require.NoError(t, pool.QueryRow(ctx, "SELECT detail FROM doublerun_oracle_events WHERE kind = $1", oracle.EventChaos).Scan(&detail))
		require.Contains(t, detail, "pieces of r1 open at the heal had not ended 200ms after")
	})
}

// A run without a fault measures on until a piece of work has begun in
// its second half, the half taken afresh as the run grows: a leader that
// stalled under load leaves the run too little work to judge otherwise.
func TestAwaitSecondHalf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, rec := oracleRecorder(t)
	// A piece before the measurement's start, then the start.
	_, err := rec.Begin(ctx, 1, 0)
	require.NoError(t, err)
	start, err := oracle.LogEvent(ctx, pool, oracle.EventMeasureStart, "", "")
	require.NoError(t, err)
	r := &run{conn: pool, sc: Scenario{PollInterval: 20 * time.Millisecond}, opts: RunOptions{pieceWait: time.Minute}}

	t.Run("WaitsForAPieceInTheSecondHalf", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- r.awaitSecondHalf(ctx, start) }()
		select {
		case err := <-done:
			t.Fatalf("the wait ended with no piece in the second half (%v)", err)
		case <-time.After(1500 * time.Millisecond):
		}
		// 1.5 s into the run: its middle, taken a second on, is at 1.25 s.
		_, err := rec.Begin(ctx, 1, 0)
		require.NoError(t, err)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the wait did not end with the piece")
		}
	})
	t.Run("ItsBoundEndsTheWait", func(t *testing.T) {
		late := &run{conn: pool, sc: r.sc, opts: RunOptions{pieceWait: 200 * time.Millisecond}}
		require.NoError(t, late.awaitSecondHalf(ctx, time.Now().Add(time.Hour)), "no piece can begin after a middle an hour away")
	})
}

// The wait for work before and after a fault ends with the work, or with
// the last replica process: a run whose only replica was killed has none
// to wait for.
func TestAwaitPieces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, rec := oracleRecorder(t)
	since, err := oracle.LogEvent(ctx, pool, oracle.EventFault, "r1", "KILL_LEADER")
	require.NoError(t, err)
	rp := &proc{id: "r1", done: make(chan struct{})}
	r := &run{conn: pool, replicas: []*proc{rp}, sc: Scenario{PollInterval: 20 * time.Millisecond}}
	ended := func(t *testing.T, done <-chan error, why string) {
		t.Helper()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal(why)
		}
	}

	t.Run("WaitsWhileAReplicaRuns", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- r.awaitPieces(ctx, since, 1, time.Hour) }()
		select {
		case err := <-done:
			t.Fatalf("the wait ended with no piece and r1 running (%v)", err)
		case <-time.After(500 * time.Millisecond):
		}
		_, err := rec.Begin(ctx, 1, 0)
		require.NoError(t, err)
		ended(t, done, "the wait did not end with the piece")
	})
	t.Run("EndsWithTheLastReplica", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- r.awaitPieces(ctx, since, 2, time.Hour) }()
		select {
		case err := <-done:
			t.Fatalf("the wait ended with one piece of two and r1 running (%v)", err)
		case <-time.After(500 * time.Millisecond):
		}
		close(rp.done)
		ended(t, done, "the wait went on with no replica left to work")
	})
}

// The fault waits for every replica to contend: one that started late on
// a loaded machine left the fault a single contender.
func TestAwaitStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := oracleRun(t)
	r := &run{conn: pool, sc: Scenario{Replicas: 2, PollInterval: 20 * time.Millisecond}}
	_, err := oracle.LogEvent(ctx, pool, oracle.EventReplicaStarted, "r1", "")
	require.NoError(t, err)
	_, err = oracle.LogEvent(ctx, pool, oracle.EventReplicaStarted, "r1", "a second start of the same replica")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- r.awaitStarted(ctx, time.Minute) }()
	select {
	case err := <-done:
		t.Fatalf("the wait ended with one of two replicas started (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	_, err = oracle.LogEvent(ctx, pool, oracle.EventReplicaStarted, "r2", "")
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end when the second replica started")
	}

	alone := &run{conn: pool, sc: Scenario{Replicas: 3, PollInterval: 20 * time.Millisecond}}
	require.NoError(t, alone.awaitStarted(ctx, 200*time.Millisecond), "its bound ends the wait for a replica that never starts")
}

// oracleRun is a database of its own with the oracle's tables, and a pool
// on it as a run's conn.
func oracleRun(t *testing.T) (stacktest.DB, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	db := stacktest.NewDB(t)
	require.NoError(t, oracle.Migrate(ctx, stacktest.Connect(t, db.Postgres)))
	pool, err := pgxpool.New(ctx, db.Postgres.DSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return db, pool
}

// oracleRecorder is oracleRun's pool with replica r1's recorder on the
// same database.
func oracleRecorder(t *testing.T) (*pgxpool.Pool, *oracle.Recorder) {
	t.Helper()
	db, pool := oracleRun(t)
	rec, err := oracle.NewRecorder(context.Background(), db.Postgres.DSN, "r1")
	require.NoError(t, err)
	t.Cleanup(rec.Close)
	return pool, rec
}
