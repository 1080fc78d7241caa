package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// testCtx is the test's context with a bound, so a hang fails the test
// instead of the whole binary.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mockCtx bounds a test against a scripted conn, whose every answer
// comes at once unless the script delays it: a call that hangs fails the
// test in seconds.
func mockCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serverBundle is what a test against a server starts from: a database
// of its own, a bounded context, and a direct connection for pg_locks,
// pg_stat_activity and pg_terminate_backend.
type serverBundle struct {
	ctx   context.Context
	db    stacktest.DB
	admin *pgx.Conn
}

func setupServer(t *testing.T) *serverBundle {
	t.Helper()
	db := stacktest.NewDB(t)
	return &serverBundle{ctx: testCtx(t), db: db, admin: stacktest.Connect(t, db.Postgres)}
}

// testLogger writes to the test's output, which go test shows on failure
// and with -v.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newAdvisoryT builds an Advisory through NewAdvisory and closes it when
// the test ends.
func newAdvisoryT(t testing.TB, ep stack.Endpoint, holder string, mods ...func(*AdvisoryConfig)) *Advisory {
	t.Helper()
	cfg := AdvisoryConfig{DSN: ep.DSN, Holder: holder, Logger: testLogger(t)}
	for _, m := range mods {
		m(&cfg)
	}
	a, err := NewAdvisory(testCtx(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

func allowTransactionPooling(c *AdvisoryConfig) { c.AllowTransactionPooling = true }

// fencedMigrated holds the names of the databases whose default lease
// table newFencedT has created, so that a test's later leases do not open
// a connection to migrate again.
var fencedMigrated sync.Map

// newFencedT migrates the lease table through a direct connection, once
// per database, and builds a Fenced on ep, closed when the test ends.
func newFencedT(t testing.TB, db stacktest.DB, ep stack.Endpoint, holder string, mods ...func(*FencedConfig)) *Fenced {
	t.Helper()
	ctx := testCtx(t)
	if _, done := fencedMigrated.Load(db.Name); !done {
		require.NoError(t, MigrateFenced(ctx, stacktest.Connect(t, db.Postgres), ""))
		fencedMigrated.Store(db.Name, true)
	}
	cfg := FencedConfig{DSN: ep.DSN, Holder: holder, ApplicationName: "fenced-" + holder, Logger: testLogger(t)}
	for _, m := range mods {
		m(&cfg)
	}
	f, err := NewFenced(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

func withTTL(ttl time.Duration) func(*FencedConfig) {
	return func(c *FencedConfig) { c.TTL = ttl }
}

func mustTry(t testing.TB, ctx context.Context, l Lease) Result {
	t.Helper()
	res, err := l.TryAcquire(ctx)
	require.NoError(t, err)
	return res
}

// tryAll polls every lease at once, as independent replicas do.
func tryAll(t testing.TB, ctx context.Context, leases ...Lease) []Result {
	t.Helper()
	out := make([]Result, len(leases))
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() { out[i], errs[i] = l.TryAcquire(ctx) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

func leaders(results []Result) int {
	n := 0
	for _, r := range results {
		if r.Status == Leader {
			n++
		}
	}
	return n
}

// waitFor polls cond in the test's goroutine until it returns true, fails
// the test on cond's first error, and fails it after within.
func waitFor(t testing.TB, within time.Duration, msg string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		require.NoError(t, err, msg)
		if ok {
			return
		}
		require.False(t, time.Now().After(deadline), "%s: not within %s", msg, within)
		time.Sleep(10 * time.Millisecond)
	}
}

// eventuallyLeader polls l until it reports Leader and returns that result.
func eventuallyLeader(t testing.TB, ctx context.Context, l Lease, within time.Duration) Result {
	t.Helper()
	var res Result
	waitFor(t, within, "the lease never became leader", func() (bool, error) {
		var err error
		res, err = l.TryAcquire(ctx)
		return res.Status == Leader, err
	})
	return res
}

// settled asks l until its answer is Leader or Follower. Faulted says only
// that the lease could not reach the server in time, as a grant bounded by
// a short TTL may not on a starved machine (seen beside make test under a
// load average of 15: a 1 s TTL's grant ran out after 800 ms), so it says
// nothing of whether the lease is held elsewhere.
func settled(t testing.TB, ctx context.Context, l Lease, within time.Duration) Result {
	t.Helper()
	var res Result
	waitFor(t, within, "the lease was Faulted on every call", func() (bool, error) {
		var err error
		res, err = l.TryAcquire(ctx)
		return res.Status != Faulted, err
	})
	return res
}

// advisoryHolderPID is the backend holding advisory lock (k1, k2) in the
// current database, or 0.
func advisoryHolderPID(t testing.TB, ctx context.Context, c *pgx.Conn, k1, k2 int32) int32 {
	t.Helper()
	var pid int32
	err := c.QueryRow(ctx, `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2 AND objsubid = 2
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		LIMIT 1`, k1, k2).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return pid
}

// terminate kills backend pid and waits until it is gone.
func terminate(t testing.TB, ctx context.Context, c *pgx.Conn, pid int32) {
	t.Helper()
	var ok bool
	require.NoError(t, c.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
	require.True(t, ok, "terminate backend %d", pid)
	waitBackendGone(t, ctx, c, pid)
}

func waitBackendGone(t testing.TB, ctx context.Context, c *pgx.Conn, pid int32) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("backend %d exits", pid), func() (bool, error) {
		var n int
		err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		return n == 0, err
	})
}

// closedPort returns a local TCP port nothing listens on.
func closedPort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return uint16(port)
}

// fencedWrite is leader work done right: the fence and the write in one
// transaction, rolled back when the fence refuses.
func fencedWrite(ctx context.Context, c *pgx.Conn, f Fencer, term Term, what string) error {
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if err := f.Fence(ctx, tx, term); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO leader_writes (token, what) VALUES ($1, $2)", term.Token, what)
		return err
	})
}

func createWritesTable(t testing.TB, dsn string) {
	stacktest.MustExec(t, dsn, "CREATE TABLE leader_writes (token bigint NOT NULL, what text NOT NULL)")
}

func writes(t testing.TB, ctx context.Context, c *pgx.Conn) []string {
	t.Helper()
	rows, err := c.Query(ctx, "SELECT format('%s@%s', what, token) FROM leader_writes ORDER BY token, what")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func holderName(i int) string { return fmt.Sprintf("replica-%d", i) }

// crash drops the lease's connection without releasing anything, as the
// death of its process would, and leaves the lease unusable.
func crash(ctx context.Context, l Lease) {
	switch l := l.(type) {
	case *Advisory:
		l.mu.Lock()
		defer l.mu.Unlock()
		closeConn(ctx, l.conn)
		l.conn, l.held, l.closed = nil, false, true
	case *Fenced:
		l.mu.Lock()
		defer l.mu.Unlock()
		closeConn(ctx, l.conn)
		l.conn, l.term, l.closed = nil, Term{}, true
	}
}

// fakeClock returns each of times in turn, then the last one forever.
func fakeClock(times ...time.Time) func() time.Time {
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := times[0]
		if len(times) > 1 {
			times = times[1:]
		}
		return now
	}
}
