// Package scenarios runs competing replicas of a lease as real processes
// against a real stack and measures what users care about: how long two
// replicas did leader work at once (the double-run window) and how long
// none did (the leaderless window).
//
// The package is scenario data (scenario.go, scenario_file.go,
// topology.go, verdict.go, report.go, repro.go) and the runner, whose
// files are named run*: run.go (Run and the run's course), run_prepare.go,
// run_replicas.go, run_command.go, run_lockwatch.go, run_pathwatch.go,
// run_target.go and run_report.go. What a replica process is and does is
// package scenarios/replica; the strategies it can run are package
// scenarios/strategy; how this binary starts itself again as a replica
// (or as any other child) is package scenarios/reexec.
//
// # A scenario is data
//
// A [Scenario] names a strategy (package scenarios/strategy: advisory,
// advisory-unguarded, advisory-wait, fenced, fenced-wait, fenced-epoch, or one
// registered with strategy.Register), a topology, the number of replicas, timings, a fault
// of the catalog (package scenarios/fault) and an expectation. [Catalog]
// holds the built-in ones; [Issue556] and its fixes are the regression
// scenarios for the known limitation. A strategy.Strategy says what its lease is
// (ReportsBackendPID, AdvisoryLock), and [Scenario.FaultSetting] hands
// that, with the topology's shape and the timings, to the fault catalog as
// data: the catalog never imports this package.
//
// [Scenario.Validate] is the one check of a scenario, whether it comes
// from the catalog, a file ([ParseScenario]), the command line's flags or
// the chaos matrix: its name, a registered strategy, a known topology the
// strategy takes, a pool size only where there is a transaction pool, a
// fault of the catalog that applies, an expectation, and the numbers'
// ranges (replicas 1 to [MaxReplicas], and at least 2 when the
// expectation is a double-run; duration 1s to 1h; poll interval 1ms to
// 10s; work 1ms to 1m; TTL 100ms to 1m; a transaction pool of 1 to 16).
// Every complaint is a [FieldError] that names the field and what it
// takes (for a number, the range and why the bound it crossed is there),
// all of them on one line. A zero field is its default
// ([Scenario.WithDefaults]), applied once, where [Run] starts.
//
//	topology     lease endpoint            work endpoint
//	direct       postgres                  postgres
//	session      pgbouncer session pool    pgbouncer session pool
//	transaction  pgbouncer transaction     pgbouncer transaction
//	pinned       pgbouncer session pool    pgbouncer transaction   (the #556 fix)
//	alias        one pgbouncer, <db>_lease  the same one, <db>       (the fix on one
//	             in pool_mode=session       in pool_mode=transaction  bouncer)
//
// # Replicas are processes
//
// Each replica is the running binary started again (package
// scenarios/reexec), so SIGKILL and SIGSTOP are real and a user's own go
// test binary can take part: register the lease, then call reexec.Main
// first in TestMain (see example_test.go). run_replicas.go starts, watches and
// stops them; package scenarios/replica is what each one does. A replica runs a worker.Worker gated by
// its lease; the worker's one sweep is the leader work: log the start,
// work for Scenario.Work, make a side-effect write through the work
// endpoint in a transaction that first checks the fence, log the end.
// Replicas run in their own process group and die with the runner. A
// replica can also be a program of the user's own, in any language
// (Scenario.Replica, a replica.Command): package scenarios/replica says
// how it is started, what it is told and how it reports.
//
// # One clock
//
// Every timestamp comes from Postgres clock_timestamp(), written through a
// direct connection to the run's own database that no fault touches. See
// package oracle for the definitions of the windows; the leaderless window
// ignores gaps shorter than 2 × poll interval + 100 ms, a leader's own pause
// between cycles.
//
// # Verdict
//
//	safe                   no double-run and no accepted stale write
//	reproduces             a double-run must appear
//	fenced                 overlaps allowed, no accepted stale write
//	reproduces-or-orphans  a double-run or an orphaned lock must appear
//	                       (the advisory lock through a transaction pool
//	                       of several backends; a run with neither fails)
//	regresses              a token regression must appear (oracle.Loss):
//	                       the plain fence across a promotion that lost
//	                       its last grant; it needs a standby, and a run
//	                       whose failover lost no grant is INCONCLUSIVE
//
// A run whose measurements disagree with its expectation fails, in either
// direction; a run in which no replica ever led fails too, and so does one
// whose fence's history is not linearizable, whatever its expectation
// (package oracle, fence.go): the grants and renewals the server recorded
// in the strategy's token table (Strategy.TokenTable) and the fenced
// side-effect writes must have a legal order. The one exception is
// regresses, which expects a history with none: a token granted twice has
// no legal order, and that is the regression it asks for.
//
// A run that could not have shown a double-run is INCONCLUSIVE, neither a
// PASS nor a FAIL for want of one (Verdict.Inconclusive; the CLI exits 1
// with the failed condition and its fix). Its validity conditions
// (oracle.Validity, in metrics.validity) are computed from the history:
// two replicas alive from the fault to its heal plus a TTL (over the whole
// run without a fault), the fault family's own evidence that it struck
// its target, every replica's backend (built-in or a command's) arriving through its proxy
// or a bouncer of the run (the lock watcher's samples of pg_stat_activity
// by application_name, and the bouncers' SHOW SERVERS and SHOW CLIENTS),
// oracle.MinPieces pieces of work on each side of the fault, and, for a
// run judged by its stale writes alone (ExpectFenced) under a fault held
// to outlast the lease (fault.HeldFor: FREEZE_LEADER, PARTITION_LEADER,
// DELAY_LEADER, PGBOUNCER_PAUSE), a term newer than every one granted
// before the fault granted after it began (oracle.ConditionNewerTerm):
// without one the lease outlasted the fault and no write could have been
// stale, which is how River's 15s lease passed the matrix's 3s faults.
// The expectation and the fault's hold reach the oracle as analysis
// options (Report.Analysis), so `doublerun check` judges by the same. A
// double-run or an accepted stale write measured on an invalid run still
// fails it. A replica that exits before the run ends is a replica-stopped
// event with its exit status and its last line of output. [Verdict] is the
// one result type: a run's, a matrix cell's and a matrix's (package
// chaos) and the #556 reproduction's; its Err is what the CLI returns.
//
// # Report (schema doublerun.report/v2)
//
// [Run] returns the [Report] as data and writes no file: package report
// writes report.json, report.md, timeline.svg and, when the fence was
// checked, linearizability.html (porcupine's view), beside the replicas'
// logs under RunOptions.OutDir. The JSON object has:
//
//	schema              "doublerun.report/v2"
//	scenario            the Scenario, durations in nanoseconds
//	stack               provider, lease and work endpoints, the lease
//	                    endpoint check (lease.CheckEndpoint), PgBouncer version,
//	                    versions {set, postgres, pgbouncer, note}: the
//	                    servers' exact versions and whether they are not
//	                    the version set asked for
//	began, wall_ms      when the run began and how long it took
//	gap_tolerance_ms    the leaderless window's tolerance
//	orphan_tolerance_ms the orphaned-lock window's tolerance
//	check_timeout_ms    the bound on the linearizability check
//	replicas[]          id, pid, exit, log path
//	metrics             oracle.Metrics: double_run and leaderless
//	                    {episodes, total, longest (ms), spans[]},
//	                    failover_latency (ms or absent) and failover_from
//	                    (where it is measured from: "injection", the instant
//	                    the fault acted, or "fault", the fault event before
//	                    the fault waited for its moment), max_concurrent_leaders,
//	                    leadership_changes, terms, writes,
//	                    stale_writes {accepted, rejected},
//	                    orphaned {episodes, total, longest, spans[],
//	                    orphans[] {start, end, backend_pid, after, cause,
//	                    client_linked_ms, reentered_by}, reentries,
//	                    left_held[]}, linearizability {linearizable ("yes",
//	                    "no" or "unknown"), operations, checked_in_ms}
//	                    (absent when the run was not checked),
//	                    validity {valid, conditions[] {name, holds,
//	                    figure, reason}}
//	verdict             expect, pass, inconclusive, reason
//	protocol            for replica commands only: mode ("sql" or "log"),
//	                    note (what the times are), lines and matched (log
//	                    mode), receipt_lag_median_ms and receipt_lag_max_ms
//	                    (log mode), left_behind[] (replicas whose group
//	                    outlived them, which fails the verdict), silent
//	                    (why no work was reported, the verdict's reason)
//	history             the raw oracle.History: start, end, intervals[]
//	                    {replica, token, start, end, open, backend_pid},
//	                    grants[] {replica, token, at}, writes[] {replica,
//	                    token, call, at, accepted, fenced}, events[]
//	                    (lock-claim events among them), locks[] {at,
//	                    held[] {pid, client_linked}}: every lock sample
//	                    that differs from the one before it and the last
//	                    one before each change, token_ops[] {kind ("grant"
//	                    or "renewal"), replica, token, call, return},
//	                    backends[] {at, replica, pid, client, via ("proxy",
//	                    "pgbouncer", "unverified" or "other")}: the
//	                    replicas' connections and the path they came by,
//	                    path_watched: whether built-in replicas' were
//	                    watched too (false in reports written before)
//
// oracle.Analyze(report.history, report.Analysis()) recomputes every
// figure in metrics, and Judge the verdict; `doublerun check` does both
// for saved reports and prints any figure that differs. Only
// linearizability.checked_in_ms is not determined by the history.
//
// # The orphaned-lock window
//
// A session advisory lock behind transaction pooling can outlive its
// holder: the unlock or the close does not reach the backend that holds
// it, and the lock stays on a pooled server connection that no client
// owns, until that connection closes or a replica handed that backend
// re-enters the lock. The runner watches the lease's lock through its
// direct connection every 20 ms (pg_locks, and the lease endpoint's
// PgBouncer, SHOW SERVERS, for whether a client is linked to the holding
// backend; run_lockwatch.go), and each replica logs the backend its lease
// says holds the lock whenever that changes (a lock-claim event). The
// oracle turns the two into the orphaned-lock window: every stretch longer
// than orphanTolerance (100 ms) where a backend held the lock after its
// holder let go or died, with the
// backend PID, who let go and how, how long a client was linked, and the
// replica that ended it by re-entering the lock (re-entrant). Locks still
// held once every replica stopped are listed as left held.
//
// A strategy declares its lock with Strategy.AdvisoryLock (the built-in
// advisory ones: lease.DefaultAdvisoryLock) and its backend with
// ReportsBackendPID; a lease a user brings can instead implement
// lease.LockHolder (AdvisoryLock and BackendPID), and the runner learns
// the lock from its replicas' claims. A lease that reports no backend
// gets no claims, and so no orphaned-lock window.
package scenarios
