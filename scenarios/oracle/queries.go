package oracle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is a direct connection to a run's database, or a pool of them:
// what the oracle's queries and LogEvent run on.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is where a side-effect write lands: the leader's transaction on
// the work endpoint (pgx.Tx).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ErrNoWork is returned by LatestWork before any replica has begun a piece
// of leader work.
var ErrNoWork = errors.New("oracle: no replica has led yet")

// LatestWork returns the replica that most recently began a piece of
// leader work, and the backend its lease reported for that piece (0 when
// the strategy reports none). It returns ErrNoWork before any piece began.
func LatestWork(ctx context.Context, db Querier) (replica string, backendPID int32, err error) {
	err = db.QueryRow(ctx, `SELECT replica, backend_pid FROM `+workTable+` ORDER BY started_at DESC, id DESC LIMIT 1`).
		Scan(&replica, &backendPID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, ErrNoWork
	}
	if err != nil {
		return "", 0, fmt.Errorf("oracle: latest work: %w", err)
	}
	return replica, backendPID, nil
}

// WorkBegun reports whether replica is in a piece of leader work that began
// less than within ago on the oracle's clock and has not ended: the moment
// a fault strikes at.
func WorkBegun(ctx context.Context, db Querier, replica string, within time.Duration) (bool, error) {
	var begun bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+workTable+` WHERE replica = $1 AND ended_at IS NULL
		AND started_at > clock_timestamp() - $2::bigint * interval '1 millisecond')`, replica, within.Milliseconds()).Scan(&begun)
	if err != nil {
		return false, fmt.Errorf("oracle: work begun: %w", err)
	}
	return begun, nil
}

// OpenWork returns the replicas that are in a piece of leader work begun
// at or before at on the oracle's clock and not ended yet, in the order
// the pieces began: what a fault's heal left in flight.
func OpenWork(ctx context.Context, db Querier, at time.Time) ([]string, error) {
	var replicas []string
	err := db.QueryRow(ctx, `SELECT coalesce(array_agg(replica ORDER BY started_at, id), '{}') FROM `+workTable+`
		WHERE ended_at IS NULL AND started_at <= $1`, at).Scan(&replicas)
	if err != nil {
		return nil, fmt.Errorf("oracle: open work: %w", err)
	}
	return replicas, nil
}

// AnyWork reports whether any replica has begun a piece of leader work.
func AnyWork(ctx context.Context, db Querier) (bool, error) {
	var found bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+workTable+`)`).Scan(&found); err != nil {
		return false, fmt.Errorf("oracle: any work: %w", err)
	}
	return found, nil
}

// PiecesSince counts the pieces of leader work begun at or after t, on
// the oracle's clock: the runner measures until a fault is followed by
// the work the validity floor asks for (MinPieces).
func PiecesSince(ctx context.Context, db Querier, t time.Time) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+workTable+` WHERE started_at >= $1`, t).Scan(&n); err != nil {
		return 0, fmt.Errorf("oracle: pieces since %s: %w", t, err)
	}
	return n, nil
}

// GrantedSince reports whether a replica other than except has logged a
// grant of the lease at or after t, on the oracle's clock.
func GrantedSince(ctx context.Context, db Querier, except string, t time.Time) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+grantsTable+` WHERE replica <> $1 AND at >= $2)`, except, t).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("oracle: granted since %s: %w", t, err)
	}
	return found, nil
}

// StartedReplicas counts the replicas that have logged their start
// (EventReplicaStarted): a built-in replica once its lease is built, a
// command once its process runs.
func StartedReplicas(ctx context.Context, db Querier) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT replica) FROM `+eventsTable+` WHERE kind = $1`, EventReplicaStarted).Scan(&n); err != nil {
		return 0, fmt.Errorf("oracle: replicas started: %w", err)
	}
	return n, nil
}

// SideEffect makes the side-effect write of this replica's piece of work
// under token, through tx: the leader's own transaction on the work
// endpoint, which the fence checked first when fenced is true. The row
// keeps the transaction's start and the instant it was written, from the
// one statement, so the fence's check lies between them. Load reads the
// accepted writes back from where they landed; Rejected logs the ones the
// fence refused.
func (r *Recorder) SideEffect(ctx context.Context, tx Execer, token int64, fenced bool) error {
	if _, err := tx.Exec(ctx, `INSERT INTO `+sideEffectsTable+` (replica, token, fenced) VALUES ($1, $2, $3)`, r.replica, token, fenced); err != nil {
		return fmt.Errorf("oracle: side-effect write: %w", err)
	}
	return nil
}

// ClaimedLock returns the keys of the advisory lock some replica's lease
// named in a claim (EventLockClaim), and false before any did: how the
// runner learns the lock of a strategy that declares none.
func ClaimedLock(ctx context.Context, db Querier) (key1, key2 int32, ok bool, err error) {
	var detail string
	err = db.QueryRow(ctx, `SELECT detail FROM `+eventsTable+` WHERE kind = $1 ORDER BY id LIMIT 1`, EventLockClaim).Scan(&detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("oracle: claimed lock: %w", err)
	}
	_, key1, key2, err = ParseClaim(detail)
	if err != nil {
		return 0, 0, false, err
	}
	return key1, key2, true, nil
}
