package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrClosed is the Result.Err of TryAcquire on a lease that has been
// closed. It comes with Status Faulted: a closed lease leads nothing.
var ErrClosed = errors.New("lease: closed")

// Execer runs a statement. *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it;
// the migration functions take one so they run wherever the caller's own
// migrations run.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// conn is the part of *pgx.Conn a lease uses. It is an interface only so
// that in-package tests can put a fake in its place for the branches a
// real server cannot force (a probe that times out, odd errors,
// cancellation in mid-statement). It is small enough for pgxmock's
// PgxConnIface to satisfy, but pgxmock v4.9.0 does not build against pgx
// v5.12, so the tests use a scripted fake (scripted_conn_test.go).
type conn interface {
	Execer
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Close(ctx context.Context) error
}

// leaseConfig is what the config of every lease of this package has: its
// defaults, one check, and the DSN and application_name of the lease's
// own connection.
type leaseConfig[C any] interface {
	withDefaults() C
	validate() error
	connection() (dsn, applicationName string)
}

// prepare is how every lease of this package starts, River's rule: cfg
// with its defaults, then checked, and the configuration of the lease's
// own connection, parsed from its DSN and named by its application_name.
// kind names the lease in errors ("advisory", "fenced").
func prepare[C leaseConfig[C]](kind string, cfg C) (C, *pgx.ConnConfig, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return cfg, nil, fmt.Errorf("lease: %s config: %w", kind, err)
	}
	dsn, applicationName := cfg.connection()
	connCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return cfg, nil, fmt.Errorf("lease: %s config: parse DSN: %w", kind, err)
	}
	connCfg.RuntimeParams["application_name"] = applicationName
	return cfg, connCfg, nil
}

// defaultWaitTimeout is how long one Acquire of a waiting lease waits for
// the lease to come free when its config leaves WaitTimeout 0: short enough
// that a follower reports in every second (the worker stamps its heartbeat
// on each Follower result), long enough that a follower costs one
// statement a second instead of one a poll.
const defaultWaitTimeout = time.Second

// validateWaitTimeout checks a WaitTimeout: 0 takes the default, and a
// bound is at least a millisecond, the unit of lock_timeout (where 0 would
// mean no bound at all).
func validateWaitTimeout(d time.Duration) error {
	if d < 0 || (d > 0 && d < time.Millisecond) {
		return fmt.Errorf("WaitTimeout %s must be at least 1ms; leave it 0 for %s", d, defaultWaitTimeout)
	}
	return nil
}

// isLockTimeout reports whether err is lock_timeout ending a lock wait:
// SQLSTATE 55P03, lock_not_available.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// closeTimeout bounds closing a connection whose server may be gone. Close
// sends a Terminate message; a half-open socket must not stall a poll.
const closeTimeout = time.Second

// connClosed says whether pgx has closed c: it does so when a context ends
// a statement mid-answer, and every later statement on c fails.
func connClosed(c conn) bool {
	cc, ok := c.(interface{ IsClosed() bool })
	return ok && cc.IsClosed()
}

func closeConn(ctx context.Context, c conn) {
	if c == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = c.Close(cctx)
}

// cleanups remembers the connections a lease dropped whose cleanup may
// still be running, so that Close can wait for it.
//
// pgx drops a connection whose statement was cancelled or failed
// (pgconn's asyncClose) in a goroutine: it sends a cancel request on a
// connection of its own, then Terminate, then reads until the server
// hangs up. A process that exits as soon as Close returns cuts that
// cancel request short, and PgBouncer 1.18 in session pooling can crash
// on a cancel request whose client disconnects before it is forwarded
// ("bad client state: 0", pgbouncer/pgbouncer#801). A waiting follower
// stopped mid-wait did exactly that (chaos/FINDINGS.md, finding 12). Waiting
// in reset instead would add up to closeTimeout to a faulted poll behind
// a partition; Close is where the process is about to leave.
type cleanups struct {
	pending []chan struct{}
}

// add remembers c's cleanup if c is a pgx connection, and forgets the
// cleanups that have finished.
func (cl *cleanups) add(c conn) {
	pc, ok := c.(interface{ PgConn() *pgconn.PgConn })
	if !ok || pc.PgConn() == nil {
		return
	}
	cl.pending = slices.DeleteFunc(cl.pending, isDone)
	cl.pending = append(cl.pending, pc.PgConn().CleanupDone())
}

// wait waits until every remembered cleanup has finished, for at most
// closeTimeout, and forgets them. Caught by
// TestAdvisoryWait/CloseWaitsForTheCancelledWaitsCleanup.
func (cl *cleanups) wait(ctx context.Context) {
	if len(cl.pending) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	for _, done := range cl.pending {
		select {
		case <-done:
		case <-wctx.Done():
		}
	}
	cl.pending = nil
}

func isDone(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// defaultHolder is "hostname-pid": unique per replica on one host, and
// readable in the leases table and in logs.
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// quoteTable quotes a table name that may be schema-qualified
// ("schema.table").
func quoteTable(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("table name %q has more than one dot; use table or schema.table", name)
	}
	for _, p := range parts {
		if p == "" {
			return "", fmt.Errorf("table name %q has an empty part; use table or schema.table", name)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

// LostCreateRace reports whether err is how the loser of two replicas
// running the same CREATE TABLE IF NOT EXISTS at once fails: both pass the
// IF NOT EXISTS test, and one then fails on the catalog's unique index
// (23505), on the relation (42P07) or on the table's row type (42710, seen
// when two advisory replicas start together). The table exists either way,
// so migrations that run beside the lease's, such as worker.Migrate, treat
// it as success too.
func LostCreateRace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07" || pgErr.Code == "42710")
}

// createTable runs a CREATE TABLE IF NOT EXISTS; losing the race to a
// replica migrating at the same moment is success.
func createTable(ctx context.Context, db Execer, ddl string) error {
	if _, err := db.Exec(ctx, ddl); err != nil && !LostCreateRace(err) {
		return err
	}
	return nil
}

// fence checks, inside the caller's transaction tx, that term is the newest
// grant of lease name in table. table is quoted already.
//
// FOR KEY SHARE is enough and is deliberate. token is a key column (it is
// in the UNIQUE (name, token) constraint), so a grant, which changes it,
// needs a lock that conflicts with KEY SHARE and waits for this
// transaction to end: the write lands before the new grant or is refused.
// A renewal, which changes only expires_at, does not conflict, so an open
// fenced write never holds up its own leader's renewal. The lock is caught
// by TestFenced/FenceHoldsOffANewGrantUntilTheWriteCommits, its strength
// by TestFenced/FenceDoesNotHoldUpTheLeadersRenewal.
//
// With epoch (FencedConfig.Epoch) the same statement reads the first token
// of the server's timeline, and a term below it, granted on an earlier
// timeline, is stale too.
func fence(ctx context.Context, tx pgx.Tx, table, name string, term Term, epoch bool) error {
	// Caught by TestAdvisory/FenceRejectsAStaleTerm.
	if term.Name != name {
		return fmt.Errorf("lease: fence: term of lease %q checked against lease %q; fence with the lease that granted the term", term.Name, name)
	}
	// first stays 0 without epoch, and no token is below it.
	var newest, first int64
	cols, dst := "token", []any{&newest}
	if epoch {
		cols, dst = "token, "+epochFirstSQL, append(dst, &first)
	}
	err := tx.QueryRow(ctx, "SELECT "+cols+" FROM "+table+" WHERE name = $1 FOR KEY SHARE", name).Scan(dst...)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: lease %q has never been granted, term has token %d", ErrStaleToken, name, term.Token)
	}
	if err != nil {
		return fmt.Errorf("lease: fence %q: %w", name, err)
	}
	// Caught by TestFenced/PausedOldLeadersFencedWriteIsStale and
	// TestAdvisory/FenceRejectsAStaleTerm.
	if newest != term.Token {
		return fmt.Errorf("%w: lease %q term has token %d, newest granted is %d", ErrStaleToken, name, term.Token, newest)
	}
	// Caught by TestFencedEpochAcrossALossyFailover.
	if term.Token < first {
		return fmt.Errorf("%w: lease %q term has token %d, of a timeline before the server's (whose first token is %d): a promotion came after its grant; its holder's next renewal moves it", ErrStaleToken, name, term.Token, first)
	}
	return nil
}
