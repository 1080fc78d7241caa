// Package worker runs leader-only work behind a lease: durable jobs from a
// Postgres table, and recurring sweeps. Every replica runs a Worker; the
// lease decides which one works.
//
// It is doublerun's port of the durable job worker of the service whose
// leader lease doublerun was built to test (the lease package's "the
// original"). Its loop, back-off and health rules are that worker's, and the
// gate tests pin them. It adds what the original deferred: it claims and
// runs jobs, because a user would expect a job worker to.
//
// # The cycle
//
// A Worker loops. Each cycle asks the lease once (through Acquire when the
// lease implements lease.Acquirer, else TryAcquire) and routes on its
// answer:
//
//	           +------------------------------+
//	+--------->|  lease.Acquire / TryAcquire  |
//	|          +------------------------------+
//	|            |             |            |
//	|         Leader       Follower      Faulted, or an error, a panic,
//	|            |             |         a timeout, an unknown status
//	|            v             |            |
//	|   claim, run, record     |            |
//	|    (see Jobs) -----------+------------+  a failed poll: a claim or a
//	|   run sweeps             |            |  record failed, or the fence
//	|    (each isolated)       |            |  said the term is stale
//	|            |             |            v
//	|            v             v         no stamp; back off
//	|       stamp the heartbeat          5 s, 10 s, 20 s, ... capped at 5 min
//	|            |                          |
//	|            v                          |
//	|     wait PollInterval (30 s);         |
//	|     nothing when the last claim       |
//	|     came back full, or the lease      |
//	|     waited in Acquire                 |
//	|            |                          |
//	+------------+--------------------------+
//
// A follower stamps the heartbeat: standing down is its correct job, so it
// must not read as a stall. A faulted lease does not stamp: a replica that
// cannot reach the lease at all is not healthy, and a lasting fault must
// degrade health rather than pass for a follower. The original learnt this
// as a regression; the gate tests pin it.
//
// A lease that waits in Acquire has spent the poll interval (or whatever
// bound it documents) waiting already, so a Follower from it is asked again
// at once: the replica is always waiting in the lease, and takes over the
// moment the lease comes free instead of up to a poll interval later. Its
// wait must stay below LeaseTimeout, and, for health, below
// 3 × PollInterval.
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
// A leader claims up to BatchSize due jobs in ONE statement:
//
//	WITH due AS (SELECT id FROM jobs WHERE <due> AND (run_at, id) > <where the last claim stopped>
//	             ORDER BY run_at, id LIMIT n FOR UPDATE SKIP LOCKED)
//	UPDATE jobs SET state = 'running', attempt = attempt + 1, run_at = now() + visibility
//	FROM due WHERE jobs.id = due.id RETURNING ...
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
// Claiming, running and recording overlap:
//
//	claim ──> handlers, one goroutine each, at most MaxHandlers at once
//	  ^            │ outcomes
//	  │            v
//	  │       completer: one fenced transaction for every outcome waiting
//	  │
//	  └── again at once while claims come back full and handlers are free
//
// A claim takes jobs only for free handlers (MaxHandlers, default
// 2 × BatchSize, so that one batch runs while the next is claimed), and
// each job's handler starts as soon as it is claimed. A completer records
// outcomes as handlers finish, each transaction taking every outcome that
// is waiting, so that recording overlaps claiming and running: success
// completes a job, an error (or a panic) puts it back after RetryDelay, and
// the last allowed attempt's failure discards it.
//
// A leader claims again at once while claims come back full. It goes back
// to the lease at least every PollInterval, and within half of the time a
// Leader answer may be trusted (see Fencing), without waiting: the jobs in
// flight run on across cycles of the same term. They end, with their
// outcomes recorded, when a claim comes back short (the queue ran dry;
// the cycle stamps only once they are recorded), when a recording fails,
// on Stop, and when the lease answers anything but Leader of the same term:
// their handlers are then cancelled at once, since no answer covers them
// any more, and their outcomes are recorded under the term they were
// claimed in, where the fence decides. Outcomes are always recorded under
// the term of their claim, never a later one.
//
// # Cost that does not grow
//
// A job table is a queue, and a queue in Postgres piles up dead tuples:
// every claim and every completion writes a new row version, and the index
// entries of the old versions stay until VACUUM, which autovacuum runs only
// after a fifth of the table has changed and at most once a minute.
//
//   - The due index, (run_at, id) WHERE state IN ('available', 'running'),
//     holds only jobs a claim may take: finished jobs leave it. A running
//     job's run_at is its visibility deadline, so one range of one index
//     is every claimable job, and a dead leader's jobs come back through
//     the same statement.
//   - The dead entries of claimed jobs sit at the start of that index, where
//     every claim used to begin reading: each claim read past all the jobs
//     claimed since the last VACUUM, so it cost more the more jobs had been
//     processed. A claim now reads on from the key after the last one the
//     previous claim took (the row comparison is an index condition), and
//     only reads from the start when a pipeline begins and at least every
//     second while claims stay full, so that a job whose key lies behind
//     that point (enqueued with a past run_at, or back from a visibility
//     timeout) waits a second at most.
//   - The claim joins its rows back to the table through an index
//     condition on the primary key. With a plain join the planner
//     seq-scanned the whole table for a batch of 1,000 on a table small
//     enough, a cost that then grew with every completed job.
//   - Completed and discarded jobs stay for Retention (default 24 h) and are
//     then deleted by a sweep the leader runs at most once a minute, in
//     statements of 10,000 through a second index, (finalized_at) WHERE
//     state IN ('completed', 'discarded'), so the table does not grow with
//     history either. A run that runs out of its one-second budget runs
//     again on the next cycle.
//
// The claim's plan, printed by `make bench BENCH_FLAGS='--explain --batches 100
// --backlogs 1000000 --topologies direct'` (auto_explain with ANALYZE and
// BUFFERS; Postgres 15, a backlog of 1,000,000, batch 100), after a worker
// had run a while. Before, after 348,400 completed jobs (PollInterval 1 ms,
// 30 s), every claim read past their dead entries:
//
//	Update on doublerun_jobs (actual time=3.518..4.192 rows=100)
//	  Buffers: shared hit=2643 read=1 dirtied=4 written=3
//	  ->  Nested Loop (actual time=3.468..3.670 rows=100)
//	        ->  HashAggregate (actual time=3.456..3.472 rows=100)
//	              ->  Subquery Scan on "ANY_subquery"
//	                    ->  Limit (actual time=3.335..3.411 rows=100)
//	                          ->  LockRows (actual time=3.334..3.404 rows=100)
//	                                ->  Index Scan using doublerun_jobs_due (actual time=3.313..3.350 rows=100)
//	                                      Index Cond: (run_at <= now())
//	                                      Buffers: shared hit=1341 read=1 dirtied=1
//	        ->  Index Scan using doublerun_jobs_pkey (actual time=0.001..0.001 rows=1 loops=100)
//	              Index Cond: (id = "ANY_subquery".id)
//	              Buffers: shared hit=400
//
// After, with 411,400 completed jobs (10 s), a claim from where the last
// stopped reads 5 buffers of the due index, whatever the history:
//
//	Update on doublerun_jobs (actual time=0.200..0.616 rows=100)
//	  Buffers: shared hit=1190 read=1 dirtied=2 written=1
//	  CTE due
//	    ->  Limit (actual time=0.037..0.112 rows=100)
//	          ->  LockRows (actual time=0.037..0.106 rows=100)
//	                ->  Index Scan using doublerun_jobs_due (actual time=0.027..0.065 rows=100)
//	                      Index Cond: ((run_at <= now()) AND (ROW(run_at, id) > ROW('2026-11-30 10:54:53.451301+00', '411600')))
//	                      Buffers: shared hit=4 read=1 dirtied=1 written=1
//	  CTE last
//	    ->  Limit (actual time=0.021..0.022 rows=1)
//	          ->  Sort (top-N heapsort) ->  CTE Scan on due
//	  InitPlan 5 (returns $5)
//	    ->  CTE Scan on due due_1 (actual time=0.038..0.130 rows=100)
//	  ->  Index Scan using doublerun_jobs_pkey (actual time=0.147..0.240 rows=100)
//	        Index Cond: (id = ANY ($5))
//	        Buffers: shared hit=406 read=1 dirtied=1 written=1
//
// The claim that reads from the start, the first of a pipeline and then
// one a second, still pays for the dead entries (there: 2,363 buffers of
// the due index, 13 ms), until autovacuum removes them.
//
// `make bench` measures jobs/s and jobs per CPU-second over batch sizes,
// backlogs and topologies, and --history drains a backlog in segments; see
// `doublerun bench --help` and the README.
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
// lease implements lease.Fencer, every transaction that records outcomes
// calls Fence first, so a deposed leader's completions are rolled back,
// counted in Stats.StaleRejected, and left to the visibility timeout for
// the new leader to claim again. A handler can fence its own writes the
// same way with Fence, on a transaction against the lease's database.
//
// lease.Fenced's fence takes a row lock that holds off the lease's next
// grant until the transaction ends, so that a write that passed the fence
// lands before any newer leader exists. The worker fences last, just
// before COMMIT, and its transaction asks the server to end it if the
// worker sits idle in it for five seconds (idle_in_transaction_session_timeout,
// SET LOCAL): a worker paused inside it, by SIGSTOP or a stalled VM, holds
// off the next leader for five seconds, not for as long as the pause. Its
// outcomes are then lost, and its jobs run again after their visibility
// timeout.
//
// A lease that also knows until when its Leader answer may be trusted (it
// has a Deadline() time.Time method, as lease.Fenced does) bounds the
// leader work: the context of the cycle's sweeps, and of the handlers of
// the jobs it claims, ends at that deadline, because past it another
// replica may lead. Fencing still guards what lands after it.
//
// # Start and Stop
//
// Start returns once the loop's goroutine runs; Stop returns once it has
// ended and the jobs in flight have had their outcomes recorded. Both are
// idempotent and safe from many goroutines. Close also closes the pool the
// worker opened. The caller owns the lease and closes it after the worker.
package worker
