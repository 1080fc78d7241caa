package oracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	db := stacktest.NewDB(t)
	conn := stacktest.Connect(t, db.Postgres)
	require.NoError(t, oracle.Migrate(ctx, conn))
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
		require.NoError(t, r2.SideEffect(ctx, tx, 2))
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
	require.Equal(t, oracle.Write{Replica: "r2", Token: 2, At: h.Writes[0].At, Accepted: true}, h.Writes[0])
}

func recorder(t *testing.T, dsn, replica string) *oracle.Recorder {
	t.Helper()
	rec, err := oracle.NewRecorder(context.Background(), dsn, replica)
	require.NoError(t, err)
	t.Cleanup(rec.Close)
	return rec
}
