package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/doublerun/doublerun/lease"
)

// The retention sweep's pace. A run deletes finished jobs in statements of
// retentionBatch until one comes back short or retentionBudget has passed;
// after a short one it waits retentionInterval, after running out of time
// it runs again on the next leader cycle, so that it keeps up with any
// rate of completions without holding a cycle up for long.
const (
	retentionInterval = time.Minute
	retentionBatch    = 10_000
	retentionBudget   = time.Second
)

// retentionSQL deletes up to $2 jobs that finished more than $1
// microseconds ago, oldest first, through the index of finished jobs.
// Caught: keeping jobs that finished within the window by
// TestRetention/DeletesOnlyJobsFinishedBeforeTheWindow.
const retentionSQL = `
DELETE FROM %[1]s WHERE id = ANY(ARRAY(
	SELECT id FROM %[1]s
	WHERE state IN ('completed', 'discarded') AND finalized_at < now() - $1::bigint * interval '1 microsecond'
	ORDER BY finalized_at
	LIMIT $2::integer))`

// retention is when the retention sweep is next due. Only the loop's
// goroutine touches it.
type retention struct {
	window time.Duration
	every  time.Duration
	next   time.Time // zero: due at once
}

func (r *retention) due(now time.Time) bool { return !now.Before(r.next) }

// retentionSweep deletes completed and discarded jobs older than
// Config.Retention. Deleting an old finished job twice, as two leaders of
// an overlap may try to, is harmless, so it needs no fence.
type retentionSweep struct{ w *Worker }

func (retentionSweep) Name() string { return "doublerun-retention" }

func (s retentionSweep) Sweep(ctx context.Context, _ lease.Term) error {
	w, r := s.w, s.w.keep
	begin := w.now()
	r.next = begin.Add(r.every)
	var total int64
	defer func() {
		w.stats.deleted.Add(total)
		if total > 0 {
			w.config.Logger.Debug("worker: deleted finished jobs past their retention", "jobs", total, "retention", r.window)
		}
	}()
	for {
		tag, err := w.db.Exec(ctx, fmt.Sprintf(retentionSQL, w.table), r.window.Microseconds(), retentionBatch)
		if err != nil {
			return fmt.Errorf("delete finished jobs older than %s from %s: %w", r.window, w.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < retentionBatch {
			return nil
		}
		if w.now().Sub(begin) >= retentionBudget {
			r.next = time.Time{} // more to delete: again next cycle
			return nil
		}
	}
}
