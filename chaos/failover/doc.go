// Package failover measures how fast a lease fails over: the time from
// the instant a fault is injected into the leader until another call of
// a lease returns Leader, over many trials, per endpoint, strategy and
// fault. `doublerun failover` (and `make failover`) prints its table;
// BenchmarkFailover runs the same trials as a Go benchmark.
//
// A trial runs two replicas of one lease, the leader and a survivor, each
// calling its lease at the poll's pace (a waiting follower calls again as
// soon as its wait ends), lets the survivor settle into its wait, and
// injects the fault at a random phase of the poll:
//
//	KILL_LEADER               the leader is this binary started again
//	                          (package scenarios/reexec), killed with SIGKILL
//	TERMINATE_LEADER_BACKEND  pg_terminate_backend of the leader's backend;
//	                          the leader lives on, so the next Leader may
//	                          be its own, under a new term
//	GRACEFUL_HANDOVER         the leader stops calling and closes its
//	                          lease, which releases it
//
// The latency is read on this process's monotonic clock, from just before
// the fault (the SIGKILL, the pg_terminate_backend statement, the Close)
// to the end of the first call that returns Leader afterwards. It is the
// lease's own failover: a worker adds its first claim after it, and a
// scenario (package scenarios) measures that whole path on the oracle's
// clock. The vocabulary is the harness's own: a trial builds its leases
// through the strategy registry (package scenarios/strategy), so any
// registered strategy can be measured, and takes its faults as values of
// the catalog (package scenarios/fault). Each call is Acquire where the
// lease has it (a lease without Wait answers it as TryAcquire). The
// strategies measured by default:
//
//	advisory       lease.Advisory, TryAcquire every poll
//	advisory-wait  lease.Advisory with Wait, through Acquire: the server
//	               wakes the survivor waiting in pg_advisory_lock
//	fenced         lease.Fenced, TryAcquire every poll
//	fenced-wait    lease.Fenced with Wait, through Acquire: a release's
//	               NOTIFY wakes the survivor on a direct endpoint; through
//	               PgBouncer Acquire does not wait (see lease.Fenced.Waits)
//
// Trials run one at a time on one database of one stack, each with a
// lease name and advisory key of its own, and close every lease and kill
// every child they started before the next begins. p99 is the
// nearest-rank percentile, so with fewer than 100 trials it is the worst.
package failover
