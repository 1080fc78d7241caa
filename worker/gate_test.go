package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
)

// The gate tests run in a synctest bubble with the original's defaults
// (30 s poll, 5 s back-off capped at 5 min): time is fake, so they take
// microseconds and wait on the worker's signals, never on a clock.

type gateBundle struct {
	lease  *stubLease
	worker *Worker
	polls  *atomic.Int64 // leader work seen by a sweep
}

func gateSetup(t *testing.T, status lease.Status) *gateBundle {
	t.Helper()
	b := &gateBundle{lease: newStubLease(status), polls: &atomic.Int64{}}
	b.worker = newWorker(t, Config{
		Lease: b.lease,
		Sweeps: []Sweep{SweepFunc("count", func(context.Context, lease.Term) error {
			b.polls.Add(1)
			return nil
		})},
	})
	return b
}

// next waits for the worker's next cycle. In a bubble, fake time advances
// to the loop's timer while the test blocks here.
func (b *gateBundle) next() cycleReport {
	return nextCycle(b.worker)
}

// nextCycle waits for w's next cycle inside a synctest bubble. The wait is
// bounded in fake time, which costs no real time: an hour, longer than any
// wait of the loop (the back-off's cap is 5 minutes), so a loop that stops
// cycling fails the test at once rather than hanging it.
func nextCycle(w *Worker) cycleReport {
	return w.signals.cycled.WaitFor(time.Hour)
}

func TestGate(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	t.Run("FollowerStampsWithoutPolling", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Follower)
			start(t, b.worker)
			for range 3 {
				rep := b.next()
				require.Equal(t, lease.Follower, rep.Status)
				require.True(t, rep.Stamped)
				require.Equal(t, DefaultPollInterval, rep.Wait)
			}
			b.worker.Stop()
			require.Zero(t, b.polls.Load(), "a follower must do no leader work")
			st := b.worker.Stats()
			require.Zero(t, st.Polls)
			require.Equal(t, int64(3), st.Heartbeats)
			require.NotNil(t, b.worker.Health().LastHeartbeat)
		})
	})

	t.Run("LeaderPolls", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Leader)
			start(t, b.worker)
			rep := b.next()
			require.True(t, rep.Polled)
			require.True(t, rep.Stamped)
			require.NoError(t, rep.Err)
			require.GreaterOrEqual(t, b.polls.Load(), int64(1))
			require.Equal(t, "leader", b.worker.Health().Role)
		})
	})

	t.Run("FaultedNeitherPollsNorStamps", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Faulted)
			start(t, b.worker)
			for range 3 {
				rep := b.next()
				require.Equal(t, lease.Faulted, rep.Status)
				require.False(t, rep.Polled)
				require.False(t, rep.Stamped)
			}
			b.worker.Stop()
			require.Zero(t, b.polls.Load())
			st := b.worker.Stats()
			require.Zero(t, st.Heartbeats)
			require.Equal(t, int64(3), st.Faults)
			require.Nil(t, b.worker.Health().LastHeartbeat)
		})
	})

	// A lease must report faults as Faulted, not as errors; one that errs
	// anyway is not believed, even when its result says Leader.
	t.Run("ErringLeaseCountsAsFaulted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Leader)
			b.lease.fail(lease.Result{Status: lease.Leader, Term: leaderTerm}, errors.New("driver: bad connection"))
			start(t, b.worker)
			rep := b.next()
			require.Equal(t, lease.Faulted, rep.Status)
			require.ErrorContains(t, rep.Err, "bad connection")
			require.False(t, rep.Polled)
			require.False(t, rep.Stamped)

			b.lease.set(lease.Leader) // the host survived and goes on
			rep = b.next()
			require.True(t, rep.Polled)
			require.Equal(t, int64(1), b.worker.Stats().LeaseErrors)
		})
	})

	// A lease may report Faulted without saying why; the cycle still
	// carries an error, so logs and health never show a fault as nil.
	t.Run("SilentFaultGetsAnError", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Leader)
			b.lease.fail(lease.Result{Status: lease.Faulted}, nil)
			start(t, b.worker)
			rep := b.next()
			require.Equal(t, lease.Faulted, rep.Status)
			require.EqualError(t, rep.Err, "lease reported faulted")

			b.lease.fail(lease.Result{Status: lease.Faulted, Err: errors.New("stub: lease unreachable")}, nil)
			rep = b.next()
			require.EqualError(t, rep.Err, "stub: lease unreachable", "the lease's own reason is kept")
		})
	})

	t.Run("PanickingLeaseCountsAsFaulted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Leader)
			b.lease.panic("boom")
			start(t, b.worker)
			for range 2 {
				rep := b.next()
				require.Equal(t, lease.Faulted, rep.Status)
				require.ErrorContains(t, rep.Err, "lease panicked: boom")
				require.False(t, rep.Stamped)
			}
			b.lease.set(lease.Leader)
			rep := b.next()
			require.True(t, rep.Polled)
			require.True(t, rep.Stamped)
			st := b.worker.Stats()
			require.Equal(t, int64(2), st.LeaseErrors)
			require.Equal(t, int64(2), st.Faults)
		})
	})

	t.Run("HangingLeaseTimesOutAsFaulted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Leader)
			b.lease.hangUntilCancelled()
			start(t, b.worker)
			begin := time.Now()
			rep := b.next()
			require.Equal(t, lease.Faulted, rep.Status)
			require.ErrorIs(t, rep.Err, context.DeadlineExceeded)
			require.Equal(t, DefaultLeaseTimeout, time.Since(begin))
		})
	})

	t.Run("UnknownStatusCountsAsFaulted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Leader)
			b.lease.fail(lease.Result{}, nil) // the zero Status
			start(t, b.worker)
			rep := b.next()
			require.Equal(t, lease.Faulted, rep.Status)
			require.ErrorContains(t, rep.Err, "unknown status")
			require.False(t, rep.Stamped)
			require.Zero(t, b.polls.Load())
		})
	})
}

func TestBackoff(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	t.Run("GrowsAndStopsAtItsCap", func(t *testing.T) {
		t.Parallel()
		for failures, want := range map[int]time.Duration{
			1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 40 * time.Second,
			5: 80 * time.Second, 6: 160 * time.Second, 7: 5 * time.Minute, 8: 5 * time.Minute,
			100: 5 * time.Minute, 1 << 30: 5 * time.Minute,
		} {
			got := returnsSoon(t, func() time.Duration {
				return backoff(DefaultBackoffInitial, DefaultBackoffMultiplier, DefaultBackoffMax, failures)
			})
			require.Equal(t, want, got, "after %d failures", failures)
		}
	})

	t.Run("TakesItsSettings", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 90*time.Millisecond, returnsSoon(t, func() time.Duration { return backoff(10*time.Millisecond, 3, time.Second, 3) }))
		require.Equal(t, time.Second, returnsSoon(t, func() time.Duration { return backoff(10*time.Millisecond, 3, time.Second, 6) }))
		require.Equal(t, 7*time.Millisecond, returnsSoon(t, func() time.Duration { return backoff(7*time.Millisecond, 1, time.Second, 50) }),
			"multiplier 1 is a constant wait")
	})

	t.Run("LoopWaitsTheBackoffAfterEachFault", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Faulted)
			start(t, b.worker)
			want := []time.Duration{5, 10, 20, 40, 80, 160, 300, 300}
			prev := time.Now()
			for i, secs := range want {
				rep := b.next()
				require.Equal(t, i+1, rep.Failures)
				require.Equal(t, secs*time.Second, rep.Wait, "wait after fault %d", i+1)
				if i > 0 {
					require.Equal(t, want[i-1]*time.Second, time.Since(prev), "time between faults %d and %d", i, i+1)
				}
				prev = time.Now()
			}

			// Success resets the back-off to the poll interval ...
			b.lease.set(lease.Follower)
			rep := b.next()
			require.Equal(t, DefaultPollInterval, rep.Wait)
			require.Zero(t, rep.Failures)

			// ... and the next fault starts again from the beginning.
			b.lease.set(lease.Faulted)
			rep = b.next()
			require.Equal(t, DefaultBackoffInitial, rep.Wait)
		})
	})
}

func TestHealth(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	get := func(t *testing.T, w *Worker) (int, Health) {
		t.Helper()
		rec := httptest.NewRecorder()
		w.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var h Health
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &h))
		return rec.Code, h
	}

	t.Run("NeverStartedIsDegraded", func(t *testing.T) {
		t.Parallel()
		w := newWorker(t, Config{Lease: newStubLease(lease.Follower)})
		code, h := get(t, w)
		require.Equal(t, http.StatusOK, code, "degraded answers 200 by default, as the original")
		require.Equal(t, Health{Status: StatusDegraded, Role: "unknown", Reason: "worker never started"}, h)
	})

	t.Run("DegradedAnswersTheConfiguredCode", func(t *testing.T) {
		t.Parallel()
		w := newWorker(t, Config{Lease: newStubLease(lease.Follower), DegradedStatusCode: http.StatusServiceUnavailable})
		code, h := get(t, w)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, StatusDegraded, h.Status)
	})

	t.Run("DegradesAfterThreeIntervalsAndRecovers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Follower)
			b.worker.config.DegradedStatusCode = http.StatusServiceUnavailable
			start(t, b.worker)
			require.True(t, b.next().Stamped)
			code, h := get(t, b.worker)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, StatusHealthy, h.Status)
			require.Equal(t, "follower", h.Role)
			require.Empty(t, h.Reason)
			last := *h.LastHeartbeat

			// The lease faults: no more stamps. Exactly 3 intervals after
			// the last stamp the worker is still healthy; a moment later it
			// is not.
			b.lease.set(lease.Faulted)
			time.Sleep(3*DefaultPollInterval - time.Since(last))
			_, h = get(t, b.worker)
			require.Equal(t, StatusHealthy, h.Status, "at exactly 3 × the interval")
			time.Sleep(time.Millisecond)
			code, h = get(t, b.worker)
			require.Equal(t, http.StatusServiceUnavailable, code)
			require.Equal(t, StatusDegraded, h.Status)
			require.Equal(t, "faulted", h.Role)
			require.Contains(t, h.Reason, "no heartbeat for 1m30.001s")
			require.True(t, last.Equal(*h.LastHeartbeat))

			// The lease comes back: the next stamp makes it healthy again.
			b.lease.set(lease.Follower)
			for i := 0; !b.next().Stamped; i++ { // after the back-off the faults have built up
				require.Less(t, i, 100, "no stamp after the lease came back")
			}
			code, h = get(t, b.worker)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, StatusHealthy, h.Status)
		})
	})

	t.Run("StartCountsAsAStampUntilTheFirstHeartbeat", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Faulted)
			start(t, b.worker)
			require.Equal(t, StatusHealthy, b.worker.Health().Status, "just started")
			time.Sleep(3*DefaultPollInterval + time.Millisecond)
			h := b.worker.Health()
			require.Equal(t, StatusDegraded, h.Status)
			require.Nil(t, h.LastHeartbeat)
		})
	})

	t.Run("StoppedIsDegraded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := gateSetup(t, lease.Follower)
			start(t, b.worker)
			b.next()
			b.worker.Stop()
			h := b.worker.Health()
			require.Equal(t, StatusDegraded, h.Status)
			require.Equal(t, "worker stopped", h.Reason)
		})
	})
}

func TestSweeps(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	type bundle struct {
		lease  *stubLease
		worker *Worker
		ran    []string
	}
	setup := func(t *testing.T, sweeps ...func(ctx context.Context, term lease.Term) error) *bundle {
		b := &bundle{lease: newStubLease(lease.Leader)}
		config := Config{Lease: b.lease}
		for i, fn := range sweeps {
			name := string(rune('a' + i))
			config.Sweeps = append(config.Sweeps, SweepFunc(name, func(ctx context.Context, term lease.Term) error {
				b.ran = append(b.ran, name) // the loop runs sweeps one at a time
				return fn(ctx, term)
			}))
		}
		b.worker = newWorker(t, config)
		return b
	}
	ok := func(context.Context, lease.Term) error { return nil }

	t.Run("RunInOrderWithTheTerm", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			check := func(ctx context.Context, term lease.Term) error {
				require.Equal(t, leaderTerm, term)
				fromCtx, found := TermFromContext(ctx)
				require.True(t, found)
				require.Equal(t, leaderTerm, fromCtx)
				return nil
			}
			b := setup(t, check, check, check)
			start(t, b.worker)
			nextCycle(b.worker)
			nextCycle(b.worker)
			b.worker.Stop()
			require.Equal(t, []string{"a", "b", "c", "a", "b", "c"}, b.ran)
		})
	})

	t.Run("FailingSweepDoesNotStopTheNext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, func(context.Context, lease.Term) error { return errors.New("disk full") }, ok, ok)
			start(t, b.worker)
			rep := nextCycle(b.worker)
			b.worker.Stop()
			require.Equal(t, []string{"a", "b", "c"}, b.ran)
			require.True(t, rep.Stamped, "a sweep's failure does not fail the poll")
			require.Equal(t, int64(1), b.worker.Stats().SweepErrors, "only the failed sweep counts")
		})
	})

	t.Run("PanickingSweepDoesNotStopTheNext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, func(context.Context, lease.Term) error { panic("nil map") }, ok)
			start(t, b.worker)
			rep := nextCycle(b.worker)
			b.worker.Stop()
			require.Equal(t, []string{"a", "b"}, b.ran)
			require.True(t, rep.Stamped)
			require.Equal(t, int64(1), b.worker.Stats().SweepErrors)
		})
	})

	t.Run("FollowerRunsNoSweep", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, ok)
			b.lease.set(lease.Follower)
			start(t, b.worker)
			nextCycle(b.worker)
			b.worker.Stop()
			require.Empty(t, b.ran)
		})
	})
}

// A worker with a database but no handlers runs its sweeps and leaves the
// jobs table alone: it need not even exist.
func TestSweepsNeedNoJobsTable(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, lease.Term) error { return nil }
	db := newSchema(t)
	w := newWorker(t, Config{Lease: newStubLease(lease.Leader), DSN: db.Postgres.DSN, PollInterval: time.Millisecond,
		Sweeps: []Sweep{SweepFunc("s", ok)}})
	start(t, w)
	for range 3 {
		rep := w.signals.cycled.Wait()
		require.NoError(t, rep.Err)
		require.True(t, rep.OK)
	}
	require.Zero(t, w.Stats().PollErrors)
}

// returnsSoon returns what f returns, failing the test if f has not
// returned within a second. The back-off loops while its wait grows; with
// multiplier 1 it never grows, and a broken loop count would spin for
// ever: this way it fails the test instead of hanging it.
func returnsSoon[T any](t *testing.T, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(time.Second):
		t.Fatal("did not return within a second")
		var zero T
		return zero
	}
}
