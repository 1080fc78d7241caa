// Package scenarios runs competing replicas of a lease as real processes
// against a real stack and measures what users care about: how long two
// replicas did leader work at once (the double-run window) and how long
// none did (the leaderless window).
//
// # A scenario is data
//
// A [Scenario] names a strategy ([StrategyAdvisory],
// [StrategyAdvisoryUnguarded], [StrategyFenced], or one registered with
// [RegisterStrategy]), a topology, the number of replicas, timings, a fault
// of the catalog (package scenarios/fault) and an expectation. [Catalog]
// holds the built-in ones; [Issue556] and its fixes are the regression
// scenarios for the known limitation. A [Strategy] says what its lease is
// (ReportsBackendPID, AdvisoryLock), and [Scenario.FaultSetting] hands
// that, with the topology's shape and the timings, to the fault catalog as
// data: the catalog never imports this package.
//
//	topology     lease endpoint            work endpoint
//	direct       postgres                  postgres
//	session      pgbouncer session pool    pgbouncer session pool
//	transaction  pgbouncer transaction     pgbouncer transaction
//	pinned       pgbouncer session pool    pgbouncer transaction   (the #556 fix)
//
// # Replicas are processes
//
// Each replica is the running binary started again with DOUBLERUN_REPLICA
// set, so SIGKILL and SIGSTOP are real and a user's own go test binary can
// take part: register the lease, then call [MaybeRunReplica] first in
// TestMain (see example_test.go). replica_parent.go starts, watches and
// stops them; replica_child.go is what each one does. A replica runs a worker.Worker gated by
// its lease; the worker's one sweep is the leader work: log the start,
// work for Scenario.Work, make a side-effect write through the work
// endpoint in a transaction that first checks the fence, log the end.
// Replicas run in their own process group and die with the runner.
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
//	safe        no double-run and no accepted stale write
//	reproduces  a double-run must appear
//	fenced      overlaps allowed, no accepted stale write
//
// A run whose measurements disagree with its expectation fails, in either
// direction; a run in which no replica ever led fails too. [Verdict] is the
// one result type: a run's, a matrix cell's and a matrix's (package
// report) and the #556 reproduction's; its Err is what the CLI returns.
//
// # Report (schema doublerun.report/v1)
//
// [Run] returns the [Report] as data and writes no file: package report
// writes report.json, report.md and timeline.svg, beside the replicas'
// logs under RunOptions.OutDir. The JSON object has:
//
//	schema              "doublerun.report/v1"
//	scenario            the Scenario, durations in nanoseconds
//	stack               provider, lease and work endpoints, the lease
//	                    endpoint check (lease.CheckEndpoint), PgBouncer version,
//	                    versions {set, postgres, pgbouncer, note}: the
//	                    servers' exact versions and whether they are not
//	                    the version set asked for
//	began, wall_ms      when the run began and how long it took
//	gap_tolerance_ms    the leaderless window's tolerance
//	replicas[]          id, pid, exit, log path
//	metrics             oracle.Metrics: double_run and leaderless
//	                    {episodes, total, longest (ms), spans[]},
//	                    failover_latency (ms or absent) and failover_from
//	                    (where it is measured from: "injection", the instant
//	                    the fault acted, or "fault", the fault event before
//	                    the fault waited for its moment), max_concurrent_leaders,
//	                    leadership_changes, terms, writes,
//	                    stale_writes {accepted, rejected}
//	verdict             expect, pass, reason
//	history             the raw oracle.History: start, end, intervals[]
//	                    {replica, token, start, end, open, backend_pid},
//	                    grants[], writes[], events[]
//
// oracle.Analyze(report.history, oracle.Options{GapTolerance: gap_tolerance_ms})
// recomputes every figure in metrics.
package scenarios
