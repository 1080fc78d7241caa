package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/worker/internal/testsignal"
)

// pool is what the worker needs from a connection pool. *pgxpool.Pool
// implements it; tests wrap one to break or stall a transaction at COMMIT,
// failures a real server cannot be asked for (see commit_test.go). The
// tests use no pgxmock: no release of it builds against pgx v5.11 or
// later, and pgx stays at v5.12.
type pool interface {
	DB
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Worker runs leader-only work behind a lease: durable jobs and sweeps. Its
// methods are safe for concurrent use. See the package documentation.
type Worker struct {
	config  Config
	table   string // sanitised
	kinds   []string
	db      pool // nil when jobs are disabled
	ownPool *pgxpool.Pool
	fencer  lease.Fencer // nil when the lease cannot fence
	sweeps  []Sweep      // Config.Sweeps
	keep    *retention   // nil when jobs are disabled or kept forever
	pipe    *pipeline    // the jobs in flight; only the loop touches it
	// rescanEvery is rescanEvery; tests shorten it.
	rescanEvery time.Duration
	now         func() time.Time
	stats       counters
	health      healthState
	signals     testSignals
	startMu     sync.Mutex
	cancel      context.CancelFunc
	done        chan struct{}   // closed when the loop has ended
	ended       <-chan struct{} // the loop's context's Done
	isClosed    bool
	loops       atomic.Int32 // loop goroutines running; never more than 1
}

// testSignals let tests wait for events. They cost a nil check each in
// production, where they are never initialised.
type testSignals struct {
	cycled    testsignal.Signal[cycleReport]
	completed testsignal.Signal[completeReport]
	swept     testsignal.Signal[string]
}

func (s *testSignals) Init(tb testsignal.TB) {
	s.cycled.Init(tb)
	s.completed.Init(tb)
	s.swept.Init(tb)
}

// cycleReport says what one cycle of the loop did.
type cycleReport struct {
	Status  lease.Status
	Polled  bool
	Stamped bool
	OK      bool
	// Again says the next cycle starts at once: the leader's last claim
	// came back full, or a lease that waits in Acquire answered Follower.
	Again bool
	Err   error
	// Wait is how long the loop waits before the next cycle.
	Wait time.Duration
	// Failures counts consecutive failed cycles, this one included.
	Failures int
}

// completeReport says what one completion transaction did.
type completeReport struct {
	Term      lease.Term
	Jobs      int
	Recorded  int
	Stale     bool
	Err       error
	Discarded int
}

// New validates config and returns a worker ready to Start. It opens no
// connection yet; a pool from DSN connects on first use.
func New(config Config) (*Worker, error) {
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	names, _ := parseTable(config.Table)
	w := &Worker{
		config:      config,
		table:       names.table,
		rescanEvery: rescanEvery,
		now:         time.Now,
		kinds:       slices.Sorted(maps.Keys(config.Handlers)),
	}
	w.fencer, _ = config.Lease.(lease.Fencer)
	w.sweeps = config.Sweeps
	switch {
	case config.Pool != nil:
		w.db = config.Pool
	case config.DSN != "":
		p, err := newPool(config.DSN)
		if err != nil {
			return nil, err
		}
		w.db, w.ownPool = p, p
	}
	if w.db != nil && len(w.kinds) > 0 && config.Retention > 0 {
		w.keep = &retention{window: config.Retention, every: retentionInterval}
	}
	return w, nil
}

// Start starts the loop and returns once its goroutine runs. It is
// idempotent: a running worker is left alone. The loop runs until Stop, or
// until ctx ends. A stopped worker can be started again; a closed one
// cannot.
func (w *Worker) Start(ctx context.Context) error {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.isClosed {
		return errors.New("worker: Start after Close; build a new worker with New")
	}
	if w.done != nil {
		select {
		case <-w.ended:
			// The loop ends only with its context, so it has ended or is
			// ending (its last cycle, then the health it reports). Taken
			// for running while it ends, it would leave the worker with
			// no loop: wait for it, then start afresh. Caught by
			// TestStartStop/StartWaitsForALoopWhoseContextEnded.
			<-w.done
			w.cancel()
		default:
			// Already running. Caught by
			// TestStartStop/StartRunsOneLoopHoweverOftenCalled.
			return nil
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	running := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.health.stopped()
		w.loops.Add(1)
		defer w.loops.Add(-1)
		w.health.started(w.now())
		close(running)
		w.loop(ctx)
	}()
	<-running
	w.cancel, w.done, w.ended = cancel, done, ctx.Done()
	return nil
}

// Stop stops the loop and returns once it has ended, after the cycle in
// flight has recorded its outcomes. It is idempotent and safe to call from
// many goroutines; each returns after the loop has ended. Handlers see their
// context cancelled, so a handler that ignores its context delays Stop.
func (w *Worker) Stop() {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	w.stopLocked()
}

func (w *Worker) stopLocked() {
	if w.done == nil {
		return
	}
	w.cancel()
	<-w.done
	w.cancel, w.done, w.ended = nil, nil, nil
}

// Close stops the worker and closes the pool it opened from DSN. It is
// idempotent. A Pool passed in Config is left open.
func (w *Worker) Close() {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	w.stopLocked()
	if !w.isClosed && w.ownPool != nil {
		w.ownPool.Close()
	}
	w.isClosed = true
}

// loop runs cycles until ctx ends. A successful cycle waits PollInterval,
// or nothing when it asks to go again at once; a failed one waits the
// back-off for its count of consecutive failures. Jobs still in flight
// when it ends have their outcomes recorded before it returns.
func (w *Worker) loop(ctx context.Context) {
	// Caught by TestPipeline/StopRecordsTheOutcomesOfJobsInFlight.
	defer func() {
		if err := w.endPipeline(false); err != nil {
			w.config.Logger.Warn("worker: recording the outcomes of the jobs in flight at stop failed", "err", err)
		}
	}()
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		rep := w.cycle(ctx)
		if ctx.Err() != nil {
			return // stopping; the cycle was cut short, not failed
		}
		w.stats.cycles.Add(1)
		// A success resets the back-off and a failure waits it. Both caught
		// by TestBackoff/LoopWaitsTheBackoffAfterEachFault.
		if rep.OK {
			failures = 0
			rep.Wait = w.config.PollInterval
			if rep.Again {
				rep.Wait = 0
			}
		} else {
			failures++
			rep.Wait = backoff(w.config.BackoffInitial, w.config.BackoffMultiplier, w.config.BackoffMax, failures)
			w.config.Logger.Warn("worker: cycle failed; backing off",
				"status", rep.Status.String(), "err", rep.Err, "failures", failures, "wait", rep.Wait)
		}
		rep.Failures = failures
		w.signals.cycled.Signal(rep)
		timer.Reset(rep.Wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// backoff is the wait after the given number of consecutive failures (at
// least 1): initial, multiplied by multiplier for every failure after the
// first, never more than max.
func backoff(initial time.Duration, multiplier float64, max time.Duration, failures int) time.Duration {
	d := initial
	for i := 1; i < failures && d < max; i++ {
		d = time.Duration(float64(d) * multiplier)
		if d <= 0 { // overflowed
			d = max
		}
	}
	// The cap. Caught by TestBackoff/GrowsAndStopsAtItsCap.
	return min(d, max)
}

// cycle asks the lease once and routes on its answer exactly as the
// original worker did.
func (w *Worker) cycle(ctx context.Context) cycleReport {
	res, waited := w.acquire(ctx)
	rep := cycleReport{Status: res.Status, Err: res.Err}
	w.health.role(res.Status)
	// Jobs in flight were claimed under the term of an earlier cycle. An
	// answer that is not Leader of that same term no longer covers them:
	// their handlers are cancelled and their outcomes recorded under the
	// old term, where the fence decides. Caught by
	// TestPipeline/LeaseLostCancelsTheJobsInFlight; a new term getting a
	// pipeline of its own by TestPipeline/NewTermStartsANewPipeline.
	if w.pipe != nil && (res.Status != lease.Leader || res.Term != w.pipe.term) {
		if err := w.endPipeline(true); err != nil {
			w.config.Logger.Warn("worker: outcomes of the previous term's jobs not recorded", "err", err)
		}
	}
	switch res.Status {
	// Only a leader polls; caught by TestGate/LeaderPolls.
	case lease.Leader:
		rep.Polled = true
		more, err := w.poll(ctx, res.Term)
		if err != nil {
			// A failed poll leaves the heartbeat alone and backs off.
			// Caught by TestJobs/FailedPollBacksOffWithoutStamp.
			rep.Err = err
			return rep
		}
		w.stamp()
		rep.Stamped, rep.OK = true, true
		// More jobs are due: claim again at once. Caught by
		// TestPipeline/FullBatchesAreClaimedWithoutWaiting.
		rep.Again = more
	// A follower is healthy: it stamps and does no work. Both caught by
	// TestGate/FollowerStampsWithoutPolling.
	case lease.Follower:
		w.stamp()
		rep.Stamped, rep.OK = true, true
		// A lease that waited in Acquire has spent the wait already, and
		// is asked again at once so that it is waiting when the lease
		// comes free. Caught by
		// TestGateAcquirer/TakesOverTheMomentTheLeaseIsFree.
		rep.Again = waited
	default:
		// Faulted: no stamp, so a lasting fault degrades health instead of
		// reading as a healthy follower. Routing a fault as a follower, or
		// stamping here, is caught by TestGate/FaultedNeitherPollsNorStamps.
		w.stats.faults.Add(1)
	}
	return rep
}

// acquire calls the lease, turning an error, a panic or an unknown status
// into Faulted so that no lease can take the worker down. waited says the
// lease was asked through Acquire, which waits for leadership.
func (w *Worker) acquire(ctx context.Context) (res lease.Result, waited bool) {
	defer func() {
		// Caught by TestGate/PanickingLeaseCountsAsFaulted.
		if r := recover(); r != nil {
			w.stats.leaseErrors.Add(1)
			res = lease.Result{Status: lease.Faulted, Err: fmt.Errorf("lease panicked: %v", r)}
		}
	}()
	// Caught by TestGate/HangingLeaseTimesOutAsFaulted.
	actx, cancel := context.WithTimeout(ctx, w.config.LeaseTimeout)
	defer cancel()
	var err error
	// A lease that can wait for leadership is asked to. Caught by
	// TestGateAcquirer/FollowerWaitsInTheLease.
	if a, ok := w.config.Lease.(lease.Acquirer); ok {
		res, err = a.Acquire(actx)
		waited = true
	} else {
		res, err = w.config.Lease.TryAcquire(actx)
	}
	if err != nil {
		// Whatever the result says, a lease that errs is not trusted.
		// Caught by TestGate/ErringLeaseCountsAsFaulted.
		w.stats.leaseErrors.Add(1)
		return lease.Result{Status: lease.Faulted, Err: fmt.Errorf("lease: %w", err)}, waited
	}
	switch res.Status {
	case lease.Leader, lease.Follower:
		return res, waited
	case lease.Faulted:
		if res.Err == nil {
			res.Err = errors.New("lease reported faulted")
		}
		return res, waited
	}
	return lease.Result{Status: lease.Faulted, Err: fmt.Errorf("lease returned unknown status %s", res.Status)}, waited
}

// poll is the leader's work: claim and run due jobs, then the sweeps. Only
// a failure to claim or record jobs fails the poll; each sweep isolates its
// own failure. more says the last claim came back full.
func (w *Worker) poll(ctx context.Context, term lease.Term) (more bool, err error) {
	w.stats.polls.Add(1)
	loopCtx := ctx
	ctx = withLeader(ctx, term, w.fencer)
	// A lease that knows how long its Leader answer may be trusted (such as
	// lease.Fenced) bounds the leader work: past that instant another
	// replica may lead, so handlers and sweeps see their context end.
	// Caught by TestJobs/LeaseDeadlineEndsTheLeaderWork.
	if d, ok := w.config.Lease.(deadliner); ok {
		if deadline := d.Deadline(); !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
	}
	if w.db != nil && len(w.kinds) > 0 {
		if more, err = w.work(loopCtx, ctx, term); err != nil {
			w.stats.pollErrors.Add(1)
			return false, err
		}
	}
	sweeps := w.sweeps
	// Finished jobs past their retention go. Caught by
	// TestRetention/LeaderDeletesOldFinishedJobsOncePerInterval.
	if w.keep != nil && w.keep.due(w.now()) {
		sweeps = append(slices.Clip(sweeps), retentionSweep{w})
	}
	for _, s := range sweeps {
		if err := w.sweep(ctx, s, term); err != nil {
			// Isolated: the next sweep still runs and the poll still
			// succeeds. Caught by TestSweeps/FailingSweepDoesNotStopTheNext.
			w.stats.sweepErrors.Add(1)
			w.config.Logger.Warn("worker: sweep failed", "sweep", s.Name(), "err", err)
		}
	}
	return more, nil
}

// deadliner is implemented by leases that know until when their last
// Leader answer may be trusted, such as lease.Fenced.
type deadliner interface {
	Deadline() time.Time
}

// stamp records a heartbeat.
func (w *Worker) stamp() {
	w.stats.heartbeats.Add(1)
	w.health.stamp(w.now())
}
