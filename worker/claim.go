package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/doublerun/doublerun/lease"
)

// claimSQL claims due jobs in ONE statement. The CTE locks the rows it
// picks and SKIPs rows another claimer has locked, so concurrent claimers
// never take the same job and never wait for each other; the UPDATE marks
// them running with a visibility deadline before the statement's implicit
// transaction ends. Being a single statement, it needs no session state and
// is correct through transaction pooling.
//
// A running job whose deadline passed is due again: its claimer died, froze
// or lost its connection before recording an outcome. If that was its last
// attempt it is discarded instead of run again.
//
// The CTE reads the due index from the key after ($6, $7), the last key
// the previous claim took, instead of from its start: the index entries of
// jobs claimed before are dead but stay until VACUUM, and reading past
// them on every claim made a claim cost more the more jobs had been
// claimed. The UPDATE finds its rows through the primary key, by an array
// of the ids the CTE locked, and never through a join with the CTE: a join
// let the planner seq-scan the whole table for a large batch on a small
// table (BatchSize 1000 on 10,000 jobs, a cost that then grew with every
// completed job), or repeat an index scan of the whole batch once per row
// (a plan it chose from a fresh ANALYZE, 25,000 buffers for 100 jobs).
// RETURNING gives the greatest key the CTE took, before the UPDATE moved
// run_at, for the next claim to start after.
//
// Caught: SKIP LOCKED by TestJobs/ClaimSkipsJobsLockedByAnotherClaimer;
// reclaiming running jobs and the visibility deadline by
// TestJobs/ClaimedJobIsClaimedAgainAfterItsVisibilityTimeout; the discard
// by TestJobs/JobTimedOutOnItsLastAttemptIsDiscarded; run_at <= now() by
// TestJobs/FutureJobWaitsForItsRunAt; the kind filter by
// TestJobs/UnknownKindsAreLeftAlone; reading from the key after the last
// claim by TestClaim/ReadsNoDeadEntriesOfEarlierClaims; finding the rows
// through the primary key by TestClaim/FindsTheBatchThroughThePrimaryKey.
const claimSQL = `
WITH due AS MATERIALIZED (
	SELECT id, run_at FROM %[1]s
	WHERE state IN ('available', 'running') AND run_at <= now() AND kind = ANY($1::text[])
	  AND (run_at, id) > ($6::timestamptz, $7::bigint)
	ORDER BY run_at, id
	LIMIT $2::integer
	FOR UPDATE SKIP LOCKED
), last AS (
	SELECT run_at, id FROM due ORDER BY run_at DESC, id DESC LIMIT 1
)
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
WHERE id = ANY(ARRAY(SELECT id FROM due))
RETURNING id, kind, args, attempt, max_attempts, created_at, state, (SELECT run_at FROM last), (SELECT id FROM last)`

// claimKey is a job's key in the due index: where a claim stopped, and so
// where the next one may start.
type claimKey struct {
	runAt time.Time
	id    int64
}

// timestamptz encodes the key's run_at; the zero key is the start of the
// index, before any job's run_at.
func (k claimKey) timestamptz() pgtype.Timestamptz {
	if k == (claimKey{}) {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: k.runAt, Valid: true}
}

// claimed is what one claim took.
type claimed struct {
	// jobs are the jobs to run.
	jobs []*Job
	// rows counts every row the claim took, jobs discarded at their
	// visibility timeout too: rows == the limit means the claim came back
	// full and more may be due.
	rows int
	// last is the greatest key taken; zero when rows is 0.
	last claimKey
}

// claimFrom claims up to limit due jobs under term, reading the due index
// from the key after from (the zero key: from its start).
func (w *Worker) claimFrom(ctx context.Context, term lease.Term, limit int, from claimKey) (claimed, error) {
	rows, err := w.db.Query(ctx, fmt.Sprintf(claimSQL, w.table),
		w.kinds, limit, w.config.VisibilityTimeout.Microseconds(), w.config.ID, term.Token,
		from.timestamptz(), from.id)
	if err != nil {
		return claimed{}, fmt.Errorf("claim jobs from %s: %w", w.table, err)
	}
	defer rows.Close() // unread rows would hold the connection, and the pool's Close waits for it
	var c claimed
	discarded := 0
	for rows.Next() {
		j := &Job{}
		var args []byte
		var state string
		if err := rows.Scan(&j.ID, &j.Kind, &args, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &state, &c.last.runAt, &c.last.id); err != nil {
			rows.Close()
			return claimed{}, fmt.Errorf("claim jobs from %s: scan: %w", w.table, err)
		}
		c.rows++
		j.Args = json.RawMessage(args)
		if state == StateDiscarded {
			discarded++
			w.config.Logger.Warn("worker: job discarded; its visibility timeout passed on its last attempt",
				"job", j.ID, "kind", j.Kind, "attempt", j.Attempt)
			continue
		}
		c.jobs = append(c.jobs, j)
	}
	if err := rows.Err(); err != nil {
		return claimed{}, fmt.Errorf("claim jobs from %s: %w", w.table, err)
	}
	w.stats.discarded.Add(int64(discarded))
	w.stats.claimed.Add(int64(len(c.jobs)))
	return c, nil
}
