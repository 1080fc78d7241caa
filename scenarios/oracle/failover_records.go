package oracle

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// A failover's records. On a stack with a standby the oracle's tables are
// on the third server, and the pair holds the side-effect writes and the
// token table's record (see "Across a primary failover" in the package
// documentation). A replica writes its side effect with SideEffectKey,
// and once its transaction commits it tells the oracle with Ack; a worker
// tells it of each enqueue and completion the same way, and of each start
// of a job with JobRun. LoadFailover reads the run back from both.

// SideEffectKey is SideEffect, and returns the key by which the write is
// acknowledged (Ack with AckWrite) and found again on the pair after a
// failover: its row's id.
func (r *Recorder) SideEffectKey(ctx context.Context, tx Querier, token int64, fenced bool) (string, error) {
	var key string
	err := tx.QueryRow(ctx, `INSERT INTO `+sideEffectsTable+` (replica, token, fenced) VALUES ($1, $2, $3) RETURNING id::text`,
		r.replica, token, fenced).Scan(&key)
	if err != nil {
		return "", fmt.Errorf("oracle: side-effect write: %w", err)
	}
	return key, nil
}

// Ack tells the oracle that this replica was acknowledged something of
// kind (AckWrite, AckEnqueue, AckCompleted) on the pair: call it after
// the commit returned, never before.
func (r *Recorder) Ack(ctx context.Context, kind, key string, token int64) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO `+acksTable+` (kind, replica, key, token) VALUES ($1, $2, $3, $4)`, kind, r.replica, key, token)
	if err != nil {
		return fmt.Errorf("oracle: ack %s %s: %w", kind, key, err)
	}
	return nil
}

// JobRun tells the oracle that this replica is starting the job called
// key.
func (r *Recorder) JobRun(ctx context.Context, key string) error {
	if _, err := r.pool.Exec(ctx, `INSERT INTO `+jobRunsTable+` (replica, key) VALUES ($1, $2)`, r.replica, key); err != nil {
		return fmt.Errorf("oracle: job run %s: %w", key, err)
	}
	return nil
}

// Rows is what LoadFailover reads through: a connection or a pool.
type Rows interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// LoadFailover reads back a run on a stack with a standby: what Load
// reads from the oracle's server (events, work, grants, refusals), the
// acknowledgements and job starts beside them, and from the pair's
// primary after the failover the side-effect writes that survived and
// the token table's record. h.Survivors names the surviving writes; the
// caller adds the jobs, which are the worker's to read.
func LoadFailover(ctx context.Context, oracleConn, pair Rows, start, end time.Time) (History, error) {
	h, err := Load(ctx, oracleConn, start, end)
	if err != nil {
		return h, err
	}
	h.Survivors = &Survivors{Writes: []string{}}
	rows, err := pair.Query(ctx, `SELECT id::text, replica, token, call, at, fenced FROM `+sideEffectsTable+` ORDER BY at, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load the surviving writes: %w", err)
	}
	var keys []string
	written, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Write, error) {
		w, key := Write{Accepted: true}, ""
		err := r.Scan(&key, &w.Replica, &w.Token, &w.Call, &w.At, &w.Fenced)
		keys = append(keys, key)
		return w, err
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load the surviving writes: %w", err)
	}
	h.Survivors.Writes = append(h.Survivors.Writes, keys...)
	h.Writes = append(h.Writes, written...)
	slices.SortStableFunc(h.Writes, func(a, b Write) int { return a.At.Compare(b.At) })
	rows, err = pair.Query(ctx, `SELECT kind, holder, token, call, ret FROM `+tokensTable+` ORDER BY call, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load the pair's token operations: %w", err)
	}
	h.TokenOps, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenOp, error) {
		var op TokenOp
		return op, r.Scan(&op.Kind, &op.Replica, &op.Token, &op.Call, &op.Return)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load the pair's token operations: %w", err)
	}
	rows, err = oracleConn.Query(ctx, `SELECT kind, replica, key, token, at FROM `+acksTable+` ORDER BY at, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load the acknowledgements: %w", err)
	}
	h.Acks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Ack, error) {
		var a Ack
		return a, r.Scan(&a.Kind, &a.Replica, &a.Key, &a.Token, &a.At)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load the acknowledgements: %w", err)
	}
	rows, err = oracleConn.Query(ctx, `SELECT replica, key, at FROM `+jobRunsTable+` ORDER BY at, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load the job starts: %w", err)
	}
	h.JobRuns, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobRun, error) {
		var j JobRun
		return j, r.Scan(&j.Replica, &j.Key, &j.At)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load the job starts: %w", err)
	}
	return h, nil
}
