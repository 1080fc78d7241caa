package worker

import "sync/atomic"

// counters back Stats.
type counters struct {
	cycles, polls, heartbeats, faults, leaseErrors, pollErrors atomic.Int64
	sweeps, sweepErrors                                        atomic.Int64
	claimed, completed, retried, discarded, handlerErrors      atomic.Int64
	staleRejected, lostClaims, deleted                         atomic.Int64
}

// Stats are the worker's counters since New. They only grow.
type Stats struct {
	// Cycles is the number of finished loop cycles.
	Cycles int64
	// Polls counts leader cycles that started work.
	Polls int64
	// Heartbeats counts stamps (successful leader and follower cycles).
	Heartbeats int64
	// Faults counts cycles whose lease was Faulted, erred or panicked.
	Faults int64
	// LeaseErrors counts lease calls that returned an error or panicked.
	LeaseErrors int64
	// PollErrors counts polls that failed to claim or record jobs.
	PollErrors int64
	// Sweeps counts sweep runs; SweepErrors those that failed or panicked.
	Sweeps      int64
	SweepErrors int64
	// JobsClaimed counts claims, a job claimed twice counting twice.
	JobsClaimed int64
	// JobsCompleted counts completions recorded in the table.
	JobsCompleted int64
	// JobsRetried counts failed attempts put back for a retry.
	JobsRetried int64
	// JobsDiscarded counts jobs given up after their last attempt.
	JobsDiscarded int64
	// HandlerErrors counts handler runs that returned an error or panicked.
	HandlerErrors int64
	// StaleRejected counts job outcomes the fence rejected because a newer
	// term had been granted: stale completions that did not land.
	StaleRejected int64
	// LostClaims counts outcomes not recorded because the job had been
	// claimed again after its visibility timeout.
	LostClaims int64
	// JobsDeleted counts finished jobs the retention sweep deleted.
	JobsDeleted int64
}

// Stats returns the current counters.
func (w *Worker) Stats() Stats {
	c := &w.stats
	return Stats{
		Cycles: c.cycles.Load(), Polls: c.polls.Load(), Heartbeats: c.heartbeats.Load(),
		Faults: c.faults.Load(), LeaseErrors: c.leaseErrors.Load(), PollErrors: c.pollErrors.Load(),
		Sweeps: c.sweeps.Load(), SweepErrors: c.sweepErrors.Load(),
		JobsClaimed: c.claimed.Load(), JobsCompleted: c.completed.Load(), JobsRetried: c.retried.Load(),
		JobsDiscarded: c.discarded.Load(), HandlerErrors: c.handlerErrors.Load(),
		StaleRejected: c.staleRejected.Load(), LostClaims: c.lostClaims.Load(), JobsDeleted: c.deleted.Load(),
	}
}
