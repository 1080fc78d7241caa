package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/worker/internal/testsignal"
)

// endpoints runs fn once directly against Postgres and once through the
// stack's transaction-pooling PgBouncer (pool size 1), each with a
// database of its own.
func endpoints(t *testing.T, fn func(t *testing.T, db stacktest.DB, ep stack.Endpoint)) {
	t.Helper()
	t.Run("Direct", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		fn(t, db, db.Postgres)
	})
	t.Run("ThroughTransactionPooling", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		fn(t, db, db.Transaction)
	})
}

type jobsBundle struct {
	db     stacktest.DB
	ep     stack.Endpoint
	conn   *pgx.Conn // direct, for setup and assertions
	lease  *fencingLease
	worker *Worker
}

// jobsSetup migrates the jobs table and builds a worker on ep with config
// (Lease and DSN filled in unless set).
func jobsSetup(t *testing.T, db stacktest.DB, ep stack.Endpoint, config Config) *jobsBundle {
	t.Helper()
	b := &jobsBundle{db: db, ep: ep, conn: stacktest.Connect(t, db.Postgres), lease: newFencingLease()}
	require.NoError(t, Migrate(context.Background(), b.conn, ""))
	if config.Lease == nil {
		config.Lease = b.lease
	}
	if config.DSN == "" && config.Pool == nil {
		config.DSN = ep.DSN
	}
	config.PollInterval = cmpDuration(config.PollInterval, 5*time.Millisecond)
	config.BackoffInitial = cmpDuration(config.BackoffInitial, 5*time.Millisecond)
	config.BackoffMax = cmpDuration(config.BackoffMax, 50*time.Millisecond)
	b.worker = newWorker(t, config)
	return b
}

func cmpDuration(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func (b *jobsBundle) enqueue(t *testing.T, n int, kind string) []int64 {
	t.Helper()
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{Kind: kind, Args: map[string]int{"n": i}}
	}
	ids, err := Enqueue(context.Background(), b.conn, "", jobs...)
	require.NoError(t, err)
	require.Len(t, ids, n)
	return ids
}

type jobRow struct {
	State          string
	Attempt        int
	LastError      *string
	FinalizedToken *int64
	ClaimedToken   *int64
	Visibility     *time.Duration // run_at - claimed_at
}

func (b *jobsBundle) job(t *testing.T, id int64) jobRow {
	t.Helper()
	var r jobRow
	require.NoError(t, b.conn.QueryRow(context.Background(),
		`SELECT state, attempt, last_error, finalized_token, claimed_token, run_at - claimed_at FROM doublerun_jobs WHERE id = $1`, id).
		Scan(&r.State, &r.Attempt, &r.LastError, &r.FinalizedToken, &r.ClaimedToken, &r.Visibility))
	return r
}

func (b *jobsBundle) states(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.conn.Query(context.Background(), `SELECT state, count(*) FROM doublerun_jobs GROUP BY state`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

var noop = HandlerFunc(func(context.Context, *Job) error { return nil })

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
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"count": h}})
			ids := b.enqueue(t, 25, "count")
			start(t, b.worker)
			for b.worker.Stats().JobsCompleted < 25 {
				rep := b.worker.signals.completed.Wait()
				require.NoError(t, rep.Err)
			}
			b.worker.Stop()
			require.Equal(t, map[string]int{StateCompleted: 25}, b.states(t))
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
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						jobs, err := b.worker.claim(context.Background(), leaderTerm, 7)
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
			b.worker.Stop()
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
			for {
				rep := b.worker.signals.completed.Wait()
				require.NoError(t, rep.Err)
				if rep.Discarded != 0 {
					require.Equal(t, 1, rep.Discarded, "the completion that discarded the job says so")
					break
				}
			}
			b.worker.Stop()
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
			id := b.enqueue(t, 1, "k")[0]
			ctx := context.Background()
			jobs, err := b.worker.claim(ctx, leaderTerm, 1)
			require.NoError(t, err)
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
			dl := &deadlineLease{fencingLease: newFencingLease(), trust: 300 * time.Millisecond}
			var handlerErr atomic.Value
			b := jobsSetup(t, db, ep, Config{
				Lease: dl,
				Handlers: map[string]Handler{"slow": HandlerFunc(func(ctx context.Context, _ *Job) error {
					<-ctx.Done() // the handler honours its context
					handlerErr.Store(ctx.Err())
					return ctx.Err()
				})},
			})
			b.enqueue(t, 1, "slow")
			start(t, b.worker)
			rep := b.worker.signals.completed.Wait()
			require.NoError(t, rep.Err, "the outcome is recorded after the deadline")
			require.Equal(t, context.DeadlineExceeded, handlerErr.Load())
			require.Equal(t, int64(1), b.worker.Stats().JobsRetried)
		})
	})
}

// deadlineLease is a fencing stub that also reports a trust deadline, as
// lease.Fenced does: trust after each TryAcquire.
type deadlineLease struct {
	*fencingLease
	trust    time.Duration
	deadline atomic.Value
}

func (l *deadlineLease) TryAcquire(ctx context.Context) (lease.Result, error) {
	l.deadline.Store(time.Now().Add(l.trust))
	return l.fencingLease.TryAcquire(ctx)
}

func (l *deadlineLease) Deadline() time.Time { return l.deadline.Load().(time.Time) }

func TestEnqueue(t *testing.T) {
	t.Parallel()

	t.Run("InsideATransactionOnlyOnCommit", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		conn := stacktest.Connect(t, db.Postgres)
		ctx := context.Background()
		require.NoError(t, Migrate(ctx, conn, "app_jobs"))
		require.NoError(t, Migrate(ctx, conn, "app_jobs"), "Migrate is idempotent")

		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = Enqueue(ctx, tx, "app_jobs", NewJob{Kind: "a"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
		ids, err := Enqueue(ctx, tx, "app_jobs", NewJob{Kind: "b", Args: json.RawMessage(`{"x":1}`), MaxAttempts: 2})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		var kind, args string
		var maxAttempts int
		require.NoError(t, conn.QueryRow(ctx, `SELECT kind, args::text, max_attempts FROM app_jobs`).Scan(&kind, &args, &maxAttempts))
		require.Equal(t, "b", kind)
		require.Equal(t, `{"x": 1}`, args)
		require.Equal(t, 2, maxAttempts)
		require.Len(t, ids, 1)
	})

	t.Run("ReturnsIDsInOrderAndFillsDefaults", func(t *testing.T) {
		t.Parallel()
		conn := migratedConn(t)
		ctx := context.Background()
		jobs := make([]NewJob, 50)
		for i := range jobs {
			jobs[i] = NewJob{Kind: fmt.Sprintf("k%02d", i)}
		}
		ids, err := Enqueue(ctx, conn, "", jobs...)
		require.NoError(t, err)
		for i, id := range ids {
			var kind, args string
			var maxAttempts int
			require.NoError(t, conn.QueryRow(ctx, `SELECT kind, args::text, max_attempts FROM doublerun_jobs WHERE id = $1`, id).Scan(&kind, &args, &maxAttempts))
			require.Equal(t, jobs[i].Kind, kind)
			require.Equal(t, "{}", args)
			require.Equal(t, DefaultMaxAttempts, maxAttempts)
		}
	})

	t.Run("CapsMaxAttemptsAtTheColumnsRange", func(t *testing.T) {
		t.Parallel()
		conn := migratedConn(t)
		ctx := context.Background()
		ids, err := Enqueue(ctx, conn, "", NewJob{Kind: "k", MaxAttempts: math.MaxInt})
		require.NoError(t, err)
		var maxAttempts int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT max_attempts FROM doublerun_jobs WHERE id = $1`, ids[0]).Scan(&maxAttempts))
		require.Equal(t, int64(math.MaxInt32), maxAttempts, "retried as often as an integer column can count")
	})

	t.Run("RejectsBadJobs", func(t *testing.T) {
		t.Parallel()
		_, err := Enqueue(context.Background(), nil, "", NewJob{})
		require.ErrorContains(t, err, "Kind is required")
		_, err = Enqueue(context.Background(), nil, "", NewJob{Kind: "k", MaxAttempts: -1})
		require.ErrorContains(t, err, "MaxAttempts must be at least 1")
		_, err = Enqueue(context.Background(), nil, "a.b.c", NewJob{Kind: "k"})
		require.ErrorContains(t, err, "must be table or schema.table")
		w := newWorker(t, Config{Lease: newStubLease(lease.Follower)})
		_, err = w.Enqueue(context.Background(), NewJob{Kind: "k"})
		require.ErrorContains(t, err, "set Config.DSN or Config.Pool")
	})
}

func jobIDs(jobs []*Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// assertNoError reports err from a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	// The loser of a race a real server shows only when replicas migrate at
	// the very same moment.
	for _, tt := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"LostTheRaceOnTheCatalogIndex", &pgconn.PgError{Code: "23505"}, false},
		{"LostTheRaceOnTheRelation", &pgconn.PgError{Code: "42P07"}, false},
		{"LostTheRaceOnTheRowType", &pgconn.PgError{Code: "42710"}, false},
		{"NotAllowed", &pgconn.PgError{Code: "42501"}, true},
		{"ConnectionLost", io.ErrUnexpectedEOF, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Migrate(context.Background(), failingExec{err: tt.err}, "")
			if tt.wantErr {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
		})
	}

	t.Run("ManyReplicasAtOnce", func(t *testing.T) {
		t.Parallel()
		db := stacktest.NewDB(t)
		stacktest.MustExec(t, db.Postgres.DSN, `CREATE SCHEMA app`)
		conns := make([]*pgx.Conn, 4)
		for i := range conns {
			conns[i] = stacktest.Connect(t, db.Transaction)
		}
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() { assertNoError(t, Migrate(context.Background(), c, "app.jobs")) })
		}
		wg.Wait()
		_, err := Enqueue(context.Background(), conns[0], "app.jobs", NewJob{Kind: "k"})
		require.NoError(t, err)
		var indexes int
		require.NoError(t, conns[0].QueryRow(context.Background(),
			`SELECT count(*) FROM pg_indexes WHERE schemaname = 'app' AND tablename = 'jobs' AND indexname = 'jobs_due'`).Scan(&indexes))
		require.Equal(t, 1, indexes)
	})
}

// migratedConn connects to a fresh database with the default jobs table.
func migratedConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn := stacktest.Connect(t, stacktest.NewDB(t).Postgres)
	require.NoError(t, Migrate(context.Background(), conn, ""))
	return conn
}

// failingExec is a DB whose Exec fails with err; Migrate uses nothing else.
type failingExec struct {
	DB
	err error
}

func (f failingExec) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, f.err
}
