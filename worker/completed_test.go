package worker

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestCompleted(t *testing.T) {
	t.Parallel()

	// Config.Completed hears of a completion only once it committed, and
	// only of the jobs it completed: not a late outcome of a job another
	// claim took, not a stale one the fence refused, not a failure.
	t.Run("NamesTheJobsWhoseCompletionLanded", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			var mu sync.Mutex
			var told [][]int64
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop},
				Completed: func(_ context.Context, ids []int64) {
					mu.Lock()
					defer mu.Unlock()
					told = append(told, ids)
				}})
			heard := func() [][]int64 {
				mu.Lock()
				defer mu.Unlock()
				return append([][]int64(nil), told...)
			}
			ids := b.enqueue(t, 3, "k")
			ctx := context.Background()
			jobs, err := b.worker.claim(ctx, leaderTerm, 3)
			require.NoError(t, err)
			require.Len(t, jobs, 3)

			b.lease.newest.Store(leaderTerm.Token + 1)
			require.ErrorIs(t, b.worker.complete(ctx, leaderTerm, jobs, []error{nil, nil, nil}), lease.ErrStaleToken)
			require.Empty(t, heard(), "a completion the fence refused is not told")

			newer := leaderTerm
			newer.Token++
			_, err = b.conn.Exec(ctx, `UPDATE doublerun_jobs SET run_at = now() - interval '1 ms' WHERE id = $1`, ids[0])
			require.NoError(t, err)
			again, err := b.worker.claim(ctx, newer, 1)
			require.NoError(t, err)
			require.Len(t, again, 1)
			require.NoError(t, b.worker.complete(ctx, newer, jobs, []error{nil, nil, errors.New("failed")}))
			require.Equal(t, [][]int64{{ids[1]}}, heard(), "only the job whose completion landed: not the reclaimed one, not the failed one")

			// A batch in which nothing completed tells nothing, not an
			// empty list.
			require.NoError(t, b.worker.complete(ctx, newer, again, []error{errors.New("failed again")}))
			require.Equal(t, [][]int64{{ids[1]}}, heard(), "a batch with no completion is not told")
		})
	})
}
