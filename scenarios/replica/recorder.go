package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/scenarios/oracle"
)

// workRecorder is where a replica reports its leader work: the oracle's
// Recorder (a built-in replica) or the protocol's SQL functions
// (sqlRecorder, a replica started as a command).
type workRecorder interface {
	Grant(ctx context.Context, token int64) error
	Begin(ctx context.Context, token int64, backendPID int32) (int64, error)
	End(ctx context.Context, id int64) error
	Event(ctx context.Context, kind, detail string) error
	Rejected(ctx context.Context, tx oracle.Querier, token int64) error
	SideEffectKey(ctx context.Context, tx oracle.Querier, token int64, fenced bool) (string, error)
	Ack(ctx context.Context, kind, key string, token int64) error
	JobRun(ctx context.Context, key string) error
	Close()
}

var (
	_ workRecorder = (*oracle.Recorder)(nil)
	_ workRecorder = (*sqlRecorder)(nil)
)

// sqlRecorder reports through the doublerun.* functions, as a replica in
// any other language does: the Go side of the protocol, which `doublerun
// replica` speaks so that a built-in lease can be measured through the
// command path.
type sqlRecorder struct {
	pool    *pgxpool.Pool
	replica string
}

func newSQLRecorder(ctx context.Context, dsn, replica string) (*sqlRecorder, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvOracleDSN, err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvOracleDSN, err)
	}
	return &sqlRecorder{pool: pool, replica: replica}, nil
}

func (r *sqlRecorder) Close() { r.pool.Close() }

func (r *sqlRecorder) Grant(ctx context.Context, token int64) error {
	_, err := r.pool.Exec(ctx, `SELECT doublerun.became_leader($1, $2)`, r.replica, token)
	return err
}

func (r *sqlRecorder) Begin(ctx context.Context, token int64, backendPID int32) (int64, error) {
	var id int64
	err := r.pool.QueryRow(ctx, `SELECT doublerun.work_begin($1, $2, $3)`, r.replica, token, backendPID).Scan(&id)
	return id, err
}

func (r *sqlRecorder) End(ctx context.Context, id int64) error {
	_, err := r.pool.Exec(ctx, `SELECT doublerun.work_end($1)`, id)
	return err
}

func (r *sqlRecorder) Event(ctx context.Context, kind, detail string) error {
	_, err := r.pool.Exec(ctx, `SELECT doublerun.event($1, $2, $3)`, r.replica, kind, detail)
	return err
}

// Rejected reads the refused transaction's times in it, as the Recorder
// does, and reports them on the oracle connection: the refused
// transaction rolls back, and a report made in it would too.
func (r *sqlRecorder) Rejected(ctx context.Context, tx oracle.Querier, token int64) error {
	var call, at time.Time
	if err := tx.QueryRow(ctx, `SELECT transaction_timestamp(), clock_timestamp()`).Scan(&call, &at); err != nil {
		_, err = r.pool.Exec(ctx, `SELECT doublerun.rejected($1, $2)`, r.replica, token)
		return err
	}
	_, err := r.pool.Exec(ctx, `SELECT doublerun.rejected($1, $2, $3, $4)`, r.replica, token, call, at)
	return err
}

func (r *sqlRecorder) SideEffectKey(ctx context.Context, tx oracle.Querier, token int64, fenced bool) (string, error) {
	var key string
	err := tx.QueryRow(ctx, `SELECT doublerun.side_effect_key($1, $2, $3)`, r.replica, token, fenced).Scan(&key)
	return key, err
}

func (r *sqlRecorder) Ack(ctx context.Context, kind, key string, token int64) error {
	_, err := r.pool.Exec(ctx, `SELECT doublerun.ack($1, $2, $3, $4)`, r.replica, kind, key, token)
	return err
}

func (r *sqlRecorder) JobRun(ctx context.Context, key string) error {
	_, err := r.pool.Exec(ctx, `SELECT doublerun.job_run($1, $2)`, r.replica, key)
	return err
}
