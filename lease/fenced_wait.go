package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fencedChannel is the channel every Fenced release notifies, with the
// lease's name as the payload. A follower of another table's lease of the
// same name wakes for nothing, tries once and waits again.
const fencedChannel = "doublerun_lease_released"

// fencedTermLeftSQL is how long the current term has left, in whole
// milliseconds rounded up, on the server's clock; 0 once it has expired.
const fencedTermLeftSQL = `SELECT greatest(0, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint FROM %s WHERE name = $1`

// notifier is the part of *pgx.Conn that waits for a notification.
type notifier interface {
	WaitForNotification(ctx context.Context) (*pgconn.Notification, error)
}

// checkEndpoint decides whether Acquire can wait for notifications. It
// listens only on a proven direct endpoint:
//
//   - Through transaction pooling LISTEN has no session to live in.
//   - Through session pooling it does, but PgBouncer 1.18 mishandles a
//     notification that reaches a server connection it is resetting after
//     a listening client left: it takes the server for idle on the
//     NotificationResponse, before the DISCARD ALL has answered, and the
//     next client of that connection reads every answer one statement
//     late. Another lease could then read a row meant for an earlier
//     statement as a grant. BenchmarkFailover (package failover) hit it about once in 150
//     graceful hand-overs.
//
// Caught by TestFencedWait/ThroughPgBouncerAcquireDoesNotWait.
func (f *Fenced) checkEndpoint(ctx context.Context) error {
	report, err := CheckEndpoint(ctx, f.cfg.DSN)
	if err != nil {
		return fmt.Errorf("lease: fenced %q: %w", f.cfg.Name, err)
	}
	f.endpoint = report
	f.wakes = report.Kind == EndpointDirect
	f.log.InfoContext(ctx, "lease: endpoint checked", "endpoint", report.Endpoint, "kind", report.Kind.String(), "waits_for_release", f.wakes, "evidence", report.Evidence)
	return nil
}

// Endpoint is the report of the endpoint check NewFenced ran when Wait is
// set, or the zero report.
func (f *Fenced) Endpoint() EndpointReport { return f.endpoint }

// Waits reports whether Acquire waits for the lease to come free: Wait is
// set and the endpoint is proven direct. When it is false, Acquire is
// TryAcquire.
func (f *Fenced) Waits() bool { return f.wakes }

// Acquire implements Acquirer. Where the lease waits (see Waits), a
// replica that holds no term LISTENs, tries a grant, and if the lease is
// held elsewhere waits for at most WaitTimeout: a Release notifies it and
// it tries again at once; otherwise it tries again when the holder's term
// expires, as the server's clock counts it. It is Leader as soon as a try
// is granted, and Follower when the bound passes without a grant. A failed
// try or wait is Faulted (the term is kept, as in TryAcquire); the error
// is non-nil only when ctx ended, and the connection is dropped then. A
// holder renews and does not wait, and neither does a replica whose
// renewal answered after its trust deadline: its next call renews.
//
// Where the lease does not wait, Acquire is TryAcquire. Release and Close
// wait for an Acquire in progress; cancel its ctx to end a wait at once.
func (f *Fenced) Acquire(ctx context.Context) (Result, error) {
	if !f.wakes {
		return f.TryAcquire(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if f.closed {
		return Result{Status: Faulted, Err: ErrClosed}, nil
	}
	// The bound of the whole call. Caught by
	// TestFencedWait/FollowerWaitEndsAtItsBoundAsFollower.
	bound, cancel := context.WithTimeout(ctx, f.cfg.WaitTimeout)
	defer cancel()
	// Connect outside the listen's budget, as a poll does (tryLocked).
	if err := f.ensureConn(ctx); err != nil {
		return f.failed(ctx, err)
	}
	// Listen before the first try, so a release that commits after the try
	// has looked is queued for the wait rather than lost. Like a poll's
	// statement, it may take TTL - Margin.
	lctx, cancelListen := context.WithTimeout(ctx, f.cfg.TTL-f.cfg.Margin)
	err := f.listen(lctx)
	cancelListen()
	if err != nil {
		return f.failed(ctx, err)
	}
	for {
		res, err := f.tryLocked(ctx)
		if err != nil || res.Status != Follower || f.term.Token != 0 || bound.Err() != nil {
			return res, err
		}
		if err := f.waitForRelease(ctx, bound); err != nil {
			return f.failed(ctx, err)
		}
	}
}

// listen connects if needed, runs LISTEN once per connection, and drops
// the notifications left from before this call, so that each one counted
// as a wake-up was sent after the call began listening.
func (f *Fenced) listen(ctx context.Context) error {
	if err := f.ensureConn(ctx); err != nil {
		return err
	}
	n, ok := f.conn.(notifier)
	if !ok {
		return errors.New("the lease connection cannot wait for notifications")
	}
	if !f.listening {
		if _, err := f.conn.Exec(ctx, "LISTEN "+pgx.Identifier{fencedChannel}.Sanitize()); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		f.listening = true
		return nil
	}
	// A done context makes WaitForNotification return what pgx has
	// buffered, and then an error without reading the socket. ctx bounds
	// the loop all the same: it runs with f.mu held.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for ctx.Err() == nil {
		if got, _ := n.WaitForNotification(done); got == nil {
			return nil
		}
	}
	return ctx.Err()
}

// waitForRelease waits until this lease is released, the current term
// expires, or bound ends. It returns nil in all three cases; an error is a
// failed wait, or ctx ending.
func (f *Fenced) waitForRelease(ctx, bound context.Context) error {
	left, err := f.termLeft(bound)
	if err != nil {
		if bound.Err() != nil && ctx.Err() == nil {
			return nil // the bound ended the question: try once more
		}
		return err
	}
	// A holder that died sends nothing: its term expiring is the fallback.
	// Caught by TestFencedWait/FollowerWakesWhenTheTermExpires.
	wctx, cancel := context.WithTimeout(bound, left)
	defer cancel()
	for {
		got, err := f.conn.(notifier).WaitForNotification(wctx)
		switch {
		case err == nil && got.Payload == f.cfg.Name:
			return nil
		case err == nil:
			continue // another lease's release
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("wait for release: %w", err)
		}
	}
}

// termLeft is how long the current term has left on the server's clock,
// at least a millisecond so a wait never spins, and the whole bound when
// the lease has never been granted.
func (f *Fenced) termLeft(ctx context.Context) (time.Duration, error) {
	var ms int64
	err := f.conn.QueryRow(ctx, f.termLeftSQL, f.cfg.Name).Scan(&ms)
	if errors.Is(err, pgx.ErrNoRows) {
		return f.cfg.WaitTimeout, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the term's expiry: %w", err)
	}
	return max(time.Duration(ms)*time.Millisecond, time.Millisecond), nil
}
