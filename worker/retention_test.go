package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
)

func TestRetention(t *testing.T) {
	t.Parallel()

	// finish sets a job's state and when it finished (or was claimed).
	finish := func(t *testing.T, b *jobsBundle, id int64, state string, ago time.Duration) {
		t.Helper()
		_, err := b.conn.Exec(context.Background(), `
			UPDATE doublerun_jobs SET state = $2,
				finalized_at = CASE WHEN $2 IN ('completed', 'discarded') THEN now() - $3::interval END,
				claimed_at = now() - $3::interval, run_at = now() + interval '1 hour'
			WHERE id = $1`, id, state, ago)
		require.NoError(t, err)
	}
	remaining := func(t *testing.T, b *jobsBundle) []int64 {
		t.Helper()
		rows, err := b.conn.Query(context.Background(), `SELECT id FROM doublerun_jobs ORDER BY id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return ids
	}

	// setup enqueues n jobs for a worker that keeps finished jobs an hour,
	// the first of them completed two hours ago.
	setup := func(t *testing.T, n int) (*jobsBundle, []int64) {
		db := newSchema(t)
		b := jobsSetup(t, db, db.Postgres, Config{Handlers: map[string]Handler{"k": noop}, Retention: time.Hour})
		ids := b.enqueue(t, n, "k")
		finish(t, b, ids[0], StateCompleted, 2*time.Hour)
		return b, ids
	}

	t.Run("DeletesOnlyJobsFinishedBeforeTheWindow", func(t *testing.T) {
		t.Parallel()
		b, ids := setup(t, 5)
		finish(t, b, ids[1], StateDiscarded, 2*time.Hour)
		finish(t, b, ids[2], StateCompleted, 59*time.Minute)
		finish(t, b, ids[3], StateRunning, 2*time.Hour) // claimed long ago, never finished
		// ids[4] is available: enqueued now, and it would not matter.

		require.NoError(t, retentionSweep{b.worker}.Sweep(context.Background(), leaderTerm))
		require.Equal(t, ids[2:], remaining(t, b))
		require.Equal(t, int64(2), b.worker.Stats().JobsDeleted)
	})

	// A run deletes in statements of retentionBatch until its budget has
	// passed, and then leaves the rest to the next cycle rather than
	// holding this one up.
	t.Run("StopsAtItsBudgetAndGoesOnNextCycle", func(t *testing.T) {
		t.Parallel()
		b, _ := setup(t, 1)
		_, err := b.conn.Exec(context.Background(), `INSERT INTO doublerun_jobs (kind, state, finalized_at)
			SELECT 'k', 'completed', now() - interval '2 hours' FROM generate_series(1, $1::integer)`, retentionBatch)
		require.NoError(t, err)
		begin := time.Now()
		sweep := retentionSweep{b.worker}
		// The run starts at begin; its first statement ends exactly the
		// budget later.
		b.worker.now = sequence(begin, begin.Add(retentionBudget))
		require.NoError(t, sweep.Sweep(context.Background(), leaderTerm))
		require.Equal(t, int64(retentionBatch), b.worker.Stats().JobsDeleted, "one full statement, then out of time")
		require.True(t, b.worker.keep.due(begin), "more to delete: due again at once")

		b.worker.now = func() time.Time { return begin }
		require.NoError(t, sweep.Sweep(context.Background(), leaderTerm))
		require.Equal(t, int64(retentionBatch+1), b.worker.Stats().JobsDeleted, "the rest, in a short statement")
		require.False(t, b.worker.keep.due(begin), "nothing left: due after the interval")
	})

	t.Run("LeaderDeletesOldFinishedJobsOncePerInterval", func(t *testing.T) {
		t.Parallel()
		b, ids := setup(t, 2)
		start(t, b.worker)
		require.Equal(t, "doublerun-retention", b.worker.signals.swept.Wait())
		waitCompleted(t, b.worker, 1)
		require.Equal(t, ids[1:], remaining(t, b), "the old job is gone; the one completed now stays")
		for range 3 {
			b.worker.signals.cycled.Wait()
		}
		b.worker.signals.swept.RequireEmpty()
	})
}

// A negative Retention keeps finished jobs forever: the worker has no
// retention sweep at all. New opens no connection, so no server is needed.
func TestRetentionNegativeKeepsEverything(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).
	config := Config{Lease: newStubLease(lease.Leader), DSN: "postgres://localhost/unused", Handlers: map[string]Handler{"k": noop}}
	require.NotNil(t, newWorker(t, config).keep, "the default keeps finished jobs a day")
	config.Retention = -1
	require.Nil(t, newWorker(t, config).keep)
}

// sequence returns a clock that answers times in turn and then the last
// of them for ever.
func sequence(times ...time.Time) func() time.Time {
	i := 0
	return func() time.Time {
		t := times[min(i, len(times)-1)]
		i++
		return t
	}
}
