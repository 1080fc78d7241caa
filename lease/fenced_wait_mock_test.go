package lease

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// scriptedListener is a scripted conn that can also wait for
// notifications, as *pgx.Conn does: the test sends them on notes. Like
// pgx, it hands out a notification already received before it looks at
// ctx.
type scriptedListener struct {
	*scriptedConn
	notes chan *pgconn.Notification
}

func (l *scriptedListener) WaitForNotification(ctx context.Context) (*pgconn.Notification, error) {
	select {
	case n := <-l.notes:
		return n, nil
	default:
	}
	select {
	case n := <-l.notes:
		return n, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *scriptedListener) notify(payload string) {
	l.notes <- &pgconn.Notification{Channel: fencedChannel, Payload: payload}
}

// TestFencedWaitMock covers Fenced.Acquire's wait with a scripted conn:
// when it listens, what ends a wait, and what a wait reports.
// TestFencedWait shows the same against Postgres.
func TestFencedWaitMock(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).
	const (
		name, holder = "doublerun", "m"
		ttl          = time.Hour
	)
	listenSQL := "LISTEN " + pgx.Identifier{fencedChannel}.Sanitize()
	ms := ttl.Milliseconds()

	// setup returns a Fenced follower "m" that waits on its one scripted
	// connection for at most bound.
	setup := func(t *testing.T, bound time.Duration) (*Fenced, *scriptedListener) {
		t.Helper()
		f, err := newFenced(FencedConfig{DSN: "postgres://mock@localhost/mock", Holder: holder, TTL: ttl, Wait: true, WaitTimeout: bound, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		f.wakes = true
		l := &scriptedListener{scriptedConn: &scriptedConn{}, notes: make(chan *pgconn.Notification, 4)}
		dials := 0
		f.connect = func(context.Context) (conn, error) {
			dials++
			if dials > 1 {
				return nil, io.ErrUnexpectedEOF
			}
			return l, nil
		}
		t.Cleanup(func() { require.NoError(t, l.met()) })
		return f, l
	}
	expectHeld := func(f *Fenced, l *scriptedListener, left int64) {
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
		l.ExpectQuery(f.termLeftSQL).WithArgs(name).WillReturnRow(left)
	}

	t.Run("ReleaseOfThisLeaseWakesTheWait", func(t *testing.T) {
		t.Parallel()
		const bound = 10 * time.Second
		f, l := setup(t, bound)
		l.ExpectQuery(listenSQL)
		expectHeld(f, l, time.Minute.Milliseconds())
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnRow(int64(8))
		// Another lease's release first: it wakes nothing.
		l.notify("other")
		// start before the timer, so a goroutine delayed between the two
		// cannot make the wait look shorter than the 50ms it was.
		start := time.Now()
		time.AfterFunc(50*time.Millisecond, func() { l.notify(name) })

		res := mustAcquire(t, mockCtx(t), f)
		waited := time.Since(start)
		require.Equal(t, Leader, res.Status)
		require.Equal(t, int64(8), res.Term.Token)
		require.GreaterOrEqual(t, waited, 50*time.Millisecond, "woken by this lease's release, not the other's")
		require.Less(t, waited, bound/2, "woken by the release, not by the bound")
	})

	t.Run("WaitEndsWhenTheTermExpires", func(t *testing.T) {
		t.Parallel()
		const bound = 2 * time.Second
		f, l := setup(t, bound)
		l.ExpectQuery(listenSQL)
		expectHeld(f, l, 50)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnRow(int64(3))

		start := time.Now()
		res := mustAcquire(t, mockCtx(t), f)
		require.Equal(t, Leader, res.Status)
		waited := time.Since(start)
		require.GreaterOrEqual(t, waited, 50*time.Millisecond, "it waited for the term's expiry")
		require.Less(t, waited, bound/2)
	})

	// The wait's bound ends it as Follower: after one more try, and with
	// the connection kept. A lease never granted waits the whole bound.
	t.Run("WaitEndsAtItsBoundAsFollower", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name string
			held func(f *Fenced, l *scriptedListener)
		}{
			// 3 s left: long past the bound, short enough that a wait
			// without its bound fails fast.
			{"HeldElsewhere", func(f *Fenced, l *scriptedListener) { expectHeld(f, l, 3000) }},
			{"NeverGranted", func(f *Fenced, l *scriptedListener) {
				l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
				l.ExpectQuery(f.termLeftSQL).WithArgs(name).WillReturnError(pgx.ErrNoRows)
			}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				const bound = 100 * time.Millisecond
				f, l := setup(t, bound)
				l.ExpectQuery(listenSQL)
				tt.held(f, l)
				l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)

				start := time.Now()
				res, err := f.Acquire(mockCtx(t))
				require.NoError(t, err, "the lease's own bound ends the wait, not the caller's context")
				require.Equal(t, Result{Status: Follower}, res)
				waited := time.Since(start)
				require.GreaterOrEqual(t, waited, bound)
				require.Less(t, waited, bound+2*time.Second)
				require.False(t, l.isClosed(), "a wait that ran out keeps its connection")
			})
		}
	})

	// A connection listens once; a later call drops the notifications left
	// from before it, so a stale release wakes nothing.
	t.Run("ListensOnceAndDropsStaleNotifications", func(t *testing.T) {
		t.Parallel()
		const bound = 100 * time.Millisecond
		f, l := setup(t, bound)
		l.ExpectQuery(listenSQL)
		expectHeld(f, l, 3000)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
		expectHeld(f, l, 3000)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)

		ctx := mockCtx(t)
		require.Equal(t, Follower, mustAcquire(t, ctx, f).Status)
		l.notify(name)
		l.notify(name)
		start := time.Now()
		require.Equal(t, Follower, mustAcquire(t, ctx, f).Status)
		require.GreaterOrEqual(t, time.Since(start), bound, "the stale notifications did not end the wait")
		require.Empty(t, l.notes)
	})

	t.Run("HolderRenewsWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		f, l := setup(t, 10*time.Second)
		l.ExpectQuery(listenSQL)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnRow(int64(2))
		l.ExpectQuery(f.renew).WithArgs(name, holder, int64(2), ms).WillReturnRow(int64(2))

		ctx := mockCtx(t)
		first := mustAcquire(t, ctx, f)
		require.Equal(t, Leader, first.Status)
		require.Equal(t, first, mustAcquire(t, ctx, f))
	})

	t.Run("WithoutWakesAcquireIsTryAcquire", func(t *testing.T) {
		t.Parallel()
		f, l := setup(t, 10*time.Second)
		f.wakes = false
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
		require.Equal(t, Result{Status: Follower}, mustAcquire(t, mockCtx(t), f))
	})

	t.Run("CancelledWaitPassesThroughAndDropsTheConnection", func(t *testing.T) {
		t.Parallel()
		f, l := setup(t, 10*time.Second)
		l.ExpectQuery(listenSQL)
		expectHeld(f, l, time.Minute.Milliseconds())

		ctx, cancel := context.WithCancel(mockCtx(t))
		time.AfterFunc(50*time.Millisecond, cancel)
		res, err := f.Acquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
		require.True(t, l.isClosed())
	})

	// LISTEN is a statement like a poll's: an answer later than TTL -
	// Margin could not be led on anyway.
	t.Run("ListenGivesUpAfterTTLMinusMargin", func(t *testing.T) {
		t.Parallel()
		const ttl, margin = 600 * time.Millisecond, 300 * time.Millisecond
		f, l := setup(t, 10*time.Second)
		f.cfg.TTL, f.cfg.Margin = ttl, margin
		l.ExpectQuery(listenSQL).WillDelayFor(time.Hour)
		start := time.Now()
		res := mustAcquire(t, mockCtx(t), f)
		waited := time.Since(start)
		require.Equal(t, Faulted, res.Status)
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		require.GreaterOrEqual(t, waited, ttl-margin)
		require.Less(t, waited, ttl, "LISTEN waited past TTL - Margin")
	})

	t.Run("FailedListenIsFaulted", func(t *testing.T) {
		t.Parallel()
		f, l := setup(t, 10*time.Second)
		l.ExpectQuery(listenSQL).WillReturnError(io.ErrUnexpectedEOF)
		res := mustAcquire(t, mockCtx(t), f)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "listen: ")
		require.True(t, l.isClosed())
	})

	// The bound can end while the expiry is read: that is the end of the
	// wait, not a fault.
	t.Run("BoundEndingDuringTheExpiryReadIsFollower", func(t *testing.T) {
		t.Parallel()
		const bound = 100 * time.Millisecond
		f, l := setup(t, bound)
		l.ExpectQuery(listenSQL)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
		l.ExpectQuery(f.termLeftSQL).WithArgs(name).WillReturnRow(int64(3000)).WillDelayFor(time.Hour)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
		res, err := f.Acquire(mockCtx(t))
		require.NoError(t, err)
		require.Equal(t, Result{Status: Follower}, res)
	})

	t.Run("FailedExpiryReadIsFaulted", func(t *testing.T) {
		t.Parallel()
		f, l := setup(t, 10*time.Second)
		l.ExpectQuery(listenSQL)
		l.ExpectQuery(f.grant).WithArgs(name, holder, ms).WillReturnError(pgx.ErrNoRows)
		l.ExpectQuery(f.termLeftSQL).WithArgs(name).WillReturnError(io.ErrUnexpectedEOF)
		res := mustAcquire(t, mockCtx(t), f)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "read the term's expiry")
	})

	t.Run("ClosedLeaseIsFaulted", func(t *testing.T) {
		t.Parallel()
		f, _ := setup(t, 10*time.Second)
		ctx := mockCtx(t)
		require.NoError(t, f.Close(ctx))
		require.Equal(t, Result{Status: Faulted, Err: ErrClosed}, mustAcquire(t, ctx, f))
	})
}
