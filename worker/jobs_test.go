package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/worker/internal/testsignal"
)

func TestJobs(t *testing.T) {
	t.Parallel()

	t.Run("CompletesEveryEnqueuedJob", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			var seen sync.Map
			var wrongTerm atomic.Int64
			h := HandlerFunc(func(ctx context.Context, job *Job) error {
				if term, ok := TermFromContext(ctx); !ok || term != leaderTerm {
					wrongTerm.Add(1)
				}
				var args struct{ N int }
				if err := json.Unmarshal(job.Args, &args); err != nil {
					return err
				}
				seen.Store(job.ID, args.N)
				return nil
			})
			var logs lockedBuffer
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"count": h},
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			ids := b.enqueue(t, 25, "count")
			start(t, b.worker)
			waitCompleted(t, b.worker, 25)
			stop(t, b.worker)
			require.Equal(t, map[string]int{StateCompleted: 25}, b.states(t))
			require.NotContains(t, logs.String(), "outcomes not recorded", "no outcome was lost, and none is reported lost")
			for i, id := range ids {
				n, ok := seen.Load(id)
				require.True(t, ok, "job %d ran", id)
				require.Equal(t, i, n, "job %d got its args", id)
				row := b.job(t, id)
				require.Equal(t, 1, row.Attempt)
				require.Equal(t, leaderTerm.Token, *row.FinalizedToken)
			}
			require.Zero(t, wrongTerm.Load(), "every handler's context carries the lease term")
			require.Equal(t, int64(25), b.worker.Stats().JobsClaimed)
		})
	})

	t.Run("ClaimSkipsJobsLockedByAnotherClaimer", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			ids := b.enqueue(t, 3, "k")

			// Another claimer is mid-statement on the first job: its row is
			// locked. A claim must take the others at once, not wait.
			other := stacktest.Connect(t, db.Postgres)
			tx, err := other.Begin(context.Background())
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.Background()) }()
			_, err = tx.Exec(context.Background(), `SELECT 1 FROM doublerun_jobs WHERE id = $1 FOR UPDATE`, ids[0])
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			jobs, err := b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err, "a claim must skip locked rows, not wait for them")
			require.Equal(t, ids[1:], jobIDs(jobs))
		})
	})

	t.Run("ConcurrentClaimersNeverShareAJob", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			b.enqueue(t, 200, "k")
			var mu sync.Mutex
			claimed := map[int64]int{}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // ends claims that would never run out
			defer cancel()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						jobs, err := b.worker.claim(ctx, leaderTerm, 7)
						if !assertNoError(t, err) || len(jobs) == 0 {
							return
						}
						mu.Lock()
						for _, j := range jobs {
							claimed[j.ID]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			require.Len(t, claimed, 200)
			for id, n := range claimed {
				require.Equal(t, 1, n, "job %d claimed %d times", id, n)
			}
		})
	})

	t.Run("ClaimedJobIsClaimedAgainAfterItsVisibilityTimeout", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}, VisibilityTimeout: time.Hour})
			id := b.enqueue(t, 1, "k")[0]
			ctx := context.Background()

			jobs, err := b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.Equal(t, []int64{id}, jobIDs(jobs))
			require.Equal(t, 1, jobs[0].Attempt)
			row := b.job(t, id)
			require.Equal(t, StateRunning, row.State)
			require.Equal(t, time.Hour, *row.Visibility, "invisible for exactly the visibility timeout")

			jobs, err = b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.Empty(t, jobs, "invisible while its visibility timeout runs")

			// The claimer died: its deadline passes with no outcome.
			_, err = b.conn.Exec(ctx, `UPDATE doublerun_jobs SET run_at = now() - interval '1 ms' WHERE id = $1`, id)
			require.NoError(t, err)
			jobs, err = b.worker.claim(ctx, lease.Term{Name: "test", Holder: "next", Token: 8}, 10)
			require.NoError(t, err)
			require.Equal(t, []int64{id}, jobIDs(jobs), "a dead claimer's job is claimed again")
			require.Equal(t, 2, jobs[0].Attempt)
			require.Equal(t, int64(8), *b.job(t, id).ClaimedToken)
		})
	})

	t.Run("JobTimedOutOnItsLastAttemptIsDiscarded", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			ctx := context.Background()
			ids, err := b.worker.Enqueue(ctx, NewJob{Kind: "k", MaxAttempts: 1})
			require.NoError(t, err)
			jobs, err := b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.Len(t, jobs, 1)
			_, err = b.conn.Exec(ctx, `UPDATE doublerun_jobs SET run_at = now() - interval '1 ms' WHERE id = $1`, ids[0])
			require.NoError(t, err)

			jobs, err = b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.Empty(t, jobs, "no attempt is left to run it again")
			row := b.job(t, ids[0])
			require.Equal(t, StateDiscarded, row.State)
			require.Equal(t, 1, row.Attempt)
			require.Contains(t, *row.LastError, "visibility timeout passed on the last attempt")
			require.Equal(t, int64(1), b.worker.Stats().JobsDiscarded)
		})
	})

	t.Run("StopRecordsTheOutcomesOfTheBatchInFlight", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			running := make(chan struct{})
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": HandlerFunc(func(ctx context.Context, _ *Job) error {
				close(running)
				<-ctx.Done() // Stop cancels; this handler had finished its work anyway
				return nil
			})}})
			id := b.enqueue(t, 1, "k")[0]
			start(t, b.worker)
			select {
			case <-running:
			case <-time.After(testsignal.DefaultTimeout):
				t.Fatal("the job never ran")
			}
			stop(t, b.worker)
			require.Equal(t, StateCompleted, b.job(t, id).State)
		})
	})

	t.Run("LateOutcomeOfAReclaimedJobIsNotRecorded", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			ids := b.enqueue(t, 2, "k")
			id := ids[0]
			ctx := context.Background()
			first, err := b.worker.claim(ctx, leaderTerm, 2)
			require.NoError(t, err)
			require.Len(t, first, 2)
			_, err = b.conn.Exec(ctx, `UPDATE doublerun_jobs SET run_at = now() - interval '1 ms' WHERE id = $1`, id)
			require.NoError(t, err)
			second, err := b.worker.claim(ctx, leaderTerm, 1)
			require.NoError(t, err)
			require.Len(t, second, 1)
			require.Equal(t, id, second[0].ID)

			// Of the first batch, only the job nobody reclaimed is recorded.
			require.NoError(t, b.worker.complete(ctx, leaderTerm, first, []error{nil, nil}))
			require.Equal(t, int64(1), b.worker.Stats().LostClaims)
			require.Equal(t, int64(1), b.worker.Stats().JobsCompleted)
			require.Equal(t, StateCompleted, b.job(t, ids[1]).State)
			row := b.job(t, id)
			require.Equal(t, StateRunning, row.State, "the newer claim owns the job")
			require.Equal(t, 2, row.Attempt)

			require.NoError(t, b.worker.complete(ctx, leaderTerm, second, []error{nil}))
			require.Equal(t, StateCompleted, b.job(t, id).State)
		})
	})

	// The same for a failure: a late one must not put back a job that a
	// newer claim owns.
	t.Run("LateFailureOfAReclaimedJobIsNotRecorded", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			id, first := b.claimOne(t)
			ctx := context.Background()
			_, err := b.conn.Exec(ctx, `UPDATE doublerun_jobs SET run_at = now() - interval '1 ms' WHERE id = $1`, id)
			require.NoError(t, err)
			second, err := b.worker.claim(ctx, leaderTerm, 1)
			require.NoError(t, err)
			require.Len(t, second, 1)

			require.NoError(t, b.worker.complete(ctx, leaderTerm, first, []error{errors.New("too late")}))
			require.Equal(t, int64(1), b.worker.Stats().LostClaims)
			require.Zero(t, b.worker.Stats().JobsRetried)
			row := b.job(t, id)
			require.Equal(t, StateRunning, row.State, "the newer claim owns the job")
			require.Equal(t, 2, row.Attempt)
			require.Nil(t, row.LastError)
		})
	})

	t.Run("FailingJobIsRetriedThenDiscardedAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			var calls atomic.Int64
			var delays []int
			b := jobsSetup(t, db, ep, Config{
				Handlers: map[string]Handler{"fail": HandlerFunc(func(context.Context, *Job) error {
					calls.Add(1)
					return errors.New("upstream said no")
				})},
				MaxAttempts: 3,
				RetryDelay: func(attempt int) time.Duration {
					delays = append(delays, attempt) // one batch at a time
					return 0
				},
			})
			ids, err := b.worker.Enqueue(context.Background(), NewJob{Kind: "fail"})
			require.NoError(t, err)
			start(t, b.worker)
			for i := 0; ; i++ {
				require.Less(t, i, 10, "still not discarded after %d completions", i)
				rep := b.worker.signals.completed.Wait()
				require.NoError(t, rep.Err)
				if rep.Discarded != 0 {
					require.Equal(t, 1, rep.Discarded, "the completion that discarded the job says so")
					break
				}
			}
			stop(t, b.worker)
			require.Equal(t, int64(3), calls.Load())
			require.Equal(t, []int{1, 2}, delays, "a retry delay after each failed attempt but the last")
			row := b.job(t, ids[0])
			require.Equal(t, StateDiscarded, row.State)
			require.Equal(t, 3, row.Attempt)
			require.Equal(t, "upstream said no", *row.LastError)
			st := b.worker.Stats()
			require.Equal(t, int64(2), st.JobsRetried)
			require.Equal(t, int64(1), st.JobsDiscarded)
			require.Equal(t, int64(3), st.HandlerErrors)
		})
	})

	t.Run("RetryWaitsItsDelay", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			id, jobs := b.claimOne(t)
			ctx := context.Background()
			require.NoError(t, b.worker.complete(ctx, leaderTerm, jobs, []error{errors.New("later")}))
			// Due again no sooner than the delay after the claim (and the
			// failure came later still).
			var wait time.Duration
			require.NoError(t, b.conn.QueryRow(ctx, `SELECT run_at - claimed_at FROM doublerun_jobs WHERE id = $1`, id).Scan(&wait))
			require.GreaterOrEqual(t, wait, DefaultRetryDelay(1))
			require.Less(t, wait, time.Minute)
			require.Equal(t, StateAvailable, b.job(t, id).State)
		})
	})

	t.Run("PanickingHandlerFailsOnlyItsAttempt", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{
				"panic": HandlerFunc(func(context.Context, *Job) error { panic("nil pointer") }),
				"ok":    noop,
			}})
			bad := b.enqueue(t, 1, "panic")[0]
			good := b.enqueue(t, 1, "ok")[0]
			ctx := context.Background()
			jobs, err := b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.NoError(t, b.worker.complete(ctx, leaderTerm, jobs, b.worker.run(ctx, jobs)))
			require.Equal(t, StateCompleted, b.job(t, good).State)
			row := b.job(t, bad)
			require.Equal(t, StateAvailable, row.State)
			require.Contains(t, *row.LastError, "handler for panic panicked: nil pointer")
		})
	})

	t.Run("UnknownKindsAreLeftAlone", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"mine": noop}})
			theirs := b.enqueue(t, 1, "theirs")[0]
			jobs, err := b.worker.claim(context.Background(), leaderTerm, 10)
			require.NoError(t, err)
			require.Empty(t, jobs)
			require.Equal(t, StateAvailable, b.job(t, theirs).State)
		})
	})

	t.Run("FutureJobWaitsForItsRunAt", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			ctx := context.Background()
			_, err := b.worker.Enqueue(ctx, NewJob{Kind: "k", RunAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			jobs, err := b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.Empty(t, jobs)
		})
	})

	t.Run("StaleCompletionIsRejectedAndCounted", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": noop}})
			ids := b.enqueue(t, 2, "k")
			ctx := context.Background()
			jobs, err := b.worker.claim(ctx, leaderTerm, 10)
			require.NoError(t, err)
			require.Len(t, jobs, 2)

			b.lease.newest.Store(leaderTerm.Token + 1) // another replica was granted the lease
			err = b.worker.complete(ctx, leaderTerm, jobs, []error{nil, nil})
			require.ErrorIs(t, err, lease.ErrStaleToken)
			require.Equal(t, int64(2), b.worker.Stats().StaleRejected)
			require.Zero(t, b.worker.Stats().JobsCompleted)
			for _, id := range ids {
				row := b.job(t, id)
				require.Equal(t, StateRunning, row.State, "a stale completion must not land")
				require.Nil(t, row.FinalizedToken)
			}

			// The newest term's completion lands.
			newer := leaderTerm
			newer.Token++
			require.NoError(t, b.worker.complete(ctx, newer, jobs, []error{nil, nil}))
			require.Equal(t, map[string]int{StateCompleted: 2}, b.states(t))
		})
	})

	t.Run("LeaderDeposedMidBatchHasItsOutcomesRejected", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			var b *jobsBundle
			b = jobsSetup(t, db, ep, Config{
				Handlers: map[string]Handler{"k": HandlerFunc(func(context.Context, *Job) error {
					// While the handler runs, another replica takes over.
					b.lease.newest.Store(leaderTerm.Token + 1)
					b.lease.set(lease.Follower)
					return nil
				})},
				BackoffInitial: time.Hour,
				BackoffMax:     time.Hour,
			})
			id := b.enqueue(t, 1, "k")[0]
			start(t, b.worker)
			rep := b.worker.signals.cycled.Wait()
			require.True(t, rep.Polled)
			require.ErrorIs(t, rep.Err, lease.ErrStaleToken)
			require.False(t, rep.Stamped, "a rejected poll stamps no heartbeat")
			require.Equal(t, time.Hour, rep.Wait, "and backs off")
			require.True(t, b.worker.signals.completed.Wait().Stale)
			require.Equal(t, int64(1), b.worker.Stats().StaleRejected)
			require.Equal(t, StateRunning, b.job(t, id).State)
			require.Nil(t, b.worker.Health().LastHeartbeat)
		})
	})

	t.Run("FailedPollBacksOffWithoutStamp", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			b := jobsSetup(t, db, ep, Config{
				Handlers:       map[string]Handler{"k": noop},
				Table:          "missing_jobs", // never migrated: every claim fails
				BackoffInitial: time.Hour,
				BackoffMax:     time.Hour,
			})
			start(t, b.worker)
			rep := b.worker.signals.cycled.Wait()
			require.Equal(t, lease.Leader, rep.Status)
			require.True(t, rep.Polled)
			require.ErrorContains(t, rep.Err, `relation "missing_jobs" does not exist`)
			require.False(t, rep.Stamped)
			require.Equal(t, time.Hour, rep.Wait)
			require.Nil(t, b.worker.Health().LastHeartbeat)
			require.Equal(t, int64(1), b.worker.Stats().PollErrors)
		})
	})

	t.Run("LeaseDeadlineEndsTheLeaderWork", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			// The answer is trusted for 2 s and the visibility timeout is
			// 6 s, so which of them ended the handler shows. The claim
			// must come back within the trust: through the test's
			// one-connection transaction pool, in make test, claims took
			// longer than 300 ms for 15 s on end. One that misses has its
			// job claimed again after the visibility timeout, well inside
			// the 15 s the test waits, where the default 5 min failed it.
			dl := &deadlineLease{fencingLease: newFencingLease(), trust: 2 * time.Second}
			var handlerErr, handlerEnds atomic.Value
			b := jobsSetup(t, db, ep, Config{
				Lease:             dl,
				VisibilityTimeout: 6 * time.Second,
				Handlers: map[string]Handler{"slow": HandlerFunc(func(ctx context.Context, _ *Job) error {
					// Read after the claim: no earlier than the
					// claiming cycle's deadline, at most 2 s away.
					leaseDeadline := dl.Deadline()
					ends, _ := ctx.Deadline()
					<-ctx.Done() // the handler honours its context
					handlerErr.Store(ctx.Err())
					handlerEnds.Store(ends.Sub(leaseDeadline))
					return ctx.Err()
				})},
			})
			b.enqueue(t, 1, "slow")
			start(t, b.worker)
			rep := b.worker.signals.completed.Wait()
			require.NoError(t, rep.Err, "the outcome is recorded after the deadline")
			require.Equal(t, context.DeadlineExceeded, handlerErr.Load())
			require.LessOrEqual(t, handlerEnds.Load().(time.Duration), time.Duration(0),
				"the handler's context ends at the lease's deadline, not at the visibility timeout")
			require.Equal(t, int64(1), b.worker.Stats().JobsRetried)
		})
	})
}
