package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// endpoints runs fn once directly against Postgres, in a schema of its
// own, and once through the stack's transaction-pooling PgBouncer (pool
// size 1), in a database of its own (reusedDB).
func endpoints(t *testing.T, fn func(t *testing.T, db stacktest.DB, ep stack.Endpoint)) {
	t.Helper()
	t.Run("Direct", func(t *testing.T) {
		t.Parallel()
		db := newSchema(t)
		fn(t, db, db.Postgres)
	})
	t.Run("ThroughTransactionPooling", func(t *testing.T) {
		t.Parallel()
		db := reusedDB(t)
		fn(t, db, db.Transaction)
	})
}

// newSchema gives the test a schema of its own in the stack's database and
// returns it as a DB whose Postgres endpoint pins search_path to it, so
// that unqualified names (doublerun_jobs, doublerun_leases) are the
// test's own. It is for tests that connect to Postgres directly: a schema
// costs a millisecond where a database costs a copy of the template
// (CREATE DATABASE, a tenth of a second and more on a busy machine).
// Through PgBouncer a test needs a database of its own (reusedDB) for
// pools of its own, and session settings such as search_path do not
// hold in transaction pooling. Its Session and Transaction endpoints are
// empty.
func newSchema(t testing.TB) stacktest.DB {
	t.Helper()
	s := stacktest.Shared(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	stacktest.MustExec(t, s.Postgres().DSN, "CREATE SCHEMA "+name)
	t.Cleanup(func() {
		// Every connection of the test is closed by now; the lock
		// timeout turns one left open in a transaction into an error
		// rather than a hang.
		stacktest.MustExec(t, s.Postgres().DSN, "SET lock_timeout = '10s'; DROP SCHEMA "+name+" CASCADE")
	})
	ep := s.Postgres()
	u, err := url.Parse(ep.DSN)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	ep.DSN = u.String()
	return stacktest.DB{Name: name, Stack: s, Postgres: ep}
}

type jobsBundle struct {
	db     stacktest.DB
	ep     stack.Endpoint
	conn   *pgx.Conn // direct, for setup and assertions
	lease  *fencingLease
	worker *Worker
}

// jobsSetup migrates the jobs table and builds a worker on ep with config
// (Lease and DSN filled in unless set).
func jobsSetup(t *testing.T, db stacktest.DB, ep stack.Endpoint, config Config) *jobsBundle {
	t.Helper()
	b := &jobsBundle{db: db, ep: ep, conn: stacktest.Connect(t, db.Postgres), lease: newFencingLease()}
	require.NoError(t, Migrate(context.Background(), b.conn, ""))
	if config.Lease == nil {
		config.Lease = b.lease
	}
	if config.DSN == "" && config.Pool == nil {
		config.DSN = ep.DSN
	}
	config.PollInterval = cmpDuration(config.PollInterval, 5*time.Millisecond)
	config.BackoffInitial = cmpDuration(config.BackoffInitial, 5*time.Millisecond)
	config.BackoffMax = cmpDuration(config.BackoffMax, 50*time.Millisecond)
	// A deadline on every handler's context, for handlers that wait on it:
	// longer than any test takes, and well below the time the mutation
	// gate gives the package's tests, so that a mutant that never cancels
	// them fails rather than hangs.
	config.VisibilityTimeout = cmpDuration(config.VisibilityTimeout, 30*time.Second)
	b.worker = newWorker(t, config)
	return b
}

func cmpDuration(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func (b *jobsBundle) enqueue(t *testing.T, n int, kind string) []int64 {
	t.Helper()
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{Kind: kind, Args: map[string]int{"n": i}}
	}
	ids, err := Enqueue(context.Background(), b.conn, "", jobs...)
	require.NoError(t, err)
	require.Len(t, ids, n)
	return ids
}

type jobRow struct {
	State          string
	Attempt        int
	LastError      *string
	FinalizedToken *int64
	ClaimedToken   *int64
	Visibility     *time.Duration // run_at - claimed_at
}

func (b *jobsBundle) job(t *testing.T, id int64) jobRow {
	t.Helper()
	var r jobRow
	require.NoError(t, b.conn.QueryRow(context.Background(),
		`SELECT state, attempt, last_error, finalized_token, claimed_token, run_at - claimed_at FROM doublerun_jobs WHERE id = $1`, id).
		Scan(&r.State, &r.Attempt, &r.LastError, &r.FinalizedToken, &r.ClaimedToken, &r.Visibility))
	return r
}

func (b *jobsBundle) states(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.conn.Query(context.Background(), `SELECT state, count(*) FROM doublerun_jobs GROUP BY state`)
	require.NoError(t, err)
	type count struct {
		State string
		N     int
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[count])
	require.NoError(t, err)
	out := map[string]int{}
	for _, c := range counts {
		out[c.State] = c.N
	}
	return out
}

var noop = HandlerFunc(func(context.Context, *Job) error { return nil })

// manyJobs migrates a schema of its own, inserts n due jobs of kind "k"
// in one statement after running before (such as an ALTER TABLE), analyses
// the table, and returns a worker on it with a no-op handler for "k".
func manyJobs(t *testing.T, n int, before ...string) *jobsBundle {
	t.Helper()
	db := newSchema(t)
	b := jobsSetup(t, db, db.Postgres, Config{Handlers: map[string]Handler{"k": noop}})
	for _, sql := range append(before,
		fmt.Sprintf(`INSERT INTO doublerun_jobs (kind) SELECT 'k' FROM generate_series(1, %d)`, n),
		`ANALYZE doublerun_jobs`) {
		_, err := b.conn.Exec(context.Background(), sql)
		require.NoError(t, err)
	}
	return b
}

// claimOne enqueues one job, claims it under leaderTerm and returns both.
func (b *jobsBundle) claimOne(t *testing.T) (int64, []*Job) {
	t.Helper()
	id := b.enqueue(t, 1, "k")[0]
	jobs, err := b.worker.claim(context.Background(), leaderTerm, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return id, jobs
}

// deadlineLease is a fencing stub that also reports a trust deadline, as
// lease.Fenced does: trust after each TryAcquire.
type deadlineLease struct {
	*fencingLease
	trust    time.Duration
	deadline atomic.Value
}

func (l *deadlineLease) TryAcquire(ctx context.Context) (lease.Result, error) {
	l.deadline.Store(time.Now().Add(l.trust))
	return l.fencingLease.TryAcquire(ctx)
}

func (l *deadlineLease) Deadline() time.Time { return l.deadline.Load().(time.Time) }

// claim claims up to limit due jobs under term from the start of the due
// index, as the first claim of a pipeline does.
func (w *Worker) claim(ctx context.Context, term lease.Term, limit int) ([]*Job, error) {
	c, err := w.claimFrom(ctx, term, limit, claimKey{})
	return c.jobs, err
}

// run runs each job's handler in a goroutine of its own and returns their
// errors in job order.
func (w *Worker) run(ctx context.Context, jobs []*Job) []error {
	errs := make([]error, len(jobs))
	ctx, cancel := context.WithTimeout(ctx, w.config.VisibilityTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { errs[i] = w.runJob(ctx, job) })
	}
	wg.Wait()
	return errs
}
