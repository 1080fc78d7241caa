package worker

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestStartStop(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	type bundle struct {
		lease  *stubLease
		worker *Worker
	}
	setup := func(t *testing.T) *bundle {
		l := newStubLease(lease.Follower)
		// 10 ms: quick cycles, and a health threshold (3 intervals)
		// that a loaded machine does not overrun between a heartbeat and
		// the Health call that checks it.
		return &bundle{lease: l, worker: newWorker(t, Config{Lease: l, PollInterval: 10 * time.Millisecond})}
	}

	t.Run("StartRunsOneLoopHoweverOftenCalled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		for range 5 {
			require.NoError(t, b.worker.Start(ctx))
		}
		t.Cleanup(b.worker.Stop)
		require.Equal(t, int32(1), b.worker.loops.Load())
		b.worker.signals.cycled.Wait()
		stop(t, b.worker)
		require.Zero(t, b.worker.loops.Load())
	})

	t.Run("StartReturnsWithTheLoopRunning", func(t *testing.T) {
		t.Parallel()
		// A poll interval of a second, not setup's 10 ms: Health
		// degrades after 3 intervals without a heartbeat, and 30 ms can
		// pass before the first cycle on a loaded machine.
		w := newWorker(t, Config{Lease: newStubLease(lease.Follower), PollInterval: time.Second})
		start(t, w)
		require.Equal(t, StatusHealthy, w.Health().Status, "started, so not 'never started'")
	})

	t.Run("StopBeforeStartDoesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stop(t, b.worker)
		require.Equal(t, "worker never started", b.worker.Health().Reason)
	})

	t.Run("RestartsAfterStop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start(t, b.worker)
		b.worker.signals.cycled.Wait()
		stop(t, b.worker)
		require.NoError(t, b.worker.Start(context.Background()))
		before := b.worker.Stats().Cycles
		b.worker.signals.cycled.WaitUntil(func(cycleReport) bool { return b.worker.Stats().Cycles > before })
		require.Equal(t, StatusHealthy, b.worker.Health().Status)
	})

	t.Run("LoopEndsWithItsContextAndCanStartAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, b.worker.Start(ctx))
		t.Cleanup(b.worker.Stop)
		b.worker.signals.cycled.Wait()
		cancel()
		require.Eventually(t, func() bool { return b.worker.Health().Reason == "worker stopped" }, 10*time.Second, time.Millisecond)
		require.NoError(t, b.worker.Start(context.Background()))
		b.worker.signals.cycled.Wait()
		b.worker.signals.cycled.Wait()
		require.Equal(t, StatusHealthy, b.worker.Health().Status)
	})

	// Start called while a loop whose context has ended is still in its
	// last cycle (here, a lease call that has not answered yet) waits for
	// that loop and starts a new one, instead of taking the ending loop
	// for a running one and leaving the worker without a loop.
	t.Run("StartWaitsForALoopWhoseContextEnded", func(t *testing.T) {
		t.Parallel()
		l := &heldLease{stubLease: newStubLease(lease.Follower), entered: make(chan struct{}, 1), release: make(chan struct{})}
		w := newWorker(t, Config{Lease: l, PollInterval: 10 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, w.Start(ctx))
		t.Cleanup(w.Stop)
		t.Cleanup(l.letGo) // first, so that Stop does not wait forever
		w.signals.cycled.Wait()
		l.held.Store(true)
		<-l.entered // the loop is in a lease call that ignores its context
		cancel()
		calling, started := make(chan struct{}), make(chan error, 1)
		go func() {
			close(calling)
			started <- w.Start(context.Background())
		}()
		<-calling
		select {
		case <-started:
			t.Fatal("Start returned while the ended loop was still in its last cycle")
		case <-time.After(200 * time.Millisecond): // Start waits, as it should
		}
		l.letGo()
		require.NoError(t, <-started)
		before := w.Stats().Cycles
		// Healthy means a heartbeat within 3 poll intervals, 30 ms here,
		// which a loaded machine can let pass between a cycle and the
		// read (a mutation gate beside make test and two CPU hogs, load
		// average 12, read it degraded). So Health is read as each new
		// cycle reports, until one finds it healthy; none in
		// testsignal.DefaultTimeout fails the test.
		w.signals.cycled.WaitUntil(func(cycleReport) bool {
			return w.Stats().Cycles > before && w.Health().Status == StatusHealthy
		})
		require.Equal(t, int32(1), w.loops.Load())
	})
}

// heldLease is a stub lease whose calls, while held is set, wait for
// release whatever their context says, as a lease call stuck on a slow
// network does until its own timeout.
type heldLease struct {
	*stubLease
	held    atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// letGo lets the held call and every later one through.
func (l *heldLease) letGo() {
	l.once.Do(func() {
		l.held.Store(false)
		close(l.release)
	})
}

func (l *heldLease) TryAcquire(ctx context.Context) (lease.Result, error) {
	if l.held.Load() {
		l.entered <- struct{}{}
		<-l.release
	}
	return l.stubLease.TryAcquire(ctx)
}

func TestDefaultRetryDelay(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).
	for attempt, want := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 12: 2048 * time.Second,
		13: time.Hour, 100: time.Hour,
	} {
		require.Equal(t, want, DefaultRetryDelay(attempt), "after attempt %d", attempt)
	}
}

func TestConfig(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	t.Run("ZeroValuesTakeTheDefaults", func(t *testing.T) {
		t.Parallel()
		w := newWorker(t, Config{Lease: newStubLease(lease.Follower)})
		c := w.config
		require.Equal(t, 30*time.Second, c.PollInterval)
		require.Equal(t, 5*time.Second, c.BackoffInitial)
		require.Equal(t, 2.0, c.BackoffMultiplier)
		require.Equal(t, 5*time.Minute, c.BackoffMax)
		require.Equal(t, 10, c.BatchSize)
		require.Equal(t, 20, c.MaxHandlers, "twice the batch: one runs while the next is claimed")
		require.Equal(t, 24*time.Hour, c.Retention)
		require.Equal(t, 5*time.Minute, c.VisibilityTimeout)
		require.Equal(t, 25, c.MaxAttempts)
		require.Equal(t, http.StatusOK, c.DegradedStatusCode)
		require.Equal(t, `"doublerun_jobs"`, w.table)
		require.NotEmpty(t, c.ID)
	})

	t.Run("DefaultIDIsHostAndPID", func(t *testing.T) {
		t.Parallel()
		host, err := os.Hostname()
		require.NoError(t, err)
		w := newWorker(t, Config{Lease: newStubLease(lease.Follower)})
		require.Equal(t, fmt.Sprintf("%s-%d", host, os.Getpid()), w.config.ID)
	})

	// Each limit is inclusive: the edge value itself is a working config.
	t.Run("AcceptsTheEdgeOfEachLimit", func(t *testing.T) {
		t.Parallel()
		l := newStubLease(lease.Follower)
		for name, config := range map[string]Config{
			"ShortestIntervals":     {Lease: l, PollInterval: 1, BackoffInitial: 1, BackoffMax: 1, LeaseTimeout: 1, VisibilityTimeout: 1},
			"CapEqualToInitial":     {Lease: l, BackoffInitial: time.Second, BackoffMax: time.Second},
			"ConstantBackoff":       {Lease: l, BackoffMultiplier: 1},
			"SmallestBatch":         {Lease: l, BatchSize: 1},
			"LargestBatch":          {Lease: l, BatchSize: maxBatchSize},
			"OneAttempt":            {Lease: l, MaxAttempts: 1},
			"HandlersEqualToBatch":  {Lease: l, BatchSize: 7, MaxHandlers: 7},
			"MostHandlers":          {Lease: l, MaxHandlers: maxHandlers},
			"KeepForever":           {Lease: l, Retention: -1},
			"LowestDegradedStatus":  {Lease: l, DegradedStatusCode: 200},
			"HighestDegradedStatus": {Lease: l, DegradedStatusCode: 599},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := New(config)
				require.NoError(t, err)
			})
		}
	})

	t.Run("RejectsWhatCannotWork", func(t *testing.T) {
		t.Parallel()
		l := newStubLease(lease.Follower)
		for name, tc := range map[string]struct {
			config Config
			want   string
		}{
			"NoLease":               {Config{}, "Lease is required"},
			"HandlersWithoutDB":     {Config{Lease: l, Handlers: map[string]Handler{"k": noop}}, "Handlers need the jobs table"},
			"DSNAndPool":            {Config{Lease: l, DSN: "postgres://x", Pool: new(pgxpool.Pool)}, "set DSN or Pool, not both"},
			"EmptyKind":             {Config{Lease: l, DSN: "postgres://x", Handlers: map[string]Handler{"": noop}}, `kind must be non-empty`},
			"DuplicateSweep":        {Config{Lease: l, Sweeps: []Sweep{SweepFunc("a", nil), SweepFunc("a", nil)}}, `name "a" is empty or used twice`},
			"NegativeInterval":      {Config{Lease: l, PollInterval: -time.Second}, "PollInterval must be positive"},
			"CapBelowInitial":       {Config{Lease: l, BackoffInitial: time.Minute, BackoffMax: time.Second}, "BackoffMax (1s) must be at least BackoffInitial (1m0s)"},
			"ShrinkingBackoff":      {Config{Lease: l, BackoffMultiplier: 0.5}, "BackoffMultiplier must be at least 1"},
			"HugeBatch":             {Config{Lease: l, BatchSize: 1_000_000}, "BatchSize must be between 1 and 10000"},
			"BadStatusCode":         {Config{Lease: l, DegradedStatusCode: 42}, "DegradedStatusCode must be an HTTP status"},
			"StatusCodeTooHigh":     {Config{Lease: l, DegradedStatusCode: 600}, "DegradedStatusCode must be an HTTP status"},
			"BatchOneTooLarge":      {Config{Lease: l, BatchSize: maxBatchSize + 1}, "BatchSize must be between 1 and 10000"},
			"ThreePartTable":        {Config{Lease: l, Table: "a.b.c"}, "must be table or schema.table"},
			"ZeroMaxAttemptsAfter":  {Config{Lease: l, MaxAttempts: -3}, "MaxAttempts must be at least 1"},
			"FewerHandlersThanJobs": {Config{Lease: l, BatchSize: 10, MaxHandlers: 9}, "MaxHandlers must be between BatchSize (10) and 100000, got 9"},
			"TooManyHandlers":       {Config{Lease: l, MaxHandlers: maxHandlers + 1}, "MaxHandlers must be between BatchSize (10) and 100000"},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := New(tc.config)
				require.ErrorContains(t, err, tc.want)
			})
		}
	})
}

// TestStartStopLeaksNothing is not parallel: goleak compares the
// goroutines before and after, which other tests running alongside would
// upset. It runs before the parallel tests are released, and after the
// tests that need no server (it is the last test in file order).
func TestStartStopLeaksNothing(t *testing.T) {
	// The shared stack and the test's own connection exist before the
	// snapshot; only what the worker starts is checked.
	db := newSchema(t)
	require.NoError(t, Migrate(context.Background(), stacktest.Connect(t, db.Postgres), ""))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	l := newStubLease(lease.Leader)
	w, err := New(Config{
		Lease:        l,
		DSN:          db.Postgres.DSN,
		Handlers:     map[string]Handler{"k": noop},
		Sweeps:       []Sweep{SweepFunc("s", func(context.Context, lease.Term) error { return nil })},
		PollInterval: time.Millisecond,
	})
	require.NoError(t, err)
	w.signals.Init(t)

	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for j := range 20 {
				if (i+j)%2 == 0 {
					assertNoError(t, w.Start(context.Background()))
				} else {
					w.Stop()
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Start(context.Background()))
	w.signals.cycled.WaitUntil(func(r cycleReport) bool { return r.Polled && r.OK })

	// Many concurrent Stops all return after the loop has ended.
	for range 16 {
		wg.Go(func() {
			w.Stop()
			require.Equal(t, "worker stopped", w.Health().Reason)
		})
	}
	wg.Wait()
	require.Zero(t, w.loops.Load())
	w.Close()
	w.Close()
	require.ErrorContains(t, w.Start(context.Background()), "Start after Close")
}
