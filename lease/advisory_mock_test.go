package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestAdvisoryMock covers, with a scripted conn in place of a server, only
// the branches a real server cannot force on demand: a probe that times
// out, odd errors, and cancellation in mid-statement. Everything else is
// tested against real Postgres in TestAdvisory.
func TestAdvisoryMock(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).

	type testBundle struct {
		lease *Advisory
		conns []*scriptedConn
		dials int
	}
	// setup returns an Advisory whose n successive connections are the
	// returned scripts. Every script must be played out by the end.
	setup := func(t *testing.T, n int, probeTimeout time.Duration) *testBundle {
		t.Helper()
		a, err := newAdvisory(AdvisoryConfig{DSN: "postgres://mock@localhost/mock", Holder: "m", ProbeTimeout: probeTimeout, Logger: testLogger(t)})
		require.NoError(t, err)
		b := &testBundle{lease: a}
		for range n {
			b.conns = append(b.conns, &scriptedConn{})
		}
		a.connect = func(ctx context.Context) (conn, error) {
			if b.dials >= len(b.conns) {
				return nil, errors.New("test: no more connections")
			}
			b.dials++
			return b.conns[b.dials-1], nil
		}
		t.Cleanup(func() {
			for i, c := range b.conns {
				require.NoError(t, c.met(), "connection %d", i+1)
			}
		})
		return b
	}
	expectAcquire := func(c *scriptedConn, locked bool, pid int32) *scriptStep {
		return c.ExpectQuery(advisoryAcquireSQL).WithArgs(int32(271), int32(1)).WillReturnRow(locked, pid)
	}
	expectGrant := func(a *Advisory, c *scriptedConn, token int64) {
		c.ExpectQuery(a.grantSQL).WithArgs("doublerun").WillReturnRow(token)
	}
	expectProbe := func(c *scriptedConn, pid int32) *scriptStep {
		return c.ExpectQuery(advisoryProbeSQL).WillReturnRow(pid)
	}

	t.Run("ProbeTimeoutResetsAndReacquires", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, 100*time.Millisecond)
		c1, c2 := b.conns[0], b.conns[1]
		expectAcquire(c1, true, 42)
		expectGrant(b.lease, c1, 1)
		// A half-open socket: the probe would answer, correctly, but far
		// too late.
		expectProbe(c1, 42).WillDelayFor(3 * time.Second)
		expectAcquire(c2, true, 43)
		expectGrant(b.lease, c2, 2)

		ctx := mockCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, b.lease).Status)
		start := time.Now()
		res := mustTry(t, ctx, b.lease)
		require.Less(t, time.Since(start), 2*time.Second, "the probe must give up after ProbeTimeout")
		require.Equal(t, Leader, res.Status)
		require.Equal(t, int64(2), res.Term.Token, "a fresh acquire on a new connection")
		require.True(t, c1.isClosed(), "the timed-out connection is closed, which frees its lock")
		require.Equal(t, 2, b.dials)
	})

	t.Run("ProbeErrorResetsAndAcquiresAfresh", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, time.Second)
		c1, c2 := b.conns[0], b.conns[1]
		expectAcquire(c1, true, 42)
		expectGrant(b.lease, c1, 1)
		c1.ExpectQuery(advisoryProbeSQL).WillReturnError(io.ErrUnexpectedEOF)
		expectAcquire(c2, false, 43)

		ctx := mockCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, b.lease).Status)
		res := mustTry(t, ctx, b.lease)
		require.Equal(t, Follower, res.Status, "the lock is held elsewhere now: a healthy follower, not a fault")
		require.True(t, c1.isClosed())
	})

	t.Run("UnusualAcquireErrorIsFaultedAndResets", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, time.Second)
		c1, c2 := b.conns[0], b.conns[1]
		tooMany := &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}
		c1.ExpectQuery(advisoryAcquireSQL).WithArgs(int32(271), int32(1)).WillReturnError(tooMany)
		expectAcquire(c2, true, 43)
		expectGrant(b.lease, c2, 7)

		ctx := mockCtx(t)
		res := mustTry(t, ctx, b.lease)
		require.Equal(t, Faulted, res.Status)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, res.Err, &pgErr)
		require.Equal(t, "53300", pgErr.Code)
		require.True(t, c1.isClosed())

		res = mustTry(t, ctx, b.lease)
		require.Equal(t, Leader, res.Status, "the next poll starts on a new connection")
		require.Equal(t, 2, b.dials)
	})

	t.Run("TokenGrantErrorIsFaultedAndFreesTheLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, time.Second)
		c1 := b.conns[0]
		expectAcquire(c1, true, 42)
		c1.ExpectQuery(b.lease.grantSQL).WithArgs("doublerun").
			WillReturnError(&pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for table doublerun_lease_tokens"})

		res := mustTry(t, mockCtx(t), b.lease)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "grant fencing token")
		require.True(t, c1.isClosed(), "closing the connection is what frees the lock just taken")
		require.False(t, b.lease.held)
	})

	t.Run("ConnectErrorIsFaulted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0, time.Second)
		res := mustTry(t, mockCtx(t), b.lease)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "no more connections")
	})

	t.Run("CancellationDuringProbePassesThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, 10*time.Second)
		c1 := b.conns[0]
		expectAcquire(c1, true, 42)
		expectGrant(b.lease, c1, 1)
		expectProbe(c1, 42).WillDelayFor(10 * time.Second)

		ctx := mockCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, b.lease).Status)
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		res, err := b.lease.TryAcquire(cctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, res)
		require.True(t, c1.isClosed(), "a connection cancelled mid-statement is not trusted")
		require.False(t, b.lease.held)
	})

	// A server that never answers the wait: the client gives up after
	// WaitTimeout + ProbeTimeout, reports Faulted and resets.
	t.Run("WaitOnASilentServerIsFaultedAfterItsBound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, 300*time.Millisecond)
		b.lease.cfg.Wait, b.lease.cfg.WaitTimeout = true, 200*time.Millisecond
		c1 := b.conns[0]
		c1.ExpectQuery(advisoryWaitSQL).WithArgs(int32(271), int32(1), "200ms").WillReturnRow(nil, int32(42)).WillDelayFor(time.Hour)

		ctx, cancel := context.WithTimeout(mockCtx(t), 10*time.Second)
		defer cancel()
		start := time.Now()
		res, err := b.lease.Acquire(ctx)
		require.NoError(t, err, "the lease's own bound ends the wait, not the caller's context")
		require.Less(t, time.Since(start), 3*time.Second)
		require.Equal(t, Faulted, res.Status)
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		require.ErrorContains(t, res.Err, "wait for advisory lock")
		require.True(t, c1.isClosed(), "a connection left mid-statement is reset")
	})

	t.Run("CancellationDuringAcquirePassesThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, 10*time.Second)
		c1 := b.conns[0]
		expectAcquire(c1, true, 42).WillDelayFor(10 * time.Second)

		ctx, cancel := context.WithCancel(mockCtx(t))
		time.AfterFunc(50*time.Millisecond, cancel)
		res, err := b.lease.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
		require.True(t, c1.isClosed())
	})
	// The PID guard and its switch, as TestAdvisory/ReconnectsOnPIDMismatch
	// and TestAdvisory/UnguardedIgnoresAPIDMismatch show them on a server.
	t.Run("PIDMismatchResetsAndAcquiresAfresh", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, time.Second)
		c1, c2 := b.conns[0], b.conns[1]
		expectAcquire(c1, true, 42)
		expectGrant(b.lease, c1, 1)
		expectProbe(c1, 43)
		expectAcquire(c2, true, 44)
		expectGrant(b.lease, c2, 2)

		ctx := mockCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, b.lease).Status)
		require.Equal(t, int32(42), b.lease.BackendPID())
		res := mustTry(t, ctx, b.lease)
		require.Equal(t, Leader, res.Status)
		require.Equal(t, int64(2), res.Term.Token, "a fresh grant, not the old term")
		require.True(t, c1.isClosed(), "the connection of the old session is closed")
		require.Equal(t, int32(44), b.lease.BackendPID())
	})

	t.Run("UnguardedKeepsItsTermOnAPIDMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, time.Second)
		b.lease.cfg.DisablePIDGuard = true
		c1 := b.conns[0]
		expectAcquire(c1, true, 42)
		expectGrant(b.lease, c1, 1)
		expectProbe(c1, 43)

		ctx := mockCtx(t)
		first := mustTry(t, ctx, b.lease)
		require.Equal(t, Leader, first.Status)
		require.Equal(t, first, mustTry(t, ctx, b.lease))
		require.False(t, c1.isClosed())
	})

	t.Run("MatchingProbeKeepsTheTerm", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, time.Second)
		c1 := b.conns[0]
		expectAcquire(c1, true, 42)
		expectGrant(b.lease, c1, 1)
		expectProbe(c1, 42)
		expectProbe(c1, 42)

		ctx := mockCtx(t)
		first := mustTry(t, ctx, b.lease)
		require.Equal(t, Leader, first.Status)
		require.Equal(t, first, mustTry(t, ctx, b.lease))
		require.Equal(t, first, mustTry(t, ctx, b.lease))
		require.Equal(t, 1, b.dials)
	})

	t.Run("FollowerAsksAgainOnTheSameConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, time.Second)
		c1 := b.conns[0]
		expectAcquire(c1, false, 42)
		expectAcquire(c1, false, 42)

		ctx := mockCtx(t)
		for range 2 {
			res := mustTry(t, ctx, b.lease)
			require.Equal(t, Result{Status: Follower}, res)
		}
		require.Zero(t, b.lease.BackendPID(), "a follower holds no lock")
		require.Equal(t, 1, b.dials)
	})

	t.Run("CancelledCallRunsNoStatement", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0, time.Second)
		ctx, cancel := context.WithCancel(mockCtx(t))
		cancel()
		res, err := b.lease.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
		require.Zero(t, b.dials)
	})

	t.Run("CancellationDuringConnectPassesThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0, 10*time.Second)
		b.lease.connect = func(ctx context.Context) (conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		ctx, cancel := context.WithCancel(mockCtx(t))
		time.AfterFunc(50*time.Millisecond, cancel)
		res, err := b.lease.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
	})

	t.Run("CancellationDuringTheTokenGrantPassesThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, 10*time.Second)
		c1 := b.conns[0]
		expectAcquire(c1, true, 42)
		c1.ExpectQuery(b.lease.grantSQL).WithArgs("doublerun").WillReturnRow(int64(1)).WillDelayFor(10 * time.Second)

		ctx, cancel := context.WithCancel(mockCtx(t))
		time.AfterFunc(50*time.Millisecond, cancel)
		res, err := b.lease.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
		require.True(t, c1.isClosed(), "closing the connection frees the lock just taken")
		require.False(t, b.lease.held)
	})

	// A wait that lock_timeout ends is a follower; any other error of the
	// wait is a fault, and resets.
	t.Run("WaitEndedByLockTimeoutIsFollower", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2, time.Second)
		b.lease.cfg.Wait, b.lease.cfg.WaitTimeout = true, 200*time.Millisecond
		c1, c2 := b.conns[0], b.conns[1]
		c1.ExpectQuery(advisoryWaitSQL).WithArgs(int32(271), int32(1), "200ms").
			WillReturnError(&pgconn.PgError{Severity: "ERROR", Code: "55P03", Message: "canceling statement due to lock timeout"})
		c1.ExpectQuery(advisoryWaitSQL).WithArgs(int32(271), int32(1), "200ms").
			WillReturnError(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
		c2.ExpectQuery(advisoryWaitSQL).WithArgs(int32(271), int32(1), "200ms").WillReturnRow(nil, int32(43))
		expectGrant(b.lease, c2, 3)

		ctx := mockCtx(t)
		require.Equal(t, Result{Status: Follower}, mustAcquire(t, ctx, b.lease))
		require.False(t, c1.isClosed(), "a wait that ran out keeps its connection")
		res := mustAcquire(t, ctx, b.lease)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "wait for advisory lock")
		require.True(t, c1.isClosed())
		res = mustAcquire(t, ctx, b.lease)
		require.Equal(t, Leader, res.Status)
		require.Equal(t, int32(43), b.lease.BackendPID(), "the PID the wait statement read")
	})

	// A reset closes the connection. Only where that ends the session is
	// it a clean hand-over; TestAdvisoryRelease shows the same through a
	// real transaction pool.
	t.Run("ResetLogsACleanHandOverOnlyWhereClosingFreesTheLock", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name  string
			kind  EndpointKind
			clean bool
		}{{"Direct", EndpointDirect, true}, {"Pinned", EndpointPinned, true}, {"TransactionPooled", EndpointTransactionPooled, false}} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, 2, time.Second)
				logged := &messages{}
				b.lease.log = slog.New(logged)
				b.lease.endpoint = EndpointReport{Kind: tt.kind}
				c1, c2 := b.conns[0], b.conns[1]
				expectAcquire(c1, true, 42)
				expectGrant(b.lease, c1, 1)
				expectProbe(c1, 43)
				expectAcquire(c2, false, 44)

				ctx := mockCtx(t)
				require.Equal(t, Leader, mustTry(t, ctx, b.lease).Status)
				require.Equal(t, Follower, mustTry(t, ctx, b.lease).Status)
				clean := slices.Contains(logged.list(), "lease: gave up leadership backend_pid=42 token=1")
				pooled := slices.ContainsFunc(logged.list(), func(line string) bool {
					return strings.HasPrefix(line, "lease: gave up leadership by closing its connection, but the lock may remain held")
				})
				require.Equal(t, tt.clean, clean, "logged %q", logged.list())
				require.Equal(t, !tt.clean, pooled, "logged %q", logged.list())
			})
		}
	})

	// Release says whether the unlock freed the lock on the backend that
	// took it, as TestAdvisoryRelease shows through real pools.
	t.Run("ReleaseReportsWhatTheUnlockSaid", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name   string
			unlock func(*scriptStep)
			want   string // "" for a clean release
		}{
			{"FreedOnTheHoldersBackend", func(s *scriptStep) { s.WillReturnRow(true, int32(42)) }, ""},
			{"FreedNothing", func(s *scriptStep) { s.WillReturnRow(false, int32(42)) }, "returned false on backend 42"},
			{"RanOnAnotherBackend", func(s *scriptStep) { s.WillReturnRow(true, int32(7)) }, "ran on backend 7, but backend 42 took the lock"},
			{"Failed", func(s *scriptStep) { s.WillReturnError(io.ErrUnexpectedEOF) }, "on backend 42 failed"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, 1, time.Second)
				c1 := b.conns[0]
				expectAcquire(c1, true, 42)
				expectGrant(b.lease, c1, 1)
				tt.unlock(c1.ExpectQuery(advisoryReleaseSQL).WithArgs(int32(271), int32(1)))

				ctx := mockCtx(t)
				require.Equal(t, Leader, mustTry(t, ctx, b.lease).Status)
				err := b.lease.Release(ctx)
				if tt.want == "" {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, ErrUnlockUnconfirmed)
					require.ErrorContains(t, err, tt.want)
				}
				require.True(t, c1.isClosed(), "Release closes the connection either way")
				require.Zero(t, b.lease.BackendPID())
				require.NoError(t, b.lease.Release(ctx), "a lease that holds nothing has nothing to unlock")
			})
		}
	})
}
