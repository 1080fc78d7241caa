package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestFencedMock covers, with a scripted conn in place of a server, what a
// real server cannot show on demand: how long a statement may take before
// the lease gives up on it, and which transitions are logged. Everything
// else is tested against real Postgres in TestFenced.
func TestFencedMock(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).

	// setup returns a Fenced (holder "m", lease "doublerun") whose one
	// connection is the returned script, and the messages it logs.
	setup := func(t *testing.T, ttl, margin time.Duration) (*Fenced, *scriptedConn, *messages) {
		t.Helper()
		logged := &messages{}
		f, err := newFenced(FencedConfig{DSN: "postgres://mock@localhost/mock", Holder: "m", TTL: ttl, Margin: margin, Logger: slog.New(logged)})
		require.NoError(t, err)
		c := &scriptedConn{}
		f.connect = func(context.Context) (conn, error) { return c, nil }
		t.Cleanup(func() { require.NoError(t, c.met()) })
		return f, c, logged
	}
	const name, holder = "doublerun", "m"
	ms := func(d time.Duration) int64 { return d.Milliseconds() }

	// The statement timeout is the trust window, TTL - Margin: an answer
	// later than that could not be led on anyway.
	t.Run("GivesUpOnAPollAfterTTLMinusMargin", func(t *testing.T) {
		t.Parallel()
		const ttl, margin = 600 * time.Millisecond, 300 * time.Millisecond
		f, c, _ := setup(t, ttl, margin)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(1)).WillDelayFor(time.Hour)
		start := time.Now()
		res := mustTry(t, testCtx(t), f)
		waited := time.Since(start)
		require.Equal(t, Faulted, res.Status)
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		require.GreaterOrEqual(t, waited, ttl-margin)
		require.Less(t, waited, ttl, "the poll waited past TTL - Margin")
	})

	t.Run("GivesUpOnAReleaseAfterTTLMinusMargin", func(t *testing.T) {
		t.Parallel()
		const ttl, margin = 600 * time.Millisecond, 300 * time.Millisecond
		f, c, _ := setup(t, ttl, margin)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(1))
		c.ExpectQuery(f.release).WithArgs(name, holder, int64(1), fencedChannel).WillDelayFor(time.Hour)
		ctx := testCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, f).Status)
		start := time.Now()
		err := f.Release(ctx)
		waited := time.Since(start)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "expires by itself after the TTL")
		require.Less(t, waited, ttl, "the release waited past TTL - Margin")
	})

	// The trust deadline is start + TTL - Margin on the local clock,
	// whatever the server says: TestFenced/TrustsItsLeaseOnlyUntilTTLMinusMargin
	// shows the same against Postgres.
	t.Run("TrustsAnAnswerOnlyBeforeTTLMinusMargin", func(t *testing.T) {
		t.Parallel()
		const ttl, margin = 10 * time.Second, 2 * time.Second
		t0 := time.Now()
		for _, tt := range []struct {
			name     string
			answered time.Duration // after the poll was sent, on the local clock
			want     Status
		}{
			{"BeforeTheDeadline", ttl - margin - time.Millisecond, Leader},
			{"AtTheDeadline", ttl - margin, Follower},
			{"WithinTheTTLButPastTheMargin", ttl - margin/2, Follower},
			{"AfterTheTTL", ttl + time.Second, Follower},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				f, c, _ := setup(t, ttl, margin)
				c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(5))
				f.now = fakeClock(t0, t0.Add(tt.answered))
				ctx := testCtx(t)
				res := mustTry(t, ctx, f)
				require.Equal(t, tt.want, res.Status)
				if tt.want == Leader {
					require.Equal(t, t0.Add(ttl-margin), f.Deadline())
					require.Equal(t, Term{Name: name, Holder: holder, Token: 5}, res.Term)
					return
				}
				require.Zero(t, f.Deadline())
				require.Zero(t, res.Term)
				// The term granted is kept, so a prompt poll renews it.
				c.ExpectQuery(f.renew).WithArgs(name, holder, int64(5), ms(ttl)).WillReturnRow(int64(5))
				f.now = fakeClock(t0, t0)
				res = mustTry(t, ctx, f)
				require.Equal(t, Leader, res.Status)
				require.Equal(t, int64(5), res.Term.Token)
			})
		}
	})

	// A fault drops the connection but keeps the term; a release that then
	// cannot connect leaves the term to expire.
	t.Run("ReleaseThatCannotConnectLeavesTheTermToExpire", func(t *testing.T) {
		t.Parallel()
		const ttl = time.Second
		f, c, _ := setup(t, ttl, 0)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(1))
		c.ExpectQuery(f.renew).WithArgs(name, holder, int64(1), ms(ttl)).WillReturnError(io.ErrUnexpectedEOF)
		ctx := testCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, f).Status)
		require.Equal(t, Faulted, mustTry(t, ctx, f).Status)
		require.True(t, c.isClosed(), "the fault dropped the connection")

		f.connect = func(context.Context) (conn, error) { return nil, errors.New("connection refused") }
		err := f.Release(ctx)
		require.ErrorContains(t, err, "release token 1: connect: connection refused; the term expires by itself after the TTL")
		require.Zero(t, f.term, "the term is forgotten all the same")
	})

	// Each transition is logged once: a renewal is not a new acquisition,
	// and a follower that never led has nothing to lose.
	t.Run("LogsAcquiringAndLosingOnce", func(t *testing.T) {
		t.Parallel()
		const ttl = time.Second
		f, c, logged := setup(t, ttl, 0)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnError(pgx.ErrNoRows)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(3))
		c.ExpectQuery(f.renew).WithArgs(name, holder, int64(3), ms(ttl)).WillReturnRow(int64(3))
		c.ExpectQuery(f.renew).WithArgs(name, holder, int64(3), ms(ttl)).WillReturnRow(int64(3))
		c.ExpectQuery(f.renew).WithArgs(name, holder, int64(3), ms(ttl)).WillReturnError(pgx.ErrNoRows)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnError(pgx.ErrNoRows)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnError(pgx.ErrNoRows)

		ctx := testCtx(t)
		for _, want := range []Status{Follower, Leader, Leader, Leader, Follower, Follower} {
			require.Equal(t, want, mustTry(t, ctx, f).Status)
		}
		require.Equal(t, []string{"lease: acquired token=3", "lease: lost leadership token=3"}, logged.list())
	})
}

// messages is a slog.Handler that keeps each record as "message key=value
// ...", without the attributes every record of a lease carries.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messages) WithGroup(string) slog.Handler            { return m }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, line)
	return nil
}

func (m *messages) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.msgs...)
}
