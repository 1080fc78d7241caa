package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/worker/internal/testsignal"
)

// Defaults taken by a zero Config field. The loop values are the original
// worker's.
const (
	DefaultPollInterval      = 30 * time.Second
	DefaultBackoffInitial    = 5 * time.Second
	DefaultBackoffMultiplier = 2.0
	DefaultBackoffMax        = 5 * time.Minute
	DefaultLeaseTimeout      = 30 * time.Second
	DefaultBatchSize         = 10
	DefaultVisibilityTimeout = 5 * time.Minute
	DefaultMaxAttempts       = 25
	DefaultTable             = "doublerun_jobs"
)

// maxBatchSize bounds BatchSize: every claimed job runs in a goroutine of
// its own, and a batch is completed in one statement.
const maxBatchSize = 10_000

// completeTimeout bounds the transaction that records a batch's outcomes.
// It runs without the loop's cancellation so that Stop does not throw away
// work that has already been done.
const completeTimeout = 10 * time.Second

// Config configures a Worker. Every zero field takes the default named in
// its comment; New validates the result.
type Config struct {
	// Lease gates the worker: only while it reports Leader does the worker
	// claim jobs and run sweeps. Required. The worker never releases or
	// closes it; the caller owns it.
	Lease lease.Lease

	// DSN is the database holding the jobs table. The worker opens a pool
	// on it with QueryExecModeExec, which is safe through every PgBouncer
	// version and pool mode, unless the DSN itself sets
	// default_query_exec_mode (for example to the mode pgbouncer.ExecMode
	// picks for a direct or PgBouncer 1.21+ endpoint). Leave DSN and Pool
	// empty for a worker that runs sweeps only.
	DSN string
	// Pool, if set, is used instead of DSN, and its query exec mode is the
	// caller's responsibility. The worker does not close it.
	Pool *pgxpool.Pool
	// Table is the jobs table, optionally schema-qualified ("jobs" or
	// "app.jobs"); default DefaultTable. Create it with Migrate.
	Table string
	// Handlers maps a job kind to the handler that runs it. The worker
	// claims only jobs of these kinds. Needs DSN or Pool.
	Handlers map[string]Handler
	// Sweeps run in this order on every leader cycle, after the jobs.
	Sweeps []Sweep

	// ID names this replica in the claimed_by column; default
	// "hostname-pid".
	ID string
	// PollInterval is the wait between two successful cycles; default 30 s.
	// Milliseconds are fine for tests and scenarios.
	PollInterval time.Duration
	// BackoffInitial is the wait after the first faulted cycle (a faulted
	// lease or a failed poll); default 5 s. Each further consecutive failure
	// multiplies it by BackoffMultiplier (default 2), up to BackoffMax
	// (default 5 min). A successful cycle resets it.
	BackoffInitial    time.Duration
	BackoffMultiplier float64
	BackoffMax        time.Duration
	// LeaseTimeout bounds one TryAcquire call; default 30 s. A lease that
	// exceeds it counts as Faulted for that cycle.
	LeaseTimeout time.Duration

	// BatchSize is the most jobs one leader cycle claims; default 10.
	BatchSize int
	// VisibilityTimeout is how long a claimed job stays invisible to other
	// claims; default 5 min. When it passes without a recorded outcome (the
	// leader died, froze or lost its connection) the job is claimed again.
	// It is also the deadline of the handler's context, so set it above the
	// longest a handler may run.
	VisibilityTimeout time.Duration
	// MaxAttempts is the default for jobs enqueued through Worker.Enqueue;
	// default 25.
	MaxAttempts int
	// RetryDelay returns how long a job waits after failed attempt number
	// attempt (1-based) before it is due again; default DefaultRetryDelay.
	RetryDelay func(attempt int) time.Duration

	// DegradedStatusCode is the HTTP status the health handler answers when
	// degraded; default 200, as the original did, so that a probe reads the
	// JSON rather than the code. Set 503 for probes that read the code.
	DegradedStatusCode int

	// Logger receives what the worker has to say; default discards.
	Logger *slog.Logger
}

// DefaultRetryDelay waits 1 s after the first failed attempt and doubles
// with every further one, capped at one hour.
func DefaultRetryDelay(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

func (c Config) withDefaults() Config {
	c.Table = cmp.Or(c.Table, DefaultTable)
	c.ID = cmp.Or(c.ID, defaultID())
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.BackoffInitial = cmp.Or(c.BackoffInitial, DefaultBackoffInitial)
	c.BackoffMultiplier = cmp.Or(c.BackoffMultiplier, DefaultBackoffMultiplier)
	c.BackoffMax = cmp.Or(c.BackoffMax, DefaultBackoffMax)
	c.LeaseTimeout = cmp.Or(c.LeaseTimeout, DefaultLeaseTimeout)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, DefaultVisibilityTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	if c.RetryDelay == nil {
		c.RetryDelay = DefaultRetryDelay
	}
	c.DegradedStatusCode = cmp.Or(c.DegradedStatusCode, 200)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func defaultID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "worker"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Lease == nil {
		bad("Lease is required; pass a lease.Lease such as lease.NewFenced")
	}
	if c.DSN != "" && c.Pool != nil {
		bad("set DSN or Pool, not both")
	}
	if len(c.Handlers) > 0 && c.DSN == "" && c.Pool == nil {
		bad("Handlers need the jobs table; set DSN or Pool")
	}
	for kind, h := range c.Handlers {
		if kind == "" || h == nil {
			bad("handler for kind %q: kind must be non-empty and handler non-nil", kind)
		}
	}
	names := map[string]bool{}
	for i, s := range c.Sweeps {
		switch {
		case s == nil:
			bad("Sweeps[%d] is nil", i)
		case s.Name() == "" || names[s.Name()]:
			bad("Sweeps[%d]: name %q is empty or used twice", i, s.Name())
		default:
			names[s.Name()] = true
		}
	}
	if _, _, err := parseTable(c.Table); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", c.PollInterval}, {"BackoffInitial", c.BackoffInitial}, {"BackoffMax", c.BackoffMax},
		{"LeaseTimeout", c.LeaseTimeout}, {"VisibilityTimeout", c.VisibilityTimeout},
	} {
		if d.v <= 0 {
			bad("%s must be positive, got %s", d.name, d.v)
		}
	}
	if c.BackoffMax < c.BackoffInitial {
		bad("BackoffMax (%s) must be at least BackoffInitial (%s)", c.BackoffMax, c.BackoffInitial)
	}
	if c.BackoffMultiplier < 1 {
		bad("BackoffMultiplier must be at least 1, got %g", c.BackoffMultiplier)
	}
	if c.BatchSize < 1 || c.BatchSize > maxBatchSize {
		bad("BatchSize must be between 1 and %d, got %d", maxBatchSize, c.BatchSize)
	}
	if c.MaxAttempts < 1 {
		bad("MaxAttempts must be at least 1, got %d", c.MaxAttempts)
	}
	if c.DegradedStatusCode < 200 || c.DegradedStatusCode > 599 {
		bad("DegradedStatusCode must be an HTTP status between 200 and 599, got %d", c.DegradedStatusCode)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}

// pool is what the worker needs from a connection pool. *pgxpool.Pool
// implements it; tests substitute pgxmock for failures a server cannot be
// made to produce.
type pool interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Worker runs leader-only work behind a lease: durable jobs and sweeps. Its
// methods are safe for concurrent use. See the package documentation.
type Worker struct {
	config   Config
	table    string // sanitised
	kinds    []string
	db       pool // nil when jobs are disabled
	ownPool  *pgxpool.Pool
	fencer   lease.Fencer // nil when the lease cannot fence
	now      func() time.Time
	stats    counters
	health   healthState
	signals  testSignals
	startMu  sync.Mutex
	cancel   context.CancelFunc
	done     chan struct{}
	isClosed bool
	loops    atomic.Int32 // loop goroutines running; never more than 1
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
	Err     error
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
	table, _, _ := parseTable(config.Table)
	w := &Worker{
		config: config,
		table:  table,
		now:    time.Now,
		kinds:  slices.Sorted(maps.Keys(config.Handlers)),
	}
	w.fencer, _ = config.Lease.(lease.Fencer)
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
		case <-w.done: // the loop ended with its context; start afresh
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
	w.cancel, w.done = cancel, done
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
	w.cancel, w.done = nil, nil
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

// loop runs cycles until ctx ends. A successful cycle waits PollInterval; a
// failed one waits the back-off for its count of consecutive failures.
func (w *Worker) loop(ctx context.Context) {
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
	res := w.acquire(ctx)
	rep := cycleReport{Status: res.Status, Err: res.Err}
	w.health.role(res.Status)
	switch res.Status {
	// Only a leader polls; caught by TestGate/LeaderPolls.
	case lease.Leader:
		rep.Polled = true
		if err := w.poll(ctx, res.Term); err != nil {
			// A failed poll leaves the heartbeat alone and backs off.
			// Caught by TestJobs/FailedPollBacksOffWithoutStamp.
			rep.Err = err
			return rep
		}
		w.stamp()
		rep.Stamped, rep.OK = true, true
	// A follower is healthy: it stamps and does no work. Both caught by
	// TestGate/FollowerStampsWithoutPolling.
	case lease.Follower:
		w.stamp()
		rep.Stamped, rep.OK = true, true
	default:
		// Faulted: no stamp, so a lasting fault degrades health instead of
		// reading as a healthy follower. Routing a fault as a follower, or
		// stamping here, is caught by TestGate/FaultedNeitherPollsNorStamps.
		w.stats.faults.Add(1)
	}
	return rep
}

// acquire calls the lease, turning an error, a panic or an unknown status
// into Faulted so that no lease can take the worker down.
func (w *Worker) acquire(ctx context.Context) (res lease.Result) {
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
	res, err := w.config.Lease.TryAcquire(actx)
	if err != nil {
		// Whatever the result says, a lease that errs is not trusted.
		// Caught by TestGate/ErringLeaseCountsAsFaulted.
		w.stats.leaseErrors.Add(1)
		return lease.Result{Status: lease.Faulted, Err: fmt.Errorf("lease: %w", err)}
	}
	switch res.Status {
	case lease.Leader, lease.Follower:
		return res
	case lease.Faulted:
		if res.Err == nil {
			res.Err = errors.New("lease reported faulted")
		}
		return res
	}
	return lease.Result{Status: lease.Faulted, Err: fmt.Errorf("lease returned unknown status %s", res.Status)}
}

// poll is the leader's work: claim and run due jobs, then the sweeps. Only
// a failure to claim or record jobs fails the poll; each sweep isolates its
// own failure.
func (w *Worker) poll(ctx context.Context, term lease.Term) error {
	w.stats.polls.Add(1)
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
		if err := w.work(ctx, term); err != nil {
			w.stats.pollErrors.Add(1)
			return err
		}
	}
	for _, s := range w.config.Sweeps {
		if err := w.sweep(ctx, s, term); err != nil {
			// Isolated: the next sweep still runs and the poll still
			// succeeds. Caught by TestSweeps/FailingSweepDoesNotStopTheNext.
			w.stats.sweepErrors.Add(1)
			w.config.Logger.Warn("worker: sweep failed", "sweep", s.Name(), "err", err)
		}
	}
	return nil
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

// counters back Stats.
type counters struct {
	cycles, polls, heartbeats, faults, leaseErrors, pollErrors atomic.Int64
	sweeps, sweepErrors                                        atomic.Int64
	claimed, completed, retried, discarded, handlerErrors      atomic.Int64
	staleRejected, lostClaims                                  atomic.Int64
}

// Stats are the worker's counters since New. They only grow.
type Stats struct {
	// Cycles is the number of finished loop cycles.
	Cycles int64
	// Polls counts leader cycles that started work.
	Polls int64
	// Heartbeats counts stamps (successful leader and follower cycles).
	Heartbeats int64
	// Faults counts cycles whose lease was Faulted, erred or panicked.
	Faults int64
	// LeaseErrors counts lease calls that returned an error or panicked.
	LeaseErrors int64
	// PollErrors counts polls that failed to claim or record jobs.
	PollErrors int64
	// Sweeps counts sweep runs; SweepErrors those that failed or panicked.
	Sweeps      int64
	SweepErrors int64
	// JobsClaimed counts claims, a job claimed twice counting twice.
	JobsClaimed int64
	// JobsCompleted counts completions recorded in the table.
	JobsCompleted int64
	// JobsRetried counts failed attempts put back for a retry.
	JobsRetried int64
	// JobsDiscarded counts jobs given up after their last attempt.
	JobsDiscarded int64
	// HandlerErrors counts handler runs that returned an error or panicked.
	HandlerErrors int64
	// StaleRejected counts job outcomes the fence rejected because a newer
	// term had been granted: stale completions that did not land.
	StaleRejected int64
	// LostClaims counts outcomes not recorded because the job had been
	// claimed again after its visibility timeout.
	LostClaims int64
}

// Stats returns the current counters.
func (w *Worker) Stats() Stats {
	c := &w.stats
	return Stats{
		Cycles: c.cycles.Load(), Polls: c.polls.Load(), Heartbeats: c.heartbeats.Load(),
		Faults: c.faults.Load(), LeaseErrors: c.leaseErrors.Load(), PollErrors: c.pollErrors.Load(),
		Sweeps: c.sweeps.Load(), SweepErrors: c.sweepErrors.Load(),
		JobsClaimed: c.claimed.Load(), JobsCompleted: c.completed.Load(), JobsRetried: c.retried.Load(),
		JobsDiscarded: c.discarded.Load(), HandlerErrors: c.handlerErrors.Load(),
		StaleRejected: c.staleRejected.Load(), LostClaims: c.lostClaims.Load(),
	}
}
