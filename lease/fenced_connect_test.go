package lease

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// slowConnect makes f's next connections open only after delay, as on a
// loaded host where authentication takes longer than TTL - Margin. The
// connections are real; only their start is late.
func slowConnect(f *Fenced, delay time.Duration) {
	connect := f.connect
	f.connect = func(ctx context.Context) (conn, error) {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return connect(ctx)
	}
}

func TestFencedConnect(t *testing.T) {
	t.Parallel()

	t.Run("DefaultsToFiveSecondsAndRejectsANegativeTimeout", func(t *testing.T) {
		t.Parallel()
		f, err := newFenced(FencedConfig{DSN: "postgres://u@localhost:5432/db"})
		require.NoError(t, err)
		require.Equal(t, 5*time.Second, f.cfg.ConnectTimeout)
		_, err = newFenced(FencedConfig{DSN: "postgres://u@localhost:5432/db", ConnectTimeout: -time.Second})
		require.ErrorContains(t, err, "ConnectTimeout -1s is negative")
	})

	// A replica whose connections take longer to open than TTL - Margin
	// still leads: the answer's budget starts when the statement is sent.
	// Were the connect inside it, every poll after a dropped connection
	// would fail, and the replica would never lead again.
	//
	// The TTL leaves the grant itself room: at a 300ms TTL (a 240ms
	// budget) the grant statement alone overran its budget in make test
	// at load average 14, so the replica was Faulted for a reason this
	// test is not about. A 2s TTL gives the statement 1.6s, and the
	// connect still takes longer than that. The connect's own bound is
	// well past the delay: with the default 5 s, the 4 s delay left the
	// login itself 1 s, and in make test a SCRAM login took longer.
	t.Run("SlowConnectStillLeads", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		const ttl = 2 * time.Second // TTL - Margin is 1.6s
		l := newFencedT(t, b.db, b.db.Postgres, "a", withTTL(ttl), func(c *FencedConfig) { c.ConnectTimeout = 2*ttl + 15*time.Second })
		slowConnect(l, 2*ttl)
		l.resetConn(b.ctx) // as after a poll that timed out
		res := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, res.Status, "poll after a slow connect: %v", res.Err)
		require.NotZero(t, res.Term.Token)
	})

	// A connection pgx closed (a context ended its statement mid-answer)
	// is replaced before the next statement. On it, the wait's last try
	// was Faulted ("grant: conn closed") where it should have been
	// Follower, when the bound of a wait ended during the question how
	// long the term had left (make test, two CPU-bound packages).
	t.Run("ClosedConnectionIsReplaced", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		l := newFencedT(t, b.db, b.db.Postgres, "a")
		require.Equal(t, Leader, mustTry(t, b.ctx, l).Status)
		pc, ok := l.conn.(*pgx.Conn)
		require.True(t, ok)
		require.NoError(t, pc.Close(b.ctx))
		res := mustTry(t, b.ctx, l)
		require.Equal(t, Leader, res.Status, "the renewal after pgx closed the connection: %v", res.Err)
		require.NotSame(t, pc, l.conn, "a fresh connection")
	})

	t.Run("ConnectTimeoutBoundsTheConnect", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		l := newFencedT(t, b.db, b.db.Postgres, "a")
		l.cfg.ConnectTimeout = 100 * time.Millisecond // after NewFenced's own connect
		slowConnect(l, 10*time.Second)
		l.resetConn(b.ctx)
		begin := time.Now()
		res := mustTry(t, b.ctx, l)
		require.Equal(t, Faulted, res.Status)
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		require.ErrorContains(t, res.Err, "connect")
		require.Less(t, time.Since(begin), 5*time.Second, "the connect was not bounded by ConnectTimeout")
	})
}
