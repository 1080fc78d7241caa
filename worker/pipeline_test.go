package worker

import (
	"context"
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

// waitCompleted waits until w has completed n jobs, failing on the first
// completion that errs or when testsignal.DefaultTimeout passes without a
// job completing. Completions that record only failures (retries) are no
// progress.
func waitCompleted(t *testing.T, w *Worker, n int64) {
	t.Helper()
	done, progress := w.Stats().JobsCompleted, time.NewTimer(testsignal.DefaultTimeout)
	defer progress.Stop()
	for done < n {
		select {
		case rep := <-w.signals.completed.C():
			require.NoError(t, rep.Err)
			if now := w.Stats().JobsCompleted; now > done {
				done = now
				progress.Reset(testsignal.DefaultTimeout)
			}
		case <-progress.C:
			t.Fatalf("%d of %d jobs completed, then none for %s", done, n, testsignal.DefaultTimeout)
		}
	}
}

// sleepCtx waits d or until ctx ends, as a handler that honours its
// context does.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// grant makes the lease answer Leader of term, as a lease does that was
// granted again under a newer term.
func (l *stubLease) grant(term lease.Term) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.res, l.err, l.panics, l.hang = lease.Result{Status: lease.Leader, Term: term}, nil, nil, false
}

func TestPipeline(t *testing.T) {
	t.Parallel()

	t.Run("NoMoreThanMaxHandlersRunAtOnce", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			var running, most atomic.Int64
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				return sleepCtx(ctx, 30*time.Millisecond)
			})
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": h}, BatchSize: 2, MaxHandlers: 3})
			b.enqueue(t, 12, "k")
			start(t, b.worker)
			waitCompleted(t, b.worker, 12)
			require.LessOrEqual(t, most.Load(), int64(3), "MaxHandlers bounds the handlers running at once")
			require.GreaterOrEqual(t, most.Load(), int64(2))
		})
	})

	t.Run("ClaimsOnlyForFreeHandlers", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			release := make(chan struct{})
			started := make(chan struct{}, 3)
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				started <- struct{}{}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": h},
				BatchSize: 1, MaxHandlers: 1, PollInterval: 20 * time.Millisecond})
			b.enqueue(t, 3, "k")
			start(t, b.worker)
			select {
			case <-started:
			case <-time.After(testsignal.DefaultTimeout):
				t.Fatal("no job ran")
			}
			// The leader cycles on, its one handler busy.
			for range 3 {
				b.worker.signals.cycled.WaitUntil(func(r cycleReport) bool { return r.Again })
			}
			require.Equal(t, map[string]int{StateRunning: 1, StateAvailable: 2}, b.states(t),
				"no job is claimed before a handler is free to run it")
			close(release)
			waitCompleted(t, b.worker, 3)
		})
	})

	// Outcomes that arrive together are recorded together: the completer
	// gathers what is waiting into one transaction instead of one
	// transaction per job. Fifty handlers are released at once; every
	// completion reports how many outcomes its transaction held, and at
	// least one must have held more than one (recording one outcome at a
	// time makes every count 1). Counted through the completion signal,
	// which drops nothing here: 50 values in a buffer of 1,024.
	t.Run("OutcomesThatArriveTogetherShareATransaction", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			const jobs = 50
			release := make(chan struct{})
			started := make(chan struct{}, jobs)
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				started <- struct{}{}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": h}, BatchSize: jobs, MaxHandlers: jobs})
			b.enqueue(t, jobs, "k")
			start(t, b.worker)
			for range jobs {
				select {
				case <-started:
				case <-time.After(testsignal.DefaultTimeout):
					t.Fatal("the handlers did not all start")
				}
			}
			close(release)
			recorded, largest, transactions := 0, 0, 0
			for recorded < jobs {
				rep := b.worker.signals.completed.Wait()
				require.NoError(t, rep.Err)
				recorded += rep.Recorded
				largest = max(largest, rep.Jobs)
				transactions++
			}
			require.Equal(t, jobs, recorded)
			require.Greater(t, largest, 1, "%d outcomes released at once were recorded in %d transactions of one", jobs, transactions)
		})
	})

	// A leader whose claims keep coming back full goes on claiming, and
	// when it must ask the lease again it does so at once instead of
	// waiting a poll interval.
	t.Run("FullBatchesAreClaimedWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			// The leader stops claiming and asks again when PollInterval
			// (500 ms) has passed since the lease answered, or half the
			// answer's trust, whichever is sooner: 200 jobs of 25 ms, four
			// at a time, take longer than 500 ms, so it asks again while
			// it works. A batch claimed just before then still has the
			// rest of the trust (6 s) to finish. The re-ask rhythm used to
			// come from the trust (2 s, asking every second), which left a
			// late batch one second; beside two CPU hogs and other tests a
			// claim through the transaction pool took longer than that and
			// four jobs ran into the deadline. The two are apart now: the
			// margin is 5.5 s, while the rhythm stays short.
			dl := &deadlineLease{fencingLease: newFencingLease(), trust: 6 * time.Second}
			h := HandlerFunc(func(ctx context.Context, _ *Job) error { return sleepCtx(ctx, 25*time.Millisecond) })
			b := jobsSetup(t, db, ep, Config{Lease: dl, Handlers: map[string]Handler{"k": h},
				BatchSize: 4, MaxHandlers: 4, PollInterval: 500 * time.Millisecond})
			b.enqueue(t, 200, "k")
			start(t, b.worker)
			rep := b.worker.signals.cycled.WaitUntil(func(r cycleReport) bool { return r.Again })
			require.Zero(t, rep.Wait, "a cycle that ended with a full claim is followed at once")
			require.True(t, rep.Stamped)
			waitCompleted(t, b.worker, 200)
			require.Zero(t, b.worker.Stats().JobsRetried, "no job ran into its cycle's deadline")
		})
	})

	// Jobs in flight when the lease stops answering Leader are leader work
	// nobody covers any more: their handlers are cancelled at once rather
	// than left to run to the old answer's deadline.
	t.Run("LeaseLostCancelsTheJobsInFlight", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			dl := &deadlineLease{fencingLease: newFencingLease(), trust: 3 * time.Second}
			var handlerErr atomic.Value
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				dl.set(lease.Follower) // another replica takes over while the job runs
				<-ctx.Done()
				handlerErr.Store(context.Cause(ctx))
				return ctx.Err()
			})
			b := jobsSetup(t, db, ep, Config{Lease: dl, Handlers: map[string]Handler{"k": h},
				BatchSize: 1, MaxHandlers: 1, PollInterval: 50 * time.Millisecond})
			id := b.enqueue(t, 2, "k")[0] // two, so that the first claim comes back full
			start(t, b.worker)
			rep := b.worker.signals.completed.Wait()
			require.NoError(t, rep.Err, "the cancelled attempt is recorded")
			require.ErrorIs(t, handlerErr.Load().(error), context.Canceled, "cancelled when the lease answered Follower, not at its deadline")
			require.Equal(t, StateAvailable, b.job(t, id).State, "to be retried")
			require.Equal(t, int64(1), b.worker.Stats().JobsRetried)
		})
	})

	// The lease granted again under a newer term: jobs claimed under the
	// newer term are recorded under it, never under the old one, whose
	// outcomes the fence rejects.
	t.Run("NewTermStartsANewPipeline", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			dl := &deadlineLease{fencingLease: newFencingLease(), trust: 3 * time.Second}
			newer := leaderTerm
			newer.Token++
			var first sync.Once
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				regranted := false
				first.Do(func() {
					dl.newest.Store(newer.Token)
					dl.grant(newer)
					regranted = true
				})
				if regranted {
					<-ctx.Done() // runs on until the new term ends it
					return ctx.Err()
				}
				return nil
			})
			b := jobsSetup(t, db, ep, Config{Lease: dl, Handlers: map[string]Handler{"k": h},
				BatchSize: 1, MaxHandlers: 1, PollInterval: 50 * time.Millisecond})
			ids := b.enqueue(t, 2, "k")
			start(t, b.worker)
			rep := b.worker.signals.completed.WaitUntil(func(r completeReport) bool { return r.Term == newer })
			require.NoError(t, rep.Err)
			require.Equal(t, 1, rep.Recorded)
			row := b.job(t, ids[1])
			require.Equal(t, StateCompleted, row.State)
			require.Equal(t, newer.Token, *row.FinalizedToken, "recorded under the term it was claimed in")
			require.Equal(t, StateRunning, b.job(t, ids[0]).State, "the old term's outcome was rejected")
			require.Equal(t, int64(1), b.worker.Stats().StaleRejected)
		})
	})

	// Stop ends jobs left in flight by a cycle whose claim came back full,
	// and records their outcomes before it returns.
	t.Run("StopRecordsTheOutcomesOfJobsInFlight", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			running := make(chan struct{}, 1)
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				running <- struct{}{}
				<-ctx.Done()
				time.Sleep(100 * time.Millisecond) // finishing up after Stop
				return nil
			})
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"k": h},
				BatchSize: 1, MaxHandlers: 1, PollInterval: 20 * time.Millisecond})
			ids := b.enqueue(t, 2, "k")
			start(t, b.worker)
			select {
			case <-running:
			case <-time.After(testsignal.DefaultTimeout):
				t.Fatal("the job never ran")
			}
			b.worker.signals.cycled.WaitUntil(func(r cycleReport) bool { return r.Again })
			stop(t, b.worker)
			require.Equal(t, StateCompleted, b.job(t, ids[0]).State)
			require.Equal(t, StateAvailable, b.job(t, ids[1]).State, "never claimed: no handler was free")
			require.Equal(t, int64(1), b.worker.Stats().JobsCompleted)
		})
	})

	// A job that has finished is recorded within the completer's linger,
	// not when a slower job of its batch finishes: its visibility timeout
	// runs until it is recorded, and a job whose timeout passes is claimed
	// and run again.
	t.Run("AFinishedJobIsRecordedWhileItsSiblingStillRuns", func(t *testing.T) {
		t.Parallel()
		endpoints(t, func(t *testing.T, db stacktest.DB, ep stack.Endpoint) {
			release := make(chan struct{})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			slow := HandlerFunc(func(ctx context.Context, _ *Job) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			fast := HandlerFunc(func(context.Context, *Job) error { return nil })
			b := jobsSetup(t, db, ep, Config{Handlers: map[string]Handler{"slow": slow, "fast": fast},
				BatchSize: 2, MaxHandlers: 2, PollInterval: 20 * time.Millisecond})
			b.enqueue(t, 1, "slow")
			b.enqueue(t, 1, "fast")
			start(t, b.worker)
			require.Eventually(t, func() bool {
				return b.worker.Stats().JobsCompleted == 1
			}, 5*time.Second, 10*time.Millisecond, "the fast job's outcome waits for the slow one")
			require.Equal(t, map[string]int{StateRunning: 1, StateCompleted: 1}, b.states(t))
			close(release)
			waitCompleted(t, b.worker, 2)
		})
	})
}

// A cycle claims until PollInterval has passed or half the lease's answer
// is used up, whichever comes first: the other half is the last batch's
// time to finish before the answer runs out.
func TestClaimUntil(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	require.Equal(t, now.Add(10*time.Second), claimUntil(context.Background(), now, 10*time.Second),
		"no deadline: the poll interval alone")
	require.Equal(t, now.Add(time.Second), claimUntil(at(6*time.Second), now, time.Second),
		"the poll interval when it ends first")
	require.Equal(t, now.Add(2*time.Second), claimUntil(at(4*time.Second), now, 10*time.Second),
		"halfway to the deadline when that comes first")
}
