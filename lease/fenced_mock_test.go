package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
		res := mustTry(t, mockCtx(t), f)
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
		ctx := mockCtx(t)
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
				ctx := mockCtx(t)
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
		ctx := mockCtx(t)
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

		ctx := mockCtx(t)
		for _, want := range []Status{Follower, Leader, Leader, Leader, Follower, Follower} {
			require.Equal(t, want, mustTry(t, ctx, f).Status)
		}
		require.Equal(t, []string{"lease: acquired token=3", "lease: lost leadership token=3"}, logged.list())
	})
	t.Run("CancelledCallRunsNoStatement", func(t *testing.T) {
		t.Parallel()
		f, _, _ := setup(t, time.Second, 0)
		ctx, cancel := context.WithCancel(mockCtx(t))
		cancel()
		res, err := f.TryAcquire(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
	})

	t.Run("CancellationDuringAPollPassesThroughAndKeepsTheTerm", func(t *testing.T) {
		t.Parallel()
		const ttl = 10 * time.Second
		f, c, _ := setup(t, ttl, 0)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(4))
		c.ExpectQuery(f.renew).WithArgs(name, holder, int64(4), ms(ttl)).WillReturnRow(int64(4)).WillDelayFor(10 * time.Second)
		ctx := mockCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, f).Status)
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		res, err := f.TryAcquire(cctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res)
		require.True(t, c.isClosed(), "a connection cancelled mid-statement is not trusted")
		require.Equal(t, int64(4), f.term.Token, "the term is the server's to expire")
	})

	t.Run("GrantErrorIsFaulted", func(t *testing.T) {
		t.Parallel()
		const ttl = time.Second
		f, c, _ := setup(t, ttl, 0)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).
			WillReturnError(&pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: `relation "doublerun_leases" does not exist`})
		res := mustTry(t, mockCtx(t), f)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "grant: ")
		require.ErrorContains(t, res.Err, "lease.MigrateFenced", "a missing table gets the hint")
		require.True(t, c.isClosed())
	})

	t.Run("ConnectErrorIsFaulted", func(t *testing.T) {
		t.Parallel()
		f, _, _ := setup(t, time.Second, 0)
		f.connect = func(context.Context) (conn, error) { return nil, errors.New("connection refused") }
		res := mustTry(t, mockCtx(t), f)
		require.Equal(t, Faulted, res.Status)
		require.ErrorContains(t, res.Err, "connect: connection refused")
	})

	t.Run("ReleaseWithoutATermRunsNoStatement", func(t *testing.T) {
		t.Parallel()
		const ttl = time.Second
		f, c, _ := setup(t, ttl, 0)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnError(pgx.ErrNoRows)
		ctx := mockCtx(t)
		require.Equal(t, Follower, mustTry(t, ctx, f).Status)
		require.NoError(t, f.Release(ctx))
		require.NoError(t, f.Close(ctx))
		require.Equal(t, Result{Status: Faulted, Err: ErrClosed}, mustTry(t, ctx, f))
	})

	t.Run("ReleaseExpiresTheExactTermOnce", func(t *testing.T) {
		t.Parallel()
		const ttl = time.Second
		f, c, _ := setup(t, ttl, 0)
		c.ExpectQuery(f.grant).WithArgs(name, holder, ms(ttl)).WillReturnRow(int64(6))
		c.ExpectQuery(f.release).WithArgs(name, holder, int64(6), fencedChannel)
		ctx := mockCtx(t)
		require.Equal(t, Leader, mustTry(t, ctx, f).Status)
		require.NoError(t, f.Release(ctx))
		require.Zero(t, f.term)
		require.Zero(t, f.Deadline())
		require.NoError(t, f.Release(ctx), "released already: nothing to expire")
	})
}

// TestFencedWithoutServer covers what NewFenced and MigrateFenced decide
// before they reach a server.
func TestFencedWithoutServer(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).
	ctx := mockCtx(t)

	t.Run("NewFencedRejectsABadConfig", func(t *testing.T) {
		_, err := NewFenced(ctx, FencedConfig{DSN: "postgres://localhost/db", TTL: -time.Second})
		require.ErrorContains(t, err, "fenced config")
	})

	t.Run("NewFencedReportsAFailedConnect", func(t *testing.T) {
		_, err := NewFenced(ctx, FencedConfig{DSN: fmt.Sprintf("postgres://u:p@127.0.0.1:%d/db?connect_timeout=5", closedPort(t))})
		require.ErrorContains(t, err, "connect")
	})

	t.Run("MigrateFencedRejectsABadTableName", func(t *testing.T) {
		ran := false
		err := MigrateFenced(ctx, execerFunc(func() error { ran = true; return nil }), "a.b.c")
		require.ErrorContains(t, err, "more than one dot")
		require.False(t, ran, "nothing is sent for a bad name")
	})

	t.Run("MigrateFencedReportsAFailedCreate", func(t *testing.T) {
		denied := &pgconn.PgError{Code: "42501", Message: "permission denied for schema public"}
		err := MigrateFenced(ctx, execerFunc(func() error { return denied }), "")
		require.ErrorIs(t, err, denied)
		require.ErrorContains(t, err, `"doublerun_leases"`)
		require.NoError(t, MigrateFenced(ctx, execerFunc(func() error { return nil }), ""))
	})
}

// scriptedTx is the pgx.Tx a fence runs in, played by a scripted conn.
// Only QueryRow is used; any other method panics on the nil pgx.Tx.
type scriptedTx struct {
	pgx.Tx
	c *scriptedConn
}

func (tx scriptedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return tx.c.QueryRow(ctx, sql, args...)
}

// TestFenceWithoutServer covers the fence's verdicts on what the lease
// row says; TestFenced and TestAdvisory show them, and its lock, on a
// server.
func TestFenceWithoutServer(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).
	const table, name = `"doublerun_leases"`, "doublerun"
	query := "SELECT token FROM " + table + " WHERE name = $1 FOR KEY SHARE"
	term := Term{Name: name, Holder: "a", Token: 5}
	for _, tt := range []struct {
		name   string
		answer func(*scriptStep)
		term   Term
		want   error  // nil, ErrStaleToken, or another error wrapped
		text   string // in the error
	}{
		{"NewestTermPasses", func(s *scriptStep) { s.WillReturnRow(int64(5)) }, term, nil, ""},
		{"OlderTermIsStale", func(s *scriptStep) { s.WillReturnRow(int64(6)) }, term, ErrStaleToken, "term has token 5, newest granted is 6"},
		{"NeverGrantedIsStale", func(s *scriptStep) { s.WillReturnError(pgx.ErrNoRows) }, term, ErrStaleToken, "has never been granted"},
		{"FailedCheckIsAnError", func(s *scriptStep) { s.WillReturnError(io.ErrUnexpectedEOF) }, term, io.ErrUnexpectedEOF, "lease: fence"},
		{"TermOfAnotherLeaseIsRefused", nil, Term{Name: "other", Token: 5}, nil, "checked against lease"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &scriptedConn{}
			if tt.answer != nil {
				tt.answer(c.ExpectQuery(query).WithArgs(name))
			}
			err := fence(mockCtx(t), scriptedTx{c: c}, table, name, tt.term, false)
			require.NoError(t, c.met())
			switch {
			case tt.text == "":
				require.NoError(t, err)
			case tt.want != nil:
				require.ErrorIs(t, err, tt.want)
				require.ErrorContains(t, err, tt.text)
			default:
				require.ErrorContains(t, err, tt.text)
				require.NotErrorIs(t, err, ErrStaleToken)
			}
		})
	}
}

// TestEpochFenceWithoutServer covers the epoch fence's verdicts on the
// newest token and the first token of the server's timeline, which the
// same statement reads.
func TestEpochFenceWithoutServer(t *testing.T) {
	// Not parallel: see TestFenceWithoutServer.
	const table, name = `"doublerun_leases"`, "doublerun"
	query := "SELECT token, " + epochFirstSQL + " FROM " + table + " WHERE name = $1 FOR KEY SHARE"
	const tl2 = int64(2)<<32 | 1
	for _, tt := range []struct {
		name          string
		token, newest int64
		stale         string // in the error; empty: it passes
	}{
		{"TheServersTimelinesFirstTokenPasses", tl2, tl2, ""},
		{"ALaterTokenOfItPasses", tl2 + 4, tl2 + 4, ""},
		{"ANewestTokenOfAnEarlierTimelineIsStale", tl2 - 1<<32, tl2 - 1<<32, "of a timeline before the server's (whose first token is 8589934593)"},
		{"AnOlderTokenIsStaleFirst", tl2, tl2 + 1, "newest granted is 8589934594"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &scriptedConn{}
			c.ExpectQuery(query).WithArgs(name).WillReturnRow(tt.newest, tl2)
			err := fence(mockCtx(t), scriptedTx{c: c}, table, name, Term{Name: name, Holder: "a", Token: tt.token}, true)
			require.NoError(t, c.met())
			if tt.stale == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrStaleToken)
			require.ErrorContains(t, err, tt.stale)
		})
	}
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
