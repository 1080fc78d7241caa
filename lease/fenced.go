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

// FencedConfig configures a Fenced lease. Zero values take the defaults
// noted next to each field.
type FencedConfig struct {
	// DSN reaches the database holding Table; required. Any topology works,
	// transaction pooling included: every statement stands alone.
	DSN string
	// Name is the lease's row in Table and Term.Name; default "doublerun".
	Name string
	// Holder identifies this replica; default hostname-pid. A term is
	// renewed only by the exact (Holder, Token) it was granted to.
	Holder string
	// Table is the lease table MigrateFenced created, optionally
	// schema-qualified; default "doublerun_leases".
	Table string
	// TTL is how long a grant or renewal lasts on the server's clock;
	// default 15s. Poll well within it (River polls at TTL/3).
	TTL time.Duration
	// Margin is subtracted from TTL for the holder's own trust deadline,
	// to absorb clock-rate drift and scheduling delay; default TTL/5. It
	// must be smaller than TTL.
	Margin time.Duration
	// ExecMode is the pgx query mode of the lease connection; default
	// pgx.QueryExecModeExec, which is safe through any pool (see
	// pgbouncer.ExecMode). The lease sends one statement per poll, so a
	// statement cache buys nothing.
	ExecMode pgx.QueryExecMode
	// ApplicationName is the lease connection's application_name; default
	// "doublerun-fenced-lease".
	ApplicationName string
	// Wait makes Acquire wait, for at most WaitTimeout, for the lease to
	// come free instead of asking once. A follower LISTENs for the
	// notification every Release sends, and otherwise wakes when the
	// holder's term expires (a holder that died sends nothing). NewFenced
	// checks the endpoint with CheckEndpoint and listens only on a proven
	// direct one: through a transaction pool LISTEN has no session, and
	// through PgBouncer's session pooling a notification can desynchronise
	// a server connection being reset (see Fenced.Waits). Elsewhere
	// Acquire does not wait and is TryAcquire, and the caller's poll is
	// the fallback. Without Wait, Acquire is TryAcquire. TryAcquire never
	// waits.
	Wait bool
	// WaitTimeout bounds one wait of Acquire; default 1s, at least 1ms.
	// Keep it below the caller's bound on one lease call (the worker's
	// LeaseTimeout).
	WaitTimeout time.Duration
	// ConnectTimeout bounds opening the lease connection; default 5s.
	// Connecting is not part of a poll's answer: TTL - Margin is counted
	// from when the statement is sent, after the connection is ready, so
	// a replica whose connections take longer than TTL - Margin to open
	// (a loaded host, slow authentication) still becomes leader.
	ConnectTimeout time.Duration
	// Epoch puts the server's timeline in every token's high 32 bits, so
	// that tokens keep rising across a promotion that lost the last grants
	// (an asynchronous standby promoted after its primary died). Without
	// it such a promotion can grant a token again that a live old leader
	// still holds, and both pass the fence. A grant then reads the name of
	// the WAL file the server writes, whose first 8 hex digits are the
	// timeline; a server that cannot name it (pg_walfile_name) fails every
	// grant. Tokens are above 2^32 with it. See "Fencing across a
	// failover" in the package documentation.
	Epoch bool
	// Logger receives state changes and faults; default discards.
	Logger *slog.Logger
}

const (
	defaultFencedTable    = "doublerun_leases"
	defaultFencedAppName  = "doublerun-fenced-lease"
	defaultFencedTTL      = 15 * time.Second
	defaultConnectTimeout = 5 * time.Second
)

func (c FencedConfig) withDefaults() FencedConfig {
	c.Name = cmp.Or(c.Name, defaultName)
	c.Holder = cmp.Or(c.Holder, defaultHolder())
	c.Table = cmp.Or(c.Table, defaultFencedTable)
	c.TTL = cmp.Or(c.TTL, defaultFencedTTL)
	c.Margin = cmp.Or(c.Margin, c.TTL/5)
	c.ExecMode = cmp.Or(c.ExecMode, pgx.QueryExecModeExec)
	c.ApplicationName = cmp.Or(c.ApplicationName, defaultFencedAppName)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, defaultWaitTimeout)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, defaultConnectTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c FencedConfig) validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("DSN is empty"))
	}
	if c.TTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("TTL %s is below 1ms; leave it 0 for 15s", c.TTL))
	}
	if c.Margin < 0 || c.Margin >= c.TTL {
		errs = append(errs, fmt.Errorf("Margin %s must be at least 0 and below TTL %s; leave it 0 for TTL/5", c.Margin, c.TTL))
	}
	if _, err := quoteTable(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("Table: %w", err))
	}
	if err := validateWaitTimeout(c.WaitTimeout); err != nil {
		errs = append(errs, err)
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("ConnectTimeout %s is negative; leave it 0 for %s", c.ConnectTimeout, defaultConnectTimeout))
	}
	return errors.Join(errs...)
}

// Fenced is a table lease with a TTL and a fencing token, safe through
// PgBouncer transaction pooling: it keeps no session state, and each of
// its statements is one transaction of its own.
//
// A Leader result may be trusted until Deadline, at most TTL - Margin after
// the poll that produced it was sent, on the local monotonic clock; after
// that the replica must stop leader work unless a later TryAcquire renewed.
// Writes are made safe against a paused or partitioned old leader with
// Fence. With Wait, Acquire waits for a release's notification on a
// direct endpoint. Its methods are safe for concurrent use; calls
// are serialised.
type Fenced struct {
	cfg         FencedConfig
	connCfg     *pgx.ConnConfig
	log         *slog.Logger
	table       string // quoted
	renew       string
	grant       string
	release     string
	termLeftSQL string

	// connect opens the lease connection; now reads the local monotonic
	// clock. In-package tests replace them.
	connect func(ctx context.Context) (conn, error)
	now     func() time.Time

	mu       sync.Mutex
	conn     conn
	term     Term
	deadline time.Time
	closed   bool

	// endpoint is what CheckEndpoint said when Wait is set; wakes is
	// whether Acquire waits for notifications there, and listening whether
	// the current connection has run LISTEN.
	endpoint  EndpointReport
	wakes     bool
	listening bool

	// dropped are the connections resetConn closed; Close waits for
	// their cleanup (see cleanups).
	dropped cleanups
}

var (
	_ Lease    = (*Fenced)(nil)
	_ Acquirer = (*Fenced)(nil)
	_ Fencer   = (*Fenced)(nil)
)

// NewFenced validates cfg, connects, and checks that the lease table
// exists, so that a missing migration fails at start with a hint rather
// than at every poll. With cfg.Wait it first checks the endpoint with
// CheckEndpoint, to decide whether Acquire can wait for notifications.
func NewFenced(ctx context.Context, cfg FencedConfig) (*Fenced, error) {
	f, err := newFenced(cfg)
	if err != nil {
		return nil, err
	}
	if f.cfg.Wait {
		if err := f.checkEndpoint(ctx); err != nil {
			return nil, err
		}
	}
	if err := f.ensureConn(ctx); err != nil {
		return nil, fmt.Errorf("lease: fenced %q: %w", f.cfg.Name, err)
	}
	if _, err := f.conn.Exec(ctx, fmt.Sprintf(fencedExistsSQL, f.table)); err != nil {
		f.resetConn(ctx)
		return nil, fmt.Errorf("lease: fenced %q: %w", f.cfg.Name, hintMigrate(err, f.cfg.Table))
	}
	return f, nil
}

// connection is the lease connection's DSN and application_name.
func (c FencedConfig) connection() (dsn, applicationName string) { return c.DSN, c.ApplicationName }

func newFenced(cfg FencedConfig) (*Fenced, error) {
	cfg, connCfg, err := prepare("fenced", cfg)
	if err != nil {
		return nil, err
	}
	connCfg.DefaultQueryExecMode = cfg.ExecMode
	table, _ := quoteTable(cfg.Table) // validated above
	grant, renew := fencedGrantSQL, fencedRenewSQL
	if cfg.Epoch {
		grant, renew = fencedEpochGrantSQL, fencedEpochRenewSQL
	}
	f := &Fenced{
		cfg:         cfg,
		connCfg:     connCfg,
		log:         cfg.Logger.With("lease", cfg.Name, "holder", cfg.Holder),
		table:       table,
		renew:       fmt.Sprintf(renew, table),
		grant:       fmt.Sprintf(grant, table),
		release:     fmt.Sprintf(fencedReleaseSQL, table),
		termLeftSQL: fmt.Sprintf(fencedTermLeftSQL, table),
		now:         time.Now,
	}
	f.connect = func(ctx context.Context) (conn, error) { return pgx.ConnectConfig(ctx, f.connCfg.Copy()) }
	return f, nil
}

// TryAcquire implements Lease. A replica that holds a term renews exactly
// that term; one that holds none, or lost it, takes the lease if it is
// free or expired, which raises the token. Leader is reported only when
// the answer arrived before the trust deadline. A failure to reach the
// table is Faulted; the term is kept so the next poll can renew it.
func (f *Fenced) TryAcquire(ctx context.Context) (Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tryLocked(ctx)
}

// tryLocked is one renewal or grant; f.mu is held.
func (f *Fenced) tryLocked(ctx context.Context) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if f.closed {
		return Result{Status: Faulted, Err: ErrClosed}, nil
	}
	// Connect first, outside the answer's budget: a connection that takes
	// longer than TTL - Margin to open would otherwise fail every poll,
	// and the replica would never lead again. Caught by
	// TestFencedConnect/SlowConnectStillLeads.
	if err := f.ensureConn(ctx); err != nil {
		return f.failed(ctx, err)
	}
	// Read before the statement is sent. The server computes expires_at no
	// earlier than this instant, so start + TTL - Margin never overstates
	// the lease, however long the answer takes.
	start := f.now()
	f.deadline = time.Time{}
	// An answer later than TTL - Margin could not be trusted anyway.
	sctx, cancel := context.WithTimeout(ctx, f.cfg.TTL-f.cfg.Margin)
	defer cancel()
	token, granted, err := f.renewOrGrant(sctx)
	if err != nil {
		return f.failed(ctx, err)
	}
	if !granted {
		if f.term.Token != 0 {
			f.log.InfoContext(ctx, "lease: lost leadership", "token", f.term.Token)
		}
		f.term = Term{}
		return Result{Status: Follower}, nil
	}
	if token != f.term.Token {
		f.log.InfoContext(ctx, "lease: acquired", "token", token)
	}
	f.term = Term{Name: f.cfg.Name, Holder: f.cfg.Holder, Token: token}
	// The local trust deadline, margin included. Caught by
	// TestFenced/TrustsItsLeaseOnlyUntilTTLMinusMargin. The term is kept,
	// so the next poll renews it rather than waiting out the TTL.
	deadline := start.Add(f.cfg.TTL - f.cfg.Margin)
	if answered := f.now(); !answered.Before(deadline) {
		f.log.WarnContext(ctx, "lease: answer came after the trust deadline; not leading on it", "token", token, "waited", answered.Sub(start))
		return Result{Status: Follower}, nil
	}
	f.deadline = deadline
	return Result{Status: Leader, Term: f.term}, nil
}

// renewOrGrant renews the term held, or else tries a grant. granted is
// false when another replica holds an unexpired term.
func (f *Fenced) renewOrGrant(ctx context.Context) (token int64, granted bool, err error) {
	ttl := f.cfg.TTL.Milliseconds()
	if f.term.Token != 0 {
		err := f.conn.QueryRow(ctx, f.renew, f.cfg.Name, f.cfg.Holder, f.term.Token, ttl).Scan(&token)
		if err == nil {
			return token, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, false, fmt.Errorf("renew token %d: %w", f.term.Token, err)
		}
	}
	err = f.conn.QueryRow(ctx, f.grant, f.cfg.Name, f.cfg.Holder, ttl).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("grant: %w", err)
	}
	return token, true, nil
}

// failed ends a poll or a wait that err interrupted: cancellation passes
// through, anything else is Faulted. Either way the connection is
// dropped, since it may be mid-statement; the term is kept, so the next
// poll can renew it.
func (f *Fenced) failed(ctx context.Context, err error) (Result, error) {
	if ctx.Err() != nil {
		f.resetConn(ctx)
		return Result{}, ctx.Err()
	}
	// The term is kept. Caught by
	// TestFenced/RenewsItsTermAfterItsBackendIsKilled.
	f.log.WarnContext(ctx, "lease: faulted", "token", f.term.Token, "err", err)
	f.resetConn(ctx)
	return Result{Status: Faulted, Err: fmt.Errorf("lease %q: %w", f.cfg.Name, hintMigrate(err, f.cfg.Table))}, nil
}

// ensureConn connects, within ConnectTimeout, if the lease has no
// connection.
func (f *Fenced) ensureConn(ctx context.Context) error {
	// pgx closes a connection whose statement a context ended mid-answer,
	// as the end of Acquire's bound can end the question how long the
	// term has left: the next statement starts on a fresh one rather than
	// failing on it. Caught by TestFencedConnect/ClosedConnectionIsReplaced.
	if connClosed(f.conn) {
		f.resetConn(ctx)
	}
	if f.conn != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ConnectTimeout)
	defer cancel()
	c, err := f.connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	f.conn = c
	return nil
}

// resetConn drops the connection after an error, so the next poll starts
// on a fresh one. The term stays: it is the server's to expire.
func (f *Fenced) resetConn(ctx context.Context) {
	closeConn(ctx, f.conn)
	f.dropped.add(f.conn)
	f.conn, f.listening = nil, false
}

// Deadline is the local monotonic instant until which the last Leader
// result may be trusted, or the zero time when the last TryAcquire did not
// report Leader. Leader work must stop by then unless a later TryAcquire
// reported Leader again.
func (f *Fenced) Deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline
}

// Release implements Lease: it expires this replica's exact term at once,
// so any replica's next poll takes the lease with a higher token, and in
// the same statement notifies the followers waiting in Acquire, which take
// it at once. If the statement fails the term is forgotten anyway and
// expires after the TTL.
func (f *Fenced) Release(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.releaseLocked(ctx)
}

func (f *Fenced) releaseLocked(ctx context.Context) error {
	term := f.term
	f.term, f.deadline = Term{}, time.Time{}
	if term.Token == 0 {
		return nil
	}
	if err := f.ensureConn(ctx); err != nil {
		return fmt.Errorf("lease %q: release token %d: %w; the term expires by itself after the TTL", f.cfg.Name, term.Token, err)
	}
	sctx, cancel := context.WithTimeout(ctx, f.cfg.TTL-f.cfg.Margin)
	defer cancel()
	if _, err := f.conn.Exec(sctx, f.release, f.cfg.Name, f.cfg.Holder, term.Token, fencedChannel); err != nil {
		f.resetConn(ctx)
		return fmt.Errorf("lease %q: release token %d: %w; the term expires by itself after the TTL", f.cfg.Name, term.Token, err)
	}
	f.log.InfoContext(ctx, "lease: released", "token", term.Token)
	return nil
}

// Close implements Lease: it releases and closes the connection;
// TryAcquire reports Faulted with ErrClosed afterwards. It is idempotent.
func (f *Fenced) Close(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Caught by TestFenced/ClosedLeaseIsFaultedAndHandsOver.
	err := f.releaseLocked(ctx)
	f.resetConn(ctx)
	f.dropped.wait(ctx)
	f.closed = true
	return err
}

// Fence implements Fencer: inside the caller's transaction tx, on the
// database that holds the lease table, it returns an error wrapping
// ErrStaleToken unless term is the newest grant of this lease. The row
// lock it takes holds off the next grant until tx ends, so a write that
// passed the fence commits before any newer leader exists. It does not
// check expiry: a term that expired but was not granted again is still
// the newest, and its writes are still safe.
//
// With Epoch it also refuses a term granted on an earlier timeline than
// the server's, even while its token is the newest: the term's holder
// trusted it across a promotion that may have lost what came after it,
// and writes again once its next renewal has moved the term to the
// server's timeline.
func (f *Fenced) Fence(ctx context.Context, tx pgx.Tx, term Term) error {
	return fence(ctx, tx, f.table, f.cfg.Name, term, f.cfg.Epoch)
}
