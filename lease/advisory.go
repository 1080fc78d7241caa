package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdvisoryConfig configures an Advisory lease. Zero values take the
// defaults noted next to each field.
type AdvisoryConfig struct {
	// DSN is the lease's own endpoint; required. It must reach Postgres
	// directly or through a session-pinned pool, not the transaction pool
	// the work uses: see "Pinned configuration" in the package docs.
	DSN string
	// Name is the lease's name in Term.Name and in the token table;
	// default "doublerun".
	Name string
	// Holder identifies this replica in Term.Holder and in logs; default
	// hostname-pid.
	Holder string
	// Key1 and Key2 are the advisory lock's keys; default 271 and 1.
	Key1, Key2 int32
	// ApplicationName is the lease connection's application_name, so it
	// can be told apart in pg_stat_activity; default
	// "doublerun-leader-lease".
	ApplicationName string
	// ProbeTimeout bounds each round trip of a poll: the connect, the
	// acquire, the token grant and the liveness probe. A half-open socket
	// cannot stall a poll longer than this. Default 5s.
	ProbeTimeout time.Duration
	// TokenTable holds the fencing token of each lease name; default
	// "doublerun_lease_tokens". NewAdvisory creates it if it is missing.
	TokenTable string
	// DisablePIDGuard turns off the backend-PID affinity check, giving the
	// advisory-unguarded baseline. The liveness probe still runs.
	DisablePIDGuard bool
	// AllowTransactionPooling lets NewAdvisory accept an endpoint that
	// CheckEndpoint proves transaction-pooled. Two replicas can then both
	// be leader (issue #556); only reproductions should set it. It does
	// not lift the refusal of such an endpoint when Wait is set.
	AllowTransactionPooling bool
	// Wait makes Acquire wait for the lock in pg_advisory_lock, for at
	// most WaitTimeout, instead of asking once: a follower is then woken by
	// the server the moment the holder's session ends or unlocks, so
	// failover is bounded by the server, not by the poll. The follower
	// holds its server connection for as long as it waits, so NewAdvisory
	// refuses a transaction-pooled endpoint when Wait is set, whatever
	// AllowTransactionPooling says. TryAcquire never waits; without Wait,
	// Acquire is TryAcquire.
	Wait bool
	// WaitTimeout bounds one wait of Acquire. It is sent as the wait
	// statement's own lock_timeout, and the client gives up on a silent
	// server after WaitTimeout + ProbeTimeout. Default 1s; at least 1ms.
	// Keep it below the caller's bound on one lease call (the worker's
	// LeaseTimeout).
	WaitTimeout time.Duration
	// Logger receives state changes and faults; default discards.
	Logger *slog.Logger
}

const (
	defaultName            = "doublerun"
	defaultApplicationName = "doublerun-leader-lease"
	defaultProbeTimeout    = 5 * time.Second
	defaultTokenTable      = "doublerun_lease_tokens"
)

// The Advisory statements. Each one stands alone.
const (
	advisoryAcquireSQL = "SELECT pg_try_advisory_lock($1, $2), pg_backend_pid()"
	advisoryProbeSQL   = "SELECT pg_backend_pid()"
	// token is in a UNIQUE constraint so that it is a key column; see fence.
	// Caught by TestAdvisory/FenceHoldsOffANewGrantUntilTheWriteCommits.
	advisoryTokenTableDDL = "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY, token bigint NOT NULL, granted_at timestamptz NOT NULL DEFAULT clock_timestamp(), UNIQUE (name, token))"
	// Every grant raises the token. Caught by TestAdvisory/TokensRiseAcrossGrants.
	advisoryGrantSQL = "INSERT INTO %s AS t (name, token) VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET token = t.token + 1, granted_at = clock_timestamp() RETURNING token"
)

func (c AdvisoryConfig) withDefaults() AdvisoryConfig {
	c.Name = cmp.Or(c.Name, defaultName)
	c.Holder = cmp.Or(c.Holder, defaultHolder())
	c.Key1 = cmp.Or(c.Key1, DefaultAdvisoryLock.Key1)
	c.Key2 = cmp.Or(c.Key2, DefaultAdvisoryLock.Key2)
	c.ApplicationName = cmp.Or(c.ApplicationName, defaultApplicationName)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, defaultProbeTimeout)
	c.TokenTable = cmp.Or(c.TokenTable, defaultTokenTable)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, defaultWaitTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c AdvisoryConfig) validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("DSN is empty; give the lease a session-pinned endpoint of its own"))
	}
	if c.ProbeTimeout < 0 {
		errs = append(errs, fmt.Errorf("ProbeTimeout %s is negative; leave it 0 for 5s", c.ProbeTimeout))
	}
	if _, err := quoteTable(c.TokenTable); err != nil {
		errs = append(errs, fmt.Errorf("TokenTable: %w", err))
	}
	if err := validateWaitTimeout(c.WaitTimeout); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ErrTransactionPooled is wrapped by NewAdvisory's refusal of an endpoint
// that CheckEndpoint proved transaction-pooled.
var ErrTransactionPooled = errors.New("lease endpoint is transaction-pooled")

// Advisory is the original lease: a session-scoped advisory lock on one
// dedicated, non-pooled connection, with a liveness probe and the
// backend-PID affinity guard. See the package documentation for its states
// and for why it needs a session-pinned endpoint (issue #556).
//
// A Leader result carries a fencing token taken from TokenTable right
// after the lock, so writes can be fenced with Advisory.Fence. With Wait,
// Acquire waits for the lock instead of asking once (advisory-wait).
// Release and Close unlock and say whether the unlock freed the lock on
// the backend that took it. Its methods are safe for concurrent use; calls
// are serialised.
type Advisory struct {
	cfg      AdvisoryConfig
	connCfg  *pgx.ConnConfig
	log      *slog.Logger
	tokens   string // quoted TokenTable
	grantSQL string
	endpoint EndpointReport

	// connect opens the lease connection and probe asks it for its backend
	// PID. In-package tests replace them to inject a PID mismatch or to put
	// a scripted conn in place of a server.
	connect func(ctx context.Context) (conn, error)
	probe   func(ctx context.Context, c conn) (int32, error)

	mu     sync.Mutex
	conn   conn
	held   bool
	pid    int32 // backend PID that took the lock, from the acquire statement
	term   Term
	closed bool
	// dropped are the connections reset closed; Close waits for their
	// cleanup (see cleanups).
	dropped cleanups
}

var (
	_ Lease      = (*Advisory)(nil)
	_ Acquirer   = (*Advisory)(nil)
	_ Fencer     = (*Advisory)(nil)
	_ LockHolder = (*Advisory)(nil)
)

// NewAdvisory validates cfg, checks the endpoint with CheckEndpoint and
// creates the token table if it is missing. It refuses an endpoint the
// check proves transaction-pooled unless cfg.AllowTransactionPooling is
// set. It does not take the lock; the first TryAcquire does.
func NewAdvisory(ctx context.Context, cfg AdvisoryConfig) (*Advisory, error) {
	a, err := newAdvisory(cfg)
	if err != nil {
		return nil, err
	}
	report, err := CheckEndpoint(ctx, a.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("lease: advisory %q: %w", a.cfg.Name, err)
	}
	a.endpoint = report
	a.log.InfoContext(ctx, "lease: endpoint checked", "endpoint", report.Endpoint, "kind", report.Kind.String(), "evidence", report.Evidence)
	// A waiting follower makes a transaction pool worse, so no option lifts
	// this refusal. Caught by
	// TestAdvisoryWait/RefusesATransactionPooledEndpointEvenWhenAllowed.
	if a.cfg.Wait && report.Kind == EndpointTransactionPooled {
		return nil, fmt.Errorf("lease: advisory %q: %w: %s. "+
			"A waiting follower holds a pooled server connection for the whole of each wait, so a few followers starve the pool that the work and the leader's own liveness probe need; "+
			"and a follower handed the lock-holding backend is granted the re-entrant lock at once, so two replicas can both be leader (issue #556). "+
			"AllowTransactionPooling does not lift this refusal. "+
			"Give the lease a DSN of its own that reaches Postgres directly or a PgBouncer database in pool_mode=session; "+
			"or use lease.Fenced, which is safe through transaction pooling; "+
			"to reproduce #556, turn Wait off",
			a.cfg.Name, ErrTransactionPooled, report)
	}
	// The refusal. Caught by TestAdvisory/RefusesATransactionPooledEndpoint.
	if report.Kind == EndpointTransactionPooled && !a.cfg.AllowTransactionPooling {
		return nil, fmt.Errorf("lease: advisory %q: %w: %s. "+
			"A session advisory lock there stays on a pooled backend that other clients reuse, so two replicas can both be leader (issue #556). "+
			"Give the lease a DSN of its own that reaches Postgres directly or a PgBouncer database in pool_mode=session, and keep the work on the pooled DSN; "+
			"or use lease.Fenced, which is safe through transaction pooling; "+
			"set AdvisoryConfig.AllowTransactionPooling only to reproduce #556",
			a.cfg.Name, ErrTransactionPooled, report)
	}
	if report.Kind != EndpointDirect {
		// Anything but a proven direct connection may be a pool that hides
		// its reuse; QueryExecModeExec needs nothing to survive between
		// transactions, where pgx's statement cache fails with 42P05.
		// Caught by TestAdvisoryTransactionPooling/TwoLeasesAreLeaderAtOnceWithPoolSizeOne.
		a.connCfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	if err := migrateAdvisory(ctx, a.connCfg, a.tokens); err != nil {
		return nil, fmt.Errorf("lease: advisory %q: create token table %s: %w", a.cfg.Name, a.cfg.TokenTable, err)
	}
	return a, nil
}

// connection is the lease connection's DSN and application_name.
func (c AdvisoryConfig) connection() (dsn, applicationName string) { return c.DSN, c.ApplicationName }

// newAdvisory builds an Advisory without touching the server.
func newAdvisory(cfg AdvisoryConfig) (*Advisory, error) {
	cfg, connCfg, err := prepare("advisory", cfg)
	if err != nil {
		return nil, err
	}
	if connCfg.ConnectTimeout == 0 || connCfg.ConnectTimeout > cfg.ProbeTimeout {
		connCfg.ConnectTimeout = cfg.ProbeTimeout
	}
	tokens, _ := quoteTable(cfg.TokenTable) // validated above
	a := &Advisory{
		cfg:      cfg,
		connCfg:  connCfg,
		log:      cfg.Logger.With("lease", cfg.Name, "holder", cfg.Holder),
		tokens:   tokens,
		grantSQL: fmt.Sprintf(advisoryGrantSQL, tokens),
		probe:    queryBackendPID,
	}
	a.connect = a.dial
	return a, nil
}

func migrateAdvisory(ctx context.Context, connCfg *pgx.ConnConfig, table string) error {
	c, err := pgx.ConnectConfig(ctx, connCfg.Copy())
	if err != nil {
		return err
	}
	defer closeConn(ctx, c)
	// Look first, so a role that may use the table but not create tables
	// (PUBLIC has no CREATE on schema public since Postgres 15) can start.
	var exists bool
	if err := c.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	return createTable(ctx, c, fmt.Sprintf(advisoryTokenTableDDL, table))
}

func (a *Advisory) dial(ctx context.Context) (conn, error) {
	c, err := pgx.ConnectConfig(ctx, a.connCfg.Copy())
	if err != nil || !a.cfg.Wait {
		return c, err
	}
	// A waiting follower's grant runs the instant the lock comes free, on
	// a backend that has not touched the token table yet: loading its
	// catalog entries and planning the grant cost that first grant about
	// 5ms on a fresh direct backend (failover after a graceful hand-over,
	// p50 8ms direct against 2ms through a session pool, whose server
	// connections were warm). EXPLAIN plans the grant without running it,
	// so that cost is paid here, at connect. It is an optimisation only:
	// its failure is logged and the connection used as it is.
	if _, err := c.Exec(ctx, "EXPLAIN "+a.grantSQL, a.cfg.Name); err != nil {
		a.log.DebugContext(ctx, "lease: could not plan the grant ahead", "err", err)
	}
	return c, nil
}

func queryBackendPID(ctx context.Context, c conn) (int32, error) {
	var pid int32
	err := c.QueryRow(ctx, advisoryProbeSQL).Scan(&pid)
	return pid, err
}

// BackendPID is the Postgres backend that took the lock, as the acquire
// statement reported it, or 0 while the lock is not held. The scenarios log
// it with each piece of leader work, which is how a report shows two
// leaders on one backend (#556).
func (a *Advisory) BackendPID() int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.held {
		return 0
	}
	return a.pid
}

// AdvisoryLock implements LockHolder: the lock's keys, Key1 and Key2.
func (a *Advisory) AdvisoryLock() AdvisoryLock {
	return AdvisoryLock{Key1: a.cfg.Key1, Key2: a.cfg.Key2}
}

// Endpoint is the report of the endpoint check NewAdvisory ran.
func (a *Advisory) Endpoint() EndpointReport { return a.endpoint }

// TryAcquire implements Lease. While the lock is held it probes the
// session that took it; a closed connection, a failed or timed-out probe,
// or a different backend PID resets the lease (closing the connection,
// which frees the lock) and tries a fresh acquire. Any other error resets
// the lease and reports Faulted. It never waits for the lock: a follower
// asks once, with pg_try_advisory_lock.
func (a *Advisory) TryAcquire(ctx context.Context) (Result, error) {
	return a.poll(ctx, false)
}

// poll is TryAcquire, or Acquire's waiting call when wait is set.
func (a *Advisory) poll(ctx context.Context, wait bool) (Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if a.closed {
		return Result{Status: Faulted, Err: ErrClosed}, nil
	}
	if a.held {
		ok, err := a.stillHeld(ctx)
		if err != nil {
			return Result{}, err
		}
		if ok {
			return Result{Status: Leader, Term: a.term}, nil
		}
	}
	return a.acquire(ctx, wait)
}

// stillHeld probes the session that took the lock. false means the lease
// was reset and a fresh acquire should follow; an error is ctx's.
func (a *Advisory) stillHeld(ctx context.Context) (bool, error) {
	// The probe timeout. Caught by TestAdvisoryMock/ProbeTimeoutResetsAndReacquires.
	pctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
	pid, err := a.probe(pctx, a.conn)
	cancel()
	if ctx.Err() != nil {
		// The connection may be mid-statement; it cannot be trusted.
		a.reset(ctx)
		return false, ctx.Err()
	}
	// The session-liveness check. Caught by
	// TestAdvisory/OldLeaderIsFollowerAfterItsBackendIsTerminated/Unguarded.
	if err != nil {
		a.log.WarnContext(ctx, "lease: liveness probe failed; resetting and acquiring afresh", "backend_pid", a.pid, "token", a.term.Token, "err", err)
		a.reset(ctx)
		return false, nil
	}
	// The PID affinity guard. Caught by TestAdvisory/ReconnectsOnPIDMismatch;
	// DisablePIDGuard by TestAdvisory/UnguardedIgnoresAPIDMismatch.
	if !a.cfg.DisablePIDGuard && pid != a.pid {
		a.log.WarnContext(ctx, "lease: backend PID changed since the lock was taken; resetting and acquiring afresh", "lock_pid", a.pid, "probe_pid", pid, "token", a.term.Token)
		a.reset(ctx)
		return false, nil
	}
	return true, nil
}

// acquire connects if needed, tries the lock (or, with wait, waits for it)
// and, when it is granted, takes a fencing token.
func (a *Advisory) acquire(ctx context.Context, wait bool) (Result, error) {
	if connClosed(a.conn) {
		a.reset(ctx)
	}
	if a.conn == nil {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
		c, err := a.connect(cctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			return a.fault(ctx, "connect", err), nil
		}
		a.conn = c
	}
	var (
		locked bool
		pid    int32
		err    error
		step   = "try advisory lock"
	)
	if wait {
		step = "wait for advisory lock"
		locked, pid, err = a.waitLock(ctx)
	} else {
		qctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
		// One statement, so the PID recorded is the PID of the backend
		// that took the lock.
		err = a.conn.QueryRow(qctx, advisoryAcquireSQL, a.cfg.Key1, a.cfg.Key2).Scan(&locked, &pid)
		cancel()
	}
	if err != nil {
		// Cancellation is the caller's, not a fault. Caught by
		// TestAdvisoryMock/CancellationDuringAcquirePassesThrough.
		if ctx.Err() != nil {
			a.reset(ctx)
			return Result{}, ctx.Err()
		}
		return a.fault(ctx, step, err), nil
	}
	if !locked {
		return Result{Status: Follower}, nil
	}
	qctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
	defer cancel()
	var token int64
	if err := a.conn.QueryRow(qctx, a.grantSQL, a.cfg.Name).Scan(&token); err != nil {
		// fault resets, and closing the connection frees the lock just
		// taken. Caught by TestAdvisoryMock/TokenGrantErrorIsFaultedAndFreesTheLock.
		if ctx.Err() != nil {
			a.reset(ctx)
			return Result{}, ctx.Err()
		}
		return a.fault(ctx, "grant fencing token", err), nil
	}
	a.held, a.pid = true, pid
	a.term = Term{Name: a.cfg.Name, Holder: a.cfg.Holder, Token: token}
	a.log.InfoContext(ctx, "lease: acquired", "backend_pid", pid, "token", token)
	return Result{Status: Leader, Term: a.term}, nil
}

// fault resets the lease and reports Faulted: the lock could not be reached
// at all, which is not the healthy Follower state. Faulted rather than
// Follower is caught by
// TestAdvisory/FaultedNotFollowerWhenTheServerIsUnreachable; the reset by
// TestAdvisoryMock/UnusualAcquireErrorIsFaultedAndResets.
func (a *Advisory) fault(ctx context.Context, what string, err error) Result {
	a.log.WarnContext(ctx, "lease: faulted", "step", what, "err", err)
	a.reset(ctx)
	return Result{Status: Faulted, Err: fmt.Errorf("lease %q: %s: %w", a.cfg.Name, what, err)}
}

// reset closes the connection, which ends the session and with it the lock
// (on a direct or session-pinned endpoint), and forgets the term. Through a
// transaction pool the close ends only the client's connection: the lock
// stays on the pooled backend, so no clean hand-over is logged there.
func (a *Advisory) reset(ctx context.Context) {
	// Caught by TestAdvisoryRelease/AResetThroughTransactionPoolingIsNoCleanHandOver.
	if a.held && a.endpoint.Kind == EndpointTransactionPooled {
		a.log.WarnContext(ctx, "lease: gave up leadership by closing its connection, but the lock may remain held on a pooled server connection",
			"backend_pid", a.pid, "token", a.term.Token)
	} else if a.held {
		a.log.InfoContext(ctx, "lease: gave up leadership", "backend_pid", a.pid, "token", a.term.Token)
	}
	closeConn(ctx, a.conn)
	a.dropped.add(a.conn)
	a.conn, a.held, a.pid, a.term = nil, false, 0, Term{}
}

// Fence implements Fencer: inside the caller's transaction tx, on the
// database that holds the token table, it returns an error wrapping
// ErrStaleToken unless term is the newest grant of this lease. The row
// lock it takes makes the check hold until tx ends: a grant that comes
// later waits for tx.
func (a *Advisory) Fence(ctx context.Context, tx pgx.Tx, term Term) error {
	return fence(ctx, tx, a.tokens, a.cfg.Name, term, false)
}
