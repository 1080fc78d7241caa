// Package worker runs leader-only work behind a lease: durable jobs from a
// Postgres table, and recurring sweeps. Every replica runs a Worker; the
// lease decides which one works.
//
// It is doublerun's port of the original service's durable job worker (see
// SPEC.md), with one addition the original deferred: it claims and runs
// jobs, because a user would expect a job worker to.
//
// # The cycle
//
// A Worker loops. Each cycle asks the lease once and routes on its answer:
//
//	           +--------------------+
//	+--------->|  lease.TryAcquire  |
//	|          +--------------------+
//	|            |        |        |
//	|         Leader  Follower  Faulted, or an error, a panic,
//	|            |        |        |  a timeout, an unknown status
//	|            v        |        |
//	|   claim due jobs    |        |
//	|   run handlers      |        |
//	|   record outcomes --+--------+  a failed poll: the claim or
//	|    (fenced)         |        |  the record failed, or the
//	|   run sweeps        |        |  fence said the term is stale
//	|    (each isolated)  |        |
//	|            |        |        v
//	|            v        v     no stamp; back off
//	|       stamp the heartbeat  5 s, 10 s, 20 s, ... capped at 5 min
//	|            |                 |
//	|            v                 |
//	|     wait PollInterval (30 s) |
//	|            |                 |
//	+------------+-----------------+
//
// A follower stamps the heartbeat: standing down is its correct job, so it
// must not read as a stall. A faulted lease does not stamp: a replica that
// cannot reach the lease at all is not healthy, and a lasting fault must
// degrade health rather than pass for a follower. The original learnt this
// as a regression; the gate tests pin it.
//
// A lease is trusted with nothing. An error, a panic, a call that outlasts
// LeaseTimeout or a status it does not know all count as Faulted, and the
// loop carries on.
//
// # Health
//
// HealthHandler serves JSON: status (healthy or degraded), role, last
// heartbeat and reason. It is degraded if the worker never started, has
// stopped, or stamped nothing for more than 3 × PollInterval. It answers
// 200 either way, as the original did, unless DegradedStatusCode says 503.
//
// # Jobs
//
// Jobs live in one table (Migrate creates it; the name is configurable) and
// are added with Enqueue, which also takes a pgx.Tx so that a job can be
// enqueued atomically with the write that calls for it.
//
// A leader claims up to BatchSize due jobs in ONE statement,
//
//	UPDATE jobs SET state = 'running', attempt = attempt + 1, run_at = now() + visibility
//	WHERE id IN (SELECT id FROM jobs WHERE <due> ORDER BY run_at LIMIT n FOR UPDATE SKIP LOCKED)
//	RETURNING ...
//
// SKIP LOCKED lets two claimers (two leaders during an overlap, or several
// workers by design) take disjoint jobs without waiting for each other.
// Being one statement, the claim needs no session state, no SET, no
// prepared statement and no transaction spanning round trips, so it is
// correct through PgBouncer in transaction pooling. For the same reason the
// pool the worker opens from Config.DSN uses pgx.QueryExecModeExec: pgx's
// default statement cache fails through PgBouncer below 1.21 with SQLSTATE
// 42P05.
//
// The handlers of a batch run concurrently. Their outcomes are then
// recorded in one transaction: success completes a job, an error (or a
// panic) puts it back after RetryDelay, and the last allowed attempt's
// failure discards it.
//
// # At least once, never exactly once
//
// A claimed job is invisible to other claims only until its visibility
// timeout. If its leader dies, freezes or loses its connection before
// recording the outcome, the job is claimed again when the timeout passes:
// that is how no job is lost, and it is also how a job can run twice. It
// can run twice in other ways too: a leader can finish the work and crash
// before the completion commits, and a paused leader can resume after its
// lease expired. The worker therefore promises at-least-once delivery, and
// exactly-once appears nowhere.
//
// Write handlers to be idempotent:
//
//   - Make the effect a state, not a delta: "set status = shipped", not
//     "add one to shipped". Upsert with ON CONFLICT on a key derived from
//     the job (its ID, or a business key in its args).
//   - Record the effect and the fact that it happened in the same
//     transaction, and check for the record first.
//   - For effects outside the database, pass an idempotency key derived
//     from the job ID, so that the receiver can drop a repeat.
//   - Honour ctx: it ends at the visibility timeout, after which another
//     replica may already be running the job.
//
// Sweeps follow the same rule: they run every leader cycle, and during a
// leadership overlap they run on two replicas at once.
//
// # Fencing
//
// A lease is a promise about time, and a paused process cannot keep it: a
// leader can stall (GC, SIGSTOP, a slow disk) past its lease, another
// replica takes over, and the first then resumes believing it still leads.
// Only a token that rises with every grant, checked where the write lands,
// makes this safe (Kleppmann).
//
// Every leader cycle carries its lease.Term; TermFromContext returns it to
// handlers and sweeps, and sweeps also receive it as an argument. When the
// lease implements lease.Fencer, the transaction that records outcomes
// calls Fence first, so a deposed leader's completions are rolled back,
// counted in Stats.StaleRejected, and left to the visibility timeout for
// the new leader to claim again. A handler can fence its own writes the
// same way with Fence, on a transaction against the lease's database.
//
// A lease that also knows until when its Leader answer may be trusted (it
// has a Deadline() time.Time method, as lease.Fenced does) bounds the
// leader work: the context of the cycle's handlers and sweeps ends at that
// deadline, because past it another replica may lead. Fencing still
// guards what lands after it.
//
// # Start and Stop
//
// Start returns once the loop's goroutine runs; Stop returns once it has
// ended and the cycle in flight has recorded its outcomes. Both are
// idempotent and safe from many goroutines. Close also closes the pool the
// worker opened. The caller owns the lease and closes it after the worker.
package worker
