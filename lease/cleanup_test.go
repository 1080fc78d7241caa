package lease

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// slowDialProxy forwards TCP connections to a server and holds each new
// connection for delay before it forwards a byte. pgx sends a cancel
// request on a connection of its own, so through this proxy the cleanup
// of a connection pgx dropped mid-statement takes at least delay.
type slowDialProxy struct {
	ln    net.Listener
	delay time.Duration
	to    string
	wg    sync.WaitGroup
}

// newSlowDialProxy starts a proxy in front of ep and returns ep with its
// DSN pointed at the proxy. The proxy stops when the test ends.
func newSlowDialProxy(t testing.TB, ep stack.Endpoint, delay time.Duration) stack.Endpoint {
	t.Helper()
	u, err := url.Parse(ep.DSN)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &slowDialProxy{ln: ln, delay: delay, to: u.Host}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	u.Host = ln.Addr().String()
	ep.DSN = u.String()
	return ep
}

func (p *slowDialProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.forward(c) }()
	}
}

func (p *slowDialProxy) forward(c net.Conn) {
	defer c.Close()
	time.Sleep(p.delay)
	s, err := net.DialTimeout("tcp", p.to, 5*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(s, c); _ = s.Close(); close(done) }()
	_, _ = io.Copy(c, s)
	_ = c.Close()
	<-done
}

// cleanupDone reports whether c's cleanup after it was dropped has ended.
func cleanupDone(c conn) bool {
	select {
	case <-c.(*pgx.Conn).PgConn().CleanupDone():
		return true
	default:
		return false
	}
}

// requireCloseWaitsForCleanup closes l and fails unless Close waited for
// the cleanup of dropped, which is still running: until it ended, or for
// its whole bound (closeTimeout) when it did not end in time, as under a
// loaded CI machine, where the cancel request took more than a second.
func requireCloseWaitsForCleanup(t *testing.T, ctx context.Context, l Lease, dropped conn) {
	t.Helper()
	begin := time.Now()
	require.NoError(t, l.Close(ctx))
	require.True(t, cleanupDone(dropped) || time.Since(begin) >= closeTimeout,
		"Close returned while the dropped connection's cancel request was in flight: a process that exits now cuts it short (pgbouncer#801)")
}

// cleanupDelay is how long the proxy holds the cancel request pgx sends
// for a dropped connection: long against Close without the wait, well
// inside closeTimeout with it.
const cleanupDelay = 300 * time.Millisecond

func TestAdvisoryCleanup(t *testing.T) {
	t.Parallel()

	t.Run("CloseWaitsForTheCancelledWaitsCleanup", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		ep := newSlowDialProxy(t, b.db.Postgres, cleanupDelay)
		_, follower, _ := heldAndWaiting(t, b, ep, 30*time.Second)
		require.Equal(t, Follower, mustTry(t, b.ctx, follower).Status)
		dropped := follower.conn

		cancelWhileWaiting(t, b.ctx, follower, func() { waitingForAdvisoryLock(t, b.ctx, b.admin, "wait-b") })
		require.False(t, cleanupDone(dropped), "pgx is still sending the cancel request through the slow proxy")
		requireCloseWaitsForCleanup(t, b.ctx, follower, dropped)
	})
}

func TestFencedCleanup(t *testing.T) {
	t.Parallel()

	t.Run("CloseWaitsForTheCancelledGrantsCleanup", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		ep := newSlowDialProxy(t, b.db.Postgres, cleanupDelay)
		leader := newFencedT(t, b.db, b.db.Postgres, "a")
		require.Equal(t, Leader, mustTry(t, b.ctx, leader).Status)
		// A follower holds no term, so its Close needs no connection of
		// its own, which would give the cleanup time to end regardless.
		f := newFencedT(t, b.db, ep, "b")
		require.Equal(t, Follower, mustTry(t, b.ctx, f).Status)
		dropped := f.conn

		// Hold the lease table so the next call waits in mid-statement.
		tx, err := b.admin.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		_, err = tx.Exec(b.ctx, "LOCK TABLE "+defaultFencedTable+" IN ACCESS EXCLUSIVE MODE")
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		got := make(chan error, 1)
		go func() { _, err := f.TryAcquire(cctx); got <- err }()
		waitForBackend(t, b.ctx, b.admin, "fenced-b", "wait_event_type = 'Lock'")
		cancel()
		select {
		case err := <-got:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(5 * time.Second):
			t.Fatal("a cancelled call did not return")
		}
		require.NoError(t, tx.Rollback(b.ctx))
		require.False(t, cleanupDone(dropped), "pgx is still sending the cancel request through the slow proxy")
		requireCloseWaitsForCleanup(t, b.ctx, f, dropped)
	})
}
