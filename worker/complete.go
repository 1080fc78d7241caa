package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/doublerun/doublerun/lease"
)

// runJob runs job's handler, turning a panic into an error. The caller
// ends ctx at the job's visibility timeout at the latest, after which
// another claim may take the job.
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
	return w.config.Handlers[job.Kind].Work(ctx, job)
}

// outcomes are what the attempts of a set of jobs came to, one element per
// job; succeeded and failed give them to completedSQL and failedSQL.
type outcomes struct {
	ids      []int64
	attempts []int32
	states   []string // completed, available (retry) or discarded
	errs     []pgtype.Text
	delays   []int64 // microseconds until a retried job is due again
}

// buildOutcomes says what each job's attempt came to, given its handler's
// error: success completes it, a failure puts it back after retryDelay,
// and the failure of its last allowed attempt discards it. It touches
// nothing outside its arguments.
func buildOutcomes(jobs []*Job, errs []error, retryDelay func(attempt int) time.Duration) outcomes {
	n := len(jobs)
	o := outcomes{
		ids: make([]int64, n), attempts: make([]int32, n), states: make([]string, n),
		errs: make([]pgtype.Text, n), delays: make([]int64, n),
	}
	for i, j := range jobs {
		o.ids[i], o.attempts[i] = j.ID, int32(j.Attempt)
		switch {
		case errs[i] == nil:
			o.states[i] = StateCompleted
		// Attempts run out. Caught by
		// TestJobs/FailingJobIsRetriedThenDiscardedAfterMaxAttempts.
		case j.Attempt >= j.MaxAttempts:
			o.states[i] = StateDiscarded
		default:
			o.states[i] = StateAvailable
			o.delays[i] = retryDelay(j.Attempt).Microseconds()
		}
		if errs[i] != nil {
			o.errs[i] = pgtype.Text{String: errs[i].Error(), Valid: true}
		}
	}
	return o
}

// The outcomes are recorded by two statements, one for the jobs that
// succeeded and one for those that failed, each finding its rows through
// the primary key by an array of IDs and joining nothing. Joined with
// unnest() of the outcomes, the planner, misled by statistics that saw no
// running job, seq-scanned the table (a cost that grew with every
// completed job) or rescanned the outcomes once per row.
//
// A row is updated only if it is still running under the same attempt: if
// its visibility timeout passed and another claim took it, this outcome is
// late and the newer claim owns the job.

// completedSQL completes the jobs that succeeded and returns their IDs
// (Config.Completed). $2 holds "id/attempt"
// of each; = ANY over an array of constants is a hash lookup. Caught: the
// attempt by TestJobs/LateOutcomeOfAReclaimedJobIsNotRecorded; the
// primary key by TestComplete/FindsTheJobsThroughThePrimaryKey.
const completedSQL = `
UPDATE %[1]s SET state = 'completed', finalized_at = now(), finalized_token = $3::bigint
WHERE id = ANY(ARRAY(SELECT unnest($1::bigint[]))) AND state = 'running'
  AND (id::text || '/' || attempt::text) = ANY($2::text[])
RETURNING id`

// failedSQL puts back or discards the jobs that failed. $1 maps each job's
// ID to its outcome, {"<id>": {"a": attempt, "s": state, "d": delay in µs,
// "e": error}}. Caught: the attempt by
// TestJobs/LateFailureOfAReclaimedJobIsNotRecorded; the retry delay by
// TestJobs/RetryWaitsItsDelay; the primary key by
// TestComplete/FindsTheJobsThroughThePrimaryKey.
const failedSQL = `
UPDATE %[1]s AS j SET (state, run_at, finalized_at, finalized_token, last_error) = (
	SELECT o.s,
	       CASE WHEN o.s = 'available'
	       THEN now() + o.d * interval '1 microsecond' ELSE j.run_at END,
	       CASE WHEN o.s = 'discarded' THEN now() END,
	       CASE WHEN o.s = 'discarded' THEN $2::bigint END,
	       COALESCE(o.e, j.last_error)
	FROM jsonb_to_record($1::jsonb -> j.id::text) AS o(a integer, s text, d bigint, e text))
WHERE j.id = ANY(ARRAY(SELECT jsonb_object_keys($1::jsonb)::bigint))
  AND j.state = 'running' AND j.attempt = ($1::jsonb -> j.id::text ->> 'a')::integer
RETURNING j.state`

// succeeded returns the IDs of the jobs that succeeded and their
// "id/attempt" keys, for completedSQL.
func (o outcomes) succeeded() (ids []int64, keys []string) {
	for i, id := range o.ids {
		if o.states[i] == StateCompleted {
			ids = append(ids, id)
			keys = append(keys, strconv.FormatInt(id, 10)+"/"+strconv.Itoa(int(o.attempts[i])))
		}
	}
	return ids, keys
}

// failed encodes the outcomes of the jobs that failed as failedSQL's map,
// or returns "" when none failed. A job that appears twice (claimed again
// by the same worker after its visibility timeout) keeps its newest
// attempt's outcome: the older one could not be recorded anyway.
func (o outcomes) failed() string {
	newest := make(map[int64]int)
	for i, id := range o.ids {
		if o.states[i] == StateCompleted {
			continue
		}
		if k, ok := newest[id]; !ok || o.attempts[i] > o.attempts[k] {
			newest[id] = i
		}
	}
	if len(newest) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for i, id := range o.ids {
		if k, ok := newest[id]; !ok || k != i {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, `"%d":{"a":%d,"s":"%s","d":%d`, id, o.attempts[i], o.states[i], o.delays[i])
		if o.errs[i].Valid {
			e, _ := json.Marshal(o.errs[i].String) // a string always marshals
			b.WriteString(`,"e":`)
			b.Write(e)
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.String()
}

// completeStall bounds how long the transaction that records outcomes may
// sit idle on the server between two of its statements: a worker paused
// mid-way (SIGSTOP, a stalled VM) has it ended by the server, so that the
// fence's row lock, which holds off the lease's next grant, does not hold
// it off for as long as the pause lasts. The outcomes are then lost and
// their jobs run again after their visibility timeout.
//
// It must sit above what a loaded host leaves between two statements, or
// the server ends healthy completions. It was a second: beside two CPU
// hogs, make test lost completions to it (SQLSTATE 25P03) in four tests
// of one run. With the worker's tests run twice at once beside make test
// and two hogs (load average 33), the starts of a completion's
// consecutive statements were p50 5 ms, p90 188 ms, p99 921 ms and at
// most 9.3 s apart (1,065 spans, server time included), and 25P03 struck
// again. Five seconds is a third of the fenced lease's default TTL: a
// paused worker adds at most that to the leaderless time.
const completeStall time.Duration = 5e9 // 5 s, written without an operator: gremlins cannot cover a constant's mutant

// completeBeginSQL starts that transaction. SET LOCAL lasts for the
// transaction only, so it is correct through transaction pooling, and pgx
// sends the two statements in one simple-protocol round trip. Caught by
// TestComplete/StalledWorkerDoesNotHoldOffTheNextLeader.
var completeBeginSQL = fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", completeStall.Milliseconds())

// complete records the outcomes of jobs under term, in a transaction that
// checks the term's fencing token before it commits when the lease can
// fence.
func (w *Worker) complete(ctx context.Context, term lease.Term, jobs []*Job, errs []error) (err error) {
	n := len(jobs)
	rep := completeReport{Term: term, Jobs: n}
	defer func() {
		rep.Err = err
		w.signals.completed.Signal(rep)
	}()
	o := buildOutcomes(jobs, errs, w.config.RetryDelay)
	for i, j := range jobs {
		if errs[i] != nil {
			w.config.Logger.Warn("worker: job attempt failed", "job", j.ID, "kind", j.Kind,
				"attempt", j.Attempt, "max_attempts", j.MaxAttempts, "next", o.states[i], "err", errs[i])
		}
	}

	// The outcomes are recorded even when Stop cancels the loop mid-batch:
	// the work has been done, and losing its record only causes a rerun.
	// Caught by TestJobs/StopRecordsTheOutcomesOfTheBatchInFlight.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completeTimeout)
	defer cancel()
	tx, err := w.db.BeginTx(ctx, pgx.TxOptions{BeginQuery: completeBeginSQL})
	if err != nil {
		return fmt.Errorf("record outcomes of %d jobs: begin: %w", n, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	var recorded []string
	record := func(sql string, args ...any) error {
		rows, err := tx.Query(ctx, fmt.Sprintf(sql, w.table), args...)
		if err != nil {
			return err
		}
		states, err := pgx.CollectRows(rows, pgx.RowTo[string])
		recorded = append(recorded, states...)
		return err
	}
	var completed []int64
	if ids, keys := o.succeeded(); len(ids) > 0 {
		rows, err := tx.Query(ctx, fmt.Sprintf(completedSQL, w.table), ids, keys, term.Token)
		if err == nil {
			completed, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			return fmt.Errorf("record outcomes of %d jobs: %w", n, err)
		}
		for range completed {
			recorded = append(recorded, StateCompleted)
		}
	}
	if failed := o.failed(); failed != "" {
		if err := record(failedSQL, failed, term.Token); err != nil {
			return fmt.Errorf("record outcomes of %d jobs: %w", n, err)
		}
	}
	if w.fencer != nil {
		// The fence runs in the same transaction, so that a deposed
		// leader's outcomes never land, and last, just before COMMIT: the
		// row lock it takes holds off the lease's next grant until the
		// transaction ends, and is held for one round trip. Caught by
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
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record outcomes of %d jobs: commit: %w", n, err)
	}
	// Only after the commit returned: a completion told of before it
	// could still roll back, and only when some job completed. Caught by
	// TestCompleted/NamesTheJobsWhoseCompletionLanded.
	if w.config.Completed != nil && len(completed) > 0 {
		w.config.Completed(ctx, completed)
	}
	w.count(recorded, &rep)
	if lost := n - len(recorded); lost > 0 {
		w.stats.lostClaims.Add(int64(lost))
		w.config.Logger.Warn("worker: outcomes not recorded; the jobs were claimed again after their visibility timeout",
			"jobs", lost)
	}
	return nil
}

// count adds the states the completion statement recorded to the stats.
func (w *Worker) count(recorded []string, rep *completeReport) {
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
}
