package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
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
	DefaultRetention         = 24 * time.Hour
	DefaultTable             = "doublerun_jobs"
)

// maxBatchSize bounds BatchSize and one completion statement: every
// claimed job runs in a goroutine of its own, and outcomes are recorded in
// statements of at most this many jobs.
const maxBatchSize = 10_000

// maxHandlers bounds MaxHandlers.
const maxHandlers = 100_000

// completeTimeout bounds the transaction that records a batch's outcomes.
// It runs without the loop's cancellation so that Stop does not throw away
// work that has already been done.
const completeTimeout = 10 * time.Second

// Config configures a Worker. Every zero field takes the default named in
// its comment; New validates the result.
type Config struct {
	// Lease gates the worker: only while it reports Leader does the worker
	// claim jobs and run sweeps. Required. A lease that implements
	// lease.Acquirer is asked through Acquire, which lets a follower wait
	// for leadership instead of polling for it. The worker never releases
	// or closes it; the caller owns it.
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
	// PollInterval is how long a follower, or a leader that found nothing
	// more to claim, waits before it asks the lease again; default 30 s. A
	// leader whose claims keep coming back full does not wait, but still
	// asks the lease at least this often. Milliseconds are fine for tests
	// and scenarios.
	PollInterval time.Duration
	// BackoffInitial is the wait after the first faulted cycle (a faulted
	// lease or a failed poll); default 5 s. Each further consecutive failure
	// multiplies it by BackoffMultiplier (default 2), up to BackoffMax
	// (default 5 min). A successful cycle resets it.
	BackoffInitial    time.Duration
	BackoffMultiplier float64
	BackoffMax        time.Duration
	// LeaseTimeout bounds one TryAcquire (or Acquire) call; default 30 s. A
	// lease that exceeds it counts as Faulted for that cycle, so a lease
	// that waits in Acquire must wait for less.
	LeaseTimeout time.Duration

	// BatchSize is the most jobs one claim takes; default 10. A leader
	// claims again at once while claims come back full.
	BatchSize int
	// MaxHandlers bounds how many handlers run at once; default
	// 2 × BatchSize, so that one batch runs while the next is claimed. A
	// claim waits for BatchSize handlers to be free, so MaxHandlers must
	// be at least BatchSize.
	MaxHandlers int
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
	// Retention is how long completed and discarded jobs stay in the
	// table; default 24 h. The leader deletes older ones in a sweep of its
	// own (see the package documentation). Negative keeps them forever.
	Retention time.Duration
	// Completed, if set, is called after each transaction that records
	// outcomes commits, with the IDs of the jobs it completed: only those
	// whose completion landed (a late outcome of a job another claim took
	// is not among them). It runs in the worker's recording path, so it
	// holds up the next recording while it runs; keep it short. For an
	// application that tells someone a job is done, and for doublerun's
	// own accounting of what a primary failover lost.
	Completed func(ctx context.Context, ids []int64)

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
	c.MaxHandlers = cmp.Or(c.MaxHandlers, 2*c.BatchSize)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
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
	if _, err := parseTable(c.Table); err != nil {
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
	if c.MaxHandlers < c.BatchSize || c.MaxHandlers > maxHandlers {
		bad("MaxHandlers must be between BatchSize (%d) and %d, got %d; leave it 0 for 2 × BatchSize", c.BatchSize, maxHandlers, c.MaxHandlers)
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
