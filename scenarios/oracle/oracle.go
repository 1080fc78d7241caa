package oracle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The oracle's tables, which no other package names: it reads and writes
// them only through this package. The side effects land through the work
// endpoint, whose database is in every topology the oracle's own.
const (
	workTable        = "doublerun_oracle_work"
	grantsTable      = "doublerun_oracle_grants"
	eventsTable      = "doublerun_oracle_events"
	rejectedTable    = "doublerun_oracle_rejected"
	sideEffectsTable = "doublerun_side_effects"
	tokensTable      = "doublerun_oracle_tokens"
	tokensFunction   = "doublerun_oracle_token_op"
	acksTable        = "doublerun_oracle_acks"
	jobRunsTable     = "doublerun_oracle_job_runs"
)

// schema is the oracle's tables and the function RecordTokens attaches to
// a lease's token table, with {names} that Migrate fills in (a
// concatenation outside a function would be a mutant no test runs).
//
// A write's call and at are transaction_timestamp() and clock_timestamp()
// of the one statement that makes it: the fence ran between them. Caught
// by TestWriteIntervals.
//
// The trigger function runs inside the statement that changed the row,
// so statement_timestamp() is when the server received that statement
// and clock_timestamp() is after the row was changed, and it commits or
// rolls back with it. Caught by
// TestAFencedWriteHoldsOffTheGrantInTheHistory. A changed token is a
// grant, a kept one a renewal (see fence.go). Caught by TestRecordTokens.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS {work} (
		id bigserial PRIMARY KEY, replica text NOT NULL, token bigint NOT NULL, backend_pid int NOT NULL DEFAULT 0,
		started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz)`,
	`CREATE TABLE IF NOT EXISTS {grants} (
		replica text NOT NULL, token bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
		PRIMARY KEY (replica, token))`,
	`CREATE TABLE IF NOT EXISTS {events} (
		id bigserial PRIMARY KEY, kind text NOT NULL, replica text NOT NULL DEFAULT '', detail text NOT NULL DEFAULT '',
		at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE TABLE IF NOT EXISTS {rejected} (
		id bigserial PRIMARY KEY, replica text NOT NULL, token bigint NOT NULL,
		call timestamptz NOT NULL DEFAULT clock_timestamp(), at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE TABLE IF NOT EXISTS {side_effects} (
		id bigserial PRIMARY KEY, replica text NOT NULL, token bigint NOT NULL, fenced boolean NOT NULL,
		call timestamptz NOT NULL DEFAULT transaction_timestamp(), at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE TABLE IF NOT EXISTS {tokens} (
		id bigserial PRIMARY KEY, kind text NOT NULL, holder text NOT NULL, token bigint NOT NULL,
		call timestamptz NOT NULL, ret timestamptz NOT NULL)`,
	`CREATE OR REPLACE FUNCTION {token_op}() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
	row_now jsonb := to_jsonb(NEW);
	token_before bigint;
BEGIN
	IF TG_OP = 'UPDATE' THEN
		token_before := (to_jsonb(OLD) ->> 'token')::bigint;
	END IF;
	INSERT INTO {tokens} (kind, holder, token, call, ret) VALUES (
		CASE WHEN token_before IS NOT DISTINCT FROM (row_now ->> 'token')::bigint THEN '{renewal}' ELSE '{grant}' END,
		coalesce(row_now ->> 'holder', ''), (row_now ->> 'token')::bigint, statement_timestamp(), clock_timestamp());
	RETURN NULL;
END
$fn$`,
	// The protocol of a replica that is a command (scenarios.ReplicaCommand):
	// the same rows a Recorder writes, written by the replica's own driver,
	// their times still from the server's clock. Caught by
	// TestProtocolFunctionsWriteWhatARecorderWrites.
	`CREATE SCHEMA IF NOT EXISTS doublerun`,
	`CREATE OR REPLACE FUNCTION doublerun.became_leader(replica text, token bigint) RETURNS void LANGUAGE sql AS $fn$
	INSERT INTO {grants} (replica, token) VALUES ($1, $2) ON CONFLICT DO NOTHING
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.work_begin(replica text, token bigint, backend_pid int DEFAULT 0) RETURNS bigint LANGUAGE sql AS $fn$
	INSERT INTO {grants} (replica, token) VALUES ($1, $2) ON CONFLICT DO NOTHING;
	INSERT INTO {work} (replica, token, backend_pid) VALUES ($1, $2, coalesce($3, 0)) RETURNING id
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.work_end(id bigint) RETURNS void LANGUAGE sql AS $fn$
	UPDATE {work} SET ended_at = clock_timestamp() WHERE {work}.id = $1 AND ended_at IS NULL
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.side_effect(replica text, token bigint, fenced boolean DEFAULT false) RETURNS void LANGUAGE sql AS $fn$
	INSERT INTO {side_effects} (replica, token, fenced) VALUES ($1, $2, coalesce($3, false))
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.rejected(replica text, token bigint, call timestamptz DEFAULT NULL, at timestamptz DEFAULT NULL) RETURNS void LANGUAGE sql AS $fn$
	INSERT INTO {rejected} (replica, token, call, at) VALUES ($1, $2, coalesce($3, clock_timestamp()), coalesce($4, clock_timestamp()))
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.event(replica text, kind text, detail text DEFAULT '') RETURNS timestamptz LANGUAGE sql AS $fn$
	INSERT INTO {events} (kind, replica, detail) VALUES ($2, $1, coalesce($3, '')) RETURNING at
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.lock_claim(replica text, backend_pid int, key1 int, key2 int) RETURNS void LANGUAGE sql AS $fn$
	INSERT INTO {events} (kind, replica, detail) VALUES ('{lock_claim}', $1, format('backend %s lock %s,%s', $2, $3, $4))
$fn$`,
	// A failover's records (loss.go): what a replica was acknowledged,
	// and each start of a job, on the oracle's server; the keyed
	// side-effect write, on the pair. Caught by
	// TestLoadFailoverReadsTheOracleAndThePair.
	`CREATE TABLE IF NOT EXISTS {acks} (
		id bigserial PRIMARY KEY, kind text NOT NULL, replica text NOT NULL, key text NOT NULL, token bigint NOT NULL DEFAULT 0,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE TABLE IF NOT EXISTS {job_runs} (
		id bigserial PRIMARY KEY, replica text NOT NULL, key text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE OR REPLACE FUNCTION doublerun.side_effect_key(replica text, token bigint, fenced boolean DEFAULT false) RETURNS text LANGUAGE sql AS $fn$
	INSERT INTO {side_effects} (replica, token, fenced) VALUES ($1, $2, coalesce($3, false)) RETURNING id::text
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.ack(replica text, kind text, key text, token bigint DEFAULT 0) RETURNS void LANGUAGE sql AS $fn$
	INSERT INTO {acks} (kind, replica, key, token) VALUES ($2, $1, $3, coalesce($4, 0))
$fn$`,
	`CREATE OR REPLACE FUNCTION doublerun.job_run(replica text, key text) RETURNS void LANGUAGE sql AS $fn$
	INSERT INTO {job_runs} (replica, key) VALUES ($1, $2)
$fn$`,
	`CREATE SEQUENCE IF NOT EXISTS doublerun.tokens`,
	`CREATE OR REPLACE FUNCTION doublerun.next_token() RETURNS bigint LANGUAGE sql AS $fn$ SELECT nextval('doublerun.tokens') $fn$`,
}

var schemaNames = strings.NewReplacer("{work}", workTable, "{grants}", grantsTable, "{events}", eventsTable,
	"{rejected}", rejectedTable, "{side_effects}", sideEffectsTable, "{tokens}", tokensTable, "{token_op}", tokensFunction,
	"{renewal}", TokenRenewal, "{grant}", TokenGrant, "{lock_claim}", EventLockClaim,
	"{acks}", acksTable, "{job_runs}", jobRunsTable)

// Migrate creates the oracle's tables. Run it on a direct connection.
func Migrate(ctx context.Context, conn *pgx.Conn) error {
	for _, ddl := range schema {
		if _, err := conn.Exec(ctx, schemaNames.Replace(ddl)); err != nil {
			return fmt.Errorf("oracle: migrate: %w", err)
		}
	}
	return nil
}

// Recorder logs one replica's leader work through a direct connection. It
// is safe for concurrent use.
type Recorder struct {
	pool    *pgxpool.Pool
	replica string
}

// NewRecorder connects to the direct DSN. Its statements use
// QueryExecModeExec, so a recorder works wherever it is pointed.
func NewRecorder(ctx context.Context, dsn, replica string) (*Recorder, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.RuntimeParams["application_name"] = "doublerun-oracle-" + replica
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	return &Recorder{pool: pool, replica: replica}, nil
}

// Close closes the connection.
func (r *Recorder) Close() { r.pool.Close() }

// Begin logs the start of a piece of work and returns its id for End.
func (r *Recorder) Begin(ctx context.Context, token int64, backendPID int32) (int64, error) {
	var id int64
	err := r.pool.QueryRow(ctx, `INSERT INTO `+workTable+` (replica, token, backend_pid) VALUES ($1, $2, $3) RETURNING id`,
		r.replica, token, backendPID).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("oracle: begin work: %w", err)
	}
	return id, nil
}

// End logs the end of the piece of work id.
func (r *Recorder) End(ctx context.Context, id int64) error {
	if _, err := r.pool.Exec(ctx, `UPDATE `+workTable+` SET ended_at = clock_timestamp() WHERE id = $1`, id); err != nil {
		return fmt.Errorf("oracle: end work: %w", err)
	}
	return nil
}

// Grant logs that this replica is leader under token; only the first call
// per token is kept.
func (r *Recorder) Grant(ctx context.Context, token int64) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO `+grantsTable+` (replica, token) VALUES ($1, $2) ON CONFLICT DO NOTHING`, r.replica, token)
	if err != nil {
		return fmt.Errorf("oracle: grant: %w", err)
	}
	return nil
}

// Rejected logs a side-effect write the fence refused, with the times of
// tx, the write's transaction, in which the fence just said no: from
// transaction_timestamp() (the fence ran after it) to clock_timestamp()
// (it ran before). If tx cannot tell them any more, the write is logged at
// the moment the oracle learns of it: a refusal only ever moves later that
// way, and tokens only rise, so the check's answer stays the same (see
// fence.go).
func (r *Recorder) Rejected(ctx context.Context, tx Querier, token int64) error {
	var call, at time.Time
	err := tx.QueryRow(ctx, `SELECT transaction_timestamp(), clock_timestamp()`).Scan(&call, &at)
	if err != nil {
		_, err = r.pool.Exec(ctx, `INSERT INTO `+rejectedTable+` (replica, token) VALUES ($1, $2)`, r.replica, token)
	} else {
		_, err = r.pool.Exec(ctx, `INSERT INTO `+rejectedTable+` (replica, token, call, at) VALUES ($1, $2, $3, $4)`, r.replica, token, call, at)
	}
	if err != nil {
		return fmt.Errorf("oracle: rejected write: %w", err)
	}
	return nil
}

// RecordTokens makes the server record every change to table, a lease's
// token table (a row per lease name with a token column that every grant
// raises, and optionally a holder column naming the replica), in the
// oracle's tokens table: each grant and renewal with the times of its own
// statement. Run it on the run's database before any replica starts, once
// table exists. Load reads the records back as History.TokenOps.
func RecordTokens(ctx context.Context, db Execer, table string) error {
	// "schema.table" names a table in a schema. DROP and CREATE rather
	// than CREATE OR REPLACE, which Postgres 13 lacks.
	on := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	for _, sql := range []string{
		`DROP TRIGGER IF EXISTS ` + tokensFunction + ` ON ` + on,
		`CREATE TRIGGER ` + tokensFunction + ` AFTER INSERT OR UPDATE ON ` + on + ` FOR EACH ROW EXECUTE FUNCTION ` + tokensFunction + `()`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("oracle: record the tokens of %s: %w", table, err)
		}
	}
	return nil
}

// Event logs an event about this replica.
func (r *Recorder) Event(ctx context.Context, kind, detail string) error {
	_, err := LogEvent(ctx, r.pool, kind, r.replica, detail)
	return err
}

// EventChaos is the event kind with which a fault logs the moments its
// steps really took hold (SIGSTOP delivered, partition in place, Postgres
// back up), beside the runner's own EventFault and EventHealed.
const EventChaos = "chaos"

// LogEvent logs an event through any direct connection and returns its
// time on the one clock.
func LogEvent(ctx context.Context, db Querier, kind, replica, detail string) (time.Time, error) {
	var at time.Time
	err := db.QueryRow(ctx, `INSERT INTO `+eventsTable+` (kind, replica, detail) VALUES ($1, $2, $3) RETURNING at`,
		kind, replica, detail).Scan(&at)
	if err != nil {
		return time.Time{}, fmt.Errorf("oracle: event %s: %w", kind, err)
	}
	return at, nil
}

// Load reads the history of a run measured from start to end. Work that
// was never ended ends at the replica's death (killed or stopped) after
// its start, else at end.
func Load(ctx context.Context, conn interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, start, end time.Time) (History, error) {
	h := History{Start: start, End: end}
	rows, err := conn.Query(ctx, `SELECT kind, replica, detail, at FROM `+eventsTable+` ORDER BY at, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load events: %w", err)
	}
	h.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		return e, r.Scan(&e.Kind, &e.Replica, &e.Detail, &e.At)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load events: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT replica, token, backend_pid, started_at, ended_at FROM `+workTable+` ORDER BY started_at, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load work: %w", err)
	}
	h.Intervals, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Interval, error) {
		var iv Interval
		var ended *time.Time
		if err := r.Scan(&iv.Replica, &iv.Token, &iv.BackendPID, &iv.Start, &ended); err != nil {
			return iv, err
		}
		if ended != nil {
			iv.End = *ended
		} else {
			iv.Open, iv.End = true, deathAfter(h.Events, iv.Replica, iv.Start, end)
		}
		return iv, nil
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load work: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT replica, token, at FROM `+grantsTable+` ORDER BY at`)
	if err != nil {
		return h, fmt.Errorf("oracle: load grants: %w", err)
	}
	h.Grants, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Grant, error) {
		var g Grant
		return g, r.Scan(&g.Replica, &g.Token, &g.At)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load grants: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT replica, token, call, at, true, fenced FROM `+sideEffectsTable+`
		UNION ALL SELECT replica, token, call, at, false, true FROM `+rejectedTable+` ORDER BY 4`)
	if err != nil {
		return h, fmt.Errorf("oracle: load writes: %w", err)
	}
	h.Writes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Write, error) {
		var w Write
		return w, r.Scan(&w.Replica, &w.Token, &w.Call, &w.At, &w.Accepted, &w.Fenced)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load writes: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT kind, holder, token, call, ret FROM `+tokensTable+` ORDER BY call, id`)
	if err != nil {
		return h, fmt.Errorf("oracle: load token operations: %w", err)
	}
	h.TokenOps, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenOp, error) {
		var op TokenOp
		return op, r.Scan(&op.Kind, &op.Replica, &op.Token, &op.Call, &op.Return)
	})
	if err != nil {
		return h, fmt.Errorf("oracle: load token operations: %w", err)
	}
	return h, nil
}

func deathAfter(events []Event, replica string, start, end time.Time) time.Time {
	for _, e := range events {
		if e.Replica == replica && (e.Kind == EventReplicaKilled || e.Kind == EventReplicaStopped) && e.At.After(start) {
			return e.At
		}
	}
	return end
}
