package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
)

// DB is what Migrate and Enqueue need: *pgx.Conn, *pgxpool.Pool and pgx.Tx
// all implement it, so a job can be enqueued in the transaction that
// decides it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Job states in the state column.
const (
	// StateAvailable: waiting for run_at.
	StateAvailable = "available"
	// StateRunning: claimed; run_at is the visibility deadline after which
	// it is claimed again.
	StateRunning = "running"
	// StateCompleted: a handler succeeded and its completion was recorded.
	StateCompleted = "completed"
	// StateDiscarded: its last attempt failed or timed out.
	StateDiscarded = "discarded"
)

// Job is one claimed job, as its handler sees it.
type Job struct {
	ID   int64
	Kind string
	// Args is the JSON the job was enqueued with.
	Args json.RawMessage
	// Attempt is this attempt's number, from 1. Claims after a visibility
	// timeout count as attempts too.
	Attempt     int
	MaxAttempts int
	CreatedAt   time.Time
}

// Handler runs jobs of one kind. Delivery is at least once: a handler can
// run twice for the same job (see the package documentation), so it must be
// idempotent. An error or a panic fails the attempt; the job is retried
// after Config.RetryDelay until its attempts run out.
type Handler interface {
	Work(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, job *Job) error { return f(ctx, job) }

// NewJob is a job to enqueue.
type NewJob struct {
	// Kind selects the handler. Required.
	Kind string
	// Args is marshalled to JSON (json.RawMessage passes as is); nil means {}.
	Args any
	// MaxAttempts defaults to DefaultMaxAttempts, or to Config.MaxAttempts
	// through Worker.Enqueue.
	MaxAttempts int
	// RunAt is when the job becomes due; zero means now (the database's).
	RunAt time.Time
}

// parseTable sanitises a table name, optionally schema-qualified, and
// derives its index name.
func parseTable(name string) (table, index string, err error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		return "", "", fmt.Errorf("worker: table name %q must be table or schema.table", name)
	}
	return pgx.Identifier(parts).Sanitize(), pgx.Identifier{parts[len(parts)-1] + "_due"}.Sanitize(), nil
}

// Migrate creates the jobs table called table (DefaultTable if empty,
// "schema.table" accepted) and its index, if they do not exist yet. It is
// idempotent and safe to run from several replicas at once.
func Migrate(ctx context.Context, db DB, table string) error {
	t, index, err := parseTable(cmp.Or(table, DefaultTable))
	if err != nil {
		return err
	}
	// run_at is when an available job becomes due and, while it runs, its
	// visibility deadline: one column makes "claimable" a single range.
	sql := fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %[1]s (
	id              bigserial PRIMARY KEY,
	kind            text NOT NULL CHECK (kind <> ''),
	args            jsonb NOT NULL DEFAULT '{}',
	state           text NOT NULL DEFAULT 'available'
	                CHECK (state IN ('available', 'running', 'completed', 'discarded')),
	attempt         integer NOT NULL DEFAULT 0,
	max_attempts    integer NOT NULL DEFAULT %[3]d CHECK (max_attempts >= 1),
	run_at          timestamptz NOT NULL DEFAULT now(),
	created_at      timestamptz NOT NULL DEFAULT now(),
	claimed_at      timestamptz,
	claimed_by      text,
	claimed_token   bigint,
	finalized_at    timestamptz,
	finalized_token bigint,
	last_error      text
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (run_at, id) WHERE state IN ('available', 'running');
`, t, index, DefaultMaxAttempts)
	if _, err := db.Exec(ctx, sql); err != nil && !lease.LostCreateRace(err) {
		return fmt.Errorf("worker: migrate jobs table %s: %w", t, err)
	}
	return nil
}

// Enqueue inserts jobs into table (DefaultTable if empty) in one statement
// and returns their IDs in the order given. Pass a pgx.Tx to enqueue
// atomically with other writes.
func Enqueue(ctx context.Context, db DB, table string, jobs ...NewJob) ([]int64, error) {
	t, _, err := parseTable(cmp.Or(table, DefaultTable))
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	kinds := make([]string, len(jobs))
	args := make([]string, len(jobs))
	maxAttempts := make([]int32, len(jobs))
	runAt := make([]pgtype.Timestamptz, len(jobs))
	for i, j := range jobs {
		if j.Kind == "" {
			return nil, fmt.Errorf("worker: enqueue job %d: Kind is required", i)
		}
		kinds[i] = j.Kind
		b := []byte("{}")
		if j.Args != nil {
			if b, err = json.Marshal(j.Args); err != nil {
				return nil, fmt.Errorf("worker: enqueue job %d (%s): marshal args: %w", i, j.Kind, err)
			}
		}
		args[i] = string(b)
		m := j.MaxAttempts
		if m == 0 {
			m = DefaultMaxAttempts
		}
		if m < 1 {
			return nil, fmt.Errorf("worker: enqueue job %d (%s): MaxAttempts must be at least 1, got %d", i, j.Kind, m)
		}
		maxAttempts[i] = int32(min(m, 1<<31-1))
		runAt[i] = pgtype.Timestamptz{Time: j.RunAt, Valid: !j.RunAt.IsZero()}
	}
	rows, err := db.Query(ctx, fmt.Sprintf(`
INSERT INTO %s (kind, args, max_attempts, run_at)
SELECT u.kind, u.args::jsonb, u.max_attempts, COALESCE(u.run_at, now())
FROM unnest($1::text[], $2::text[], $3::integer[], $4::timestamptz[]) WITH ORDINALITY AS u(kind, args, max_attempts, run_at, ord)
ORDER BY u.ord
RETURNING id`, t), kinds, args, maxAttempts, runAt)
	if err != nil {
		return nil, fmt.Errorf("worker: enqueue %d jobs into %s: %w", len(jobs), t, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("worker: enqueue %d jobs into %s: %w", len(jobs), t, err)
	}
	return ids, nil
}

// Enqueue inserts jobs into the worker's table; a job without MaxAttempts
// gets Config.MaxAttempts. It fails on a worker without DSN or Pool.
func (w *Worker) Enqueue(ctx context.Context, jobs ...NewJob) ([]int64, error) {
	if w.db == nil {
		return nil, errors.New("worker: Enqueue needs the jobs table; set Config.DSN or Config.Pool")
	}
	jobs = slices.Clone(jobs)
	for i := range jobs {
		if jobs[i].MaxAttempts == 0 {
			jobs[i].MaxAttempts = w.config.MaxAttempts
		}
	}
	return Enqueue(ctx, w.db, w.config.Table, jobs...)
}

// newPool opens a lazy pool on dsn, in QueryExecModeExec unless the DSN
// names a mode: pgx's default statement cache fails through PgBouncer
// below 1.21 in transaction pooling (SQLSTATE 42P05).
func newPool(dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("worker: parse DSN: %w", err)
	}
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("worker: open pool: %w", err)
	}
	return p, nil
}

// work claims a batch of due jobs, runs their handlers concurrently and
// records the outcomes.
func (w *Worker) work(ctx context.Context, term lease.Term) error {
	jobs, err := w.claim(ctx, term, w.config.BatchSize)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	errs := w.run(ctx, jobs)
	return w.complete(ctx, term, jobs, errs)
}

// claimSQL claims due jobs in ONE statement. The inner SELECT locks the
// rows it picks and SKIPs rows another claimer has locked, so concurrent
// claimers never take the same job and never wait for each other; the
// UPDATE marks them running with a visibility deadline before the
// statement's implicit transaction ends. Being a single statement, it needs
// no session state and is correct through transaction pooling.
//
// A running job whose deadline passed is due again: its claimer died, froze
// or lost its connection before recording an outcome. If that was its last
// attempt it is discarded instead of run again.
//
// Caught: SKIP LOCKED by TestJobs/ClaimSkipsJobsLockedByAnotherClaimer;
// reclaiming running jobs and the visibility deadline by
// TestJobs/ClaimedJobIsClaimedAgainAfterItsVisibilityTimeout; the discard
// by TestJobs/JobTimedOutOnItsLastAttemptIsDiscarded; run_at <= now() by
// TestJobs/FutureJobWaitsForItsRunAt; the kind filter by
// TestJobs/UnknownKindsAreLeftAlone.
const claimSQL = `
UPDATE %[1]s SET
	state         = CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'running' END,
	attempt       = CASE WHEN attempt >= max_attempts THEN attempt ELSE attempt + 1 END,
	run_at        = now() + $3::bigint * interval '1 microsecond',
	claimed_at    = now(),
	claimed_by    = $4::text,
	claimed_token = $5::bigint,
	finalized_at  = CASE WHEN attempt >= max_attempts THEN now() END,
	last_error    = CASE WHEN attempt >= max_attempts
	                THEN 'visibility timeout passed on the last attempt' ELSE last_error END
WHERE id IN (
	SELECT id FROM %[1]s
	WHERE state IN ('available', 'running') AND run_at <= now() AND kind = ANY($1::text[])
	ORDER BY run_at, id
	LIMIT $2::integer
	FOR UPDATE SKIP LOCKED
)
RETURNING id, kind, args, attempt, max_attempts, created_at, state`

// claim claims up to limit due jobs under term and returns the ones to run.
func (w *Worker) claim(ctx context.Context, term lease.Term, limit int) ([]*Job, error) {
	rows, err := w.db.Query(ctx, fmt.Sprintf(claimSQL, w.table),
		w.kinds, limit, w.config.VisibilityTimeout.Microseconds(), w.config.ID, term.Token)
	if err != nil {
		return nil, fmt.Errorf("claim jobs from %s: %w", w.table, err)
	}
	var jobs []*Job
	discarded := 0
	for rows.Next() {
		j := &Job{}
		var args []byte
		var state string
		if err := rows.Scan(&j.ID, &j.Kind, &args, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &state); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim jobs from %s: scan: %w", w.table, err)
		}
		j.Args = json.RawMessage(args)
		if state == StateDiscarded {
			discarded++
			w.config.Logger.Warn("worker: job discarded; its visibility timeout passed on its last attempt",
				"job", j.ID, "kind", j.Kind, "attempt", j.Attempt)
			continue
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim jobs from %s: %w", w.table, err)
	}
	w.stats.discarded.Add(int64(discarded))
	w.stats.claimed.Add(int64(len(jobs)))
	return jobs, nil
}

// run runs each job's handler in a goroutine of its own and returns their
// errors in job order.
func (w *Worker) run(ctx context.Context, jobs []*Job) []error {
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { errs[i] = w.runJob(ctx, job) })
	}
	wg.Wait()
	return errs
}

func (w *Worker) runJob(ctx context.Context, job *Job) (err error) {
	defer func() {
		// Caught by TestJobs/PanickingHandlerFailsOnlyItsAttempt.
		if r := recover(); r != nil {
			err = fmt.Errorf("handler for %s panicked: %v\n%s", job.Kind, r, debug.Stack())
		}
		if err != nil {
			w.stats.handlerErrors.Add(1)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, w.config.VisibilityTimeout)
	defer cancel()
	return w.config.Handlers[job.Kind].Work(ctx, job)
}

// completeSQL records a batch's outcomes in one statement. A row is
// updated only if it is still running under the same attempt: if its
// visibility timeout passed and another claim took it, this outcome is
// late and the newer claim owns the job. Caught by
// TestJobs/LateOutcomeOfAReclaimedJobIsNotRecorded; the retry delay by
// TestJobs/RetryWaitsItsDelay.
const completeSQL = `
UPDATE %[1]s AS j SET
	state           = u.state,
	run_at          = CASE WHEN u.state = 'available'
	                  THEN now() + u.delay_us * interval '1 microsecond' ELSE j.run_at END,
	finalized_at    = CASE WHEN u.state IN ('completed', 'discarded') THEN now() END,
	finalized_token = CASE WHEN u.state IN ('completed', 'discarded') THEN $6::bigint END,
	last_error      = COALESCE(u.err, j.last_error)
FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::text[], $5::bigint[]) AS u(id, attempt, state, err, delay_us)
WHERE j.id = u.id AND j.attempt = u.attempt AND j.state = 'running'
RETURNING j.state`

// complete records the outcomes of jobs under term, in a transaction that
// first checks the term's fencing token when the lease can fence.
func (w *Worker) complete(ctx context.Context, term lease.Term, jobs []*Job, errs []error) (err error) {
	n := len(jobs)
	rep := completeReport{Term: term, Jobs: n}
	defer func() {
		rep.Err = err
		w.signals.completed.Signal(rep)
	}()
	ids := make([]int64, n)
	attempts := make([]int32, n)
	states := make([]string, n)
	errTexts := make([]pgtype.Text, n)
	delays := make([]int64, n)
	for i, j := range jobs {
		ids[i], attempts[i] = j.ID, int32(j.Attempt)
		switch {
		case errs[i] == nil:
			states[i] = StateCompleted
		// Attempts run out. Caught by
		// TestJobs/FailingJobIsRetriedThenDiscardedAfterMaxAttempts.
		case j.Attempt >= j.MaxAttempts:
			states[i] = StateDiscarded
		default:
			states[i] = StateAvailable
			delays[i] = w.config.RetryDelay(j.Attempt).Microseconds()
		}
		if errs[i] != nil {
			errTexts[i] = pgtype.Text{String: errs[i].Error(), Valid: true}
			w.config.Logger.Warn("worker: job attempt failed", "job", j.ID, "kind", j.Kind,
				"attempt", j.Attempt, "max_attempts", j.MaxAttempts, "next", states[i], "err", errs[i])
		}
	}

	// The outcomes are recorded even when Stop cancels the loop mid-batch:
	// the work has been done, and losing its record only causes a rerun.
	// Caught by TestJobs/StopRecordsTheOutcomesOfTheBatchInFlight.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completeTimeout)
	defer cancel()
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record outcomes of %d jobs: begin: %w", n, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	if w.fencer != nil {
		// The fence runs first, in the same transaction, so that a deposed
		// leader's outcomes never land. Caught by
		// TestJobs/StaleCompletionIsRejectedAndCounted.
		if err := w.fencer.Fence(ctx, tx, term); err != nil {
			if errors.Is(err, lease.ErrStaleToken) {
				rep.Stale = true
				w.stats.staleRejected.Add(int64(n))
				w.config.Logger.Warn("worker: outcomes rejected; a newer lease term was granted",
					"jobs", n, "token", term.Token, "err", err)
			}
			return fmt.Errorf("record outcomes of %d jobs under token %d: %w", n, term.Token, err)
		}
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(completeSQL, w.table), ids, attempts, states, errTexts, delays, term.Token)
	if err != nil {
		return fmt.Errorf("record outcomes of %d jobs: %w", n, err)
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("record outcomes of %d jobs: %w", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record outcomes of %d jobs: commit: %w", n, err)
	}
	for _, s := range recorded {
		switch s {
		case StateCompleted:
			w.stats.completed.Add(1)
		case StateAvailable:
			w.stats.retried.Add(1)
		case StateDiscarded:
			w.stats.discarded.Add(1)
			rep.Discarded++
		}
	}
	rep.Recorded = len(recorded)
	if lost := n - len(recorded); lost > 0 {
		w.stats.lostClaims.Add(int64(lost))
		w.config.Logger.Warn("worker: outcomes not recorded; the jobs were claimed again after their visibility timeout",
			"jobs", lost)
	}
	return nil
}
