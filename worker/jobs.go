package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// tableNames is a jobs table's name and its indexes', sanitised.
type tableNames struct {
	table     string
	due       string // the claim's index
	finalized string // the retention sweep's index
}

// parseTable sanitises a table name, optionally schema-qualified, and
// derives its index names.
func parseTable(name string) (tableNames, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		return tableNames{}, fmt.Errorf("worker: table name %q must be table or schema.table", name)
	}
	base := parts[len(parts)-1]
	return tableNames{
		table:     pgx.Identifier(parts).Sanitize(),
		due:       pgx.Identifier{base + "_due"}.Sanitize(),
		finalized: pgx.Identifier{base + "_finalized"}.Sanitize(),
	}, nil
}

// Migrate creates the jobs table called table (DefaultTable if empty,
// "schema.table" accepted) and its indexes, if they do not exist yet. It is
// idempotent and safe to run from several replicas at once. On a table
// from an earlier version it adds the retention sweep's index, which
// blocks writes to the table while it is built.
func Migrate(ctx context.Context, db DB, table string) error {
	n, err := parseTable(cmp.Or(table, DefaultTable))
	if err != nil {
		return err
	}
	// run_at is when an available job becomes due and, while it runs, its
	// visibility deadline: one column makes "claimable" a single range of
	// one index, which holds only the jobs a claim may take (see the
	// package documentation, "Cost that does not grow"). Finished jobs are
	// in a second index, by the time they finished, for the retention
	// sweep.
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
CREATE INDEX IF NOT EXISTS %[4]s ON %[1]s (finalized_at) WHERE state IN ('completed', 'discarded');
`, n.table, n.due, DefaultMaxAttempts, n.finalized)
	if _, err := db.Exec(ctx, sql); err != nil && !lease.LostCreateRace(err) {
		return fmt.Errorf("worker: migrate jobs table %s: %w", n.table, err)
	}
	return nil
}

// Enqueue inserts jobs into table (DefaultTable if empty) in one statement
// and returns their IDs in the order given. Pass a pgx.Tx to enqueue
// atomically with other writes.
func Enqueue(ctx context.Context, db DB, table string, jobs ...NewJob) ([]int64, error) {
	n, err := parseTable(cmp.Or(table, DefaultTable))
	if err != nil {
		return nil, err
	}
	t := n.table
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
