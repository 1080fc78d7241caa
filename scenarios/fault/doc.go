// Package fault is doublerun's fault catalog, in the style of etcd's
// robustness failpoints: each fault is an exported value on an unexported
// type, named ACTION_TARGET, with Name, Available and Inject, which also
// undoes the fault before it returns. [All] lists them; a scenario names
// one by its name and the runner finds it with [Lookup].
//
// The catalog sits below the runner, beside the stack and the oracle it
// acts on and reads: it never imports package scenarios. A fault learns
// what it needs of a run as data, a [Setting] (the strategy's traits,
// whether the work goes through PgBouncer, the TTL and the length of a
// piece of work), and acts through a [Target], which the runner implements
// and a test can fake.
//
// # Adding a fault
//
// Write its type and exported value in the file of what it acts on
// (process.go, network.go, pgbouncer.go, postgres.go) or a new one, add it
// to All, and give it a block in package chaos's expectation table
// (chaos/table.go), one row per strategy. Available says where it applies; a Timeout method
// gives it longer than [DefaultTimeout]; a fault that holds the leader in
// its grip for a while embeds holding, so that [HeldFor] knows and the
// matrix measures long enough.
//
// # When a fault strikes
//
// Every fault waits, for at most 5s, until the leader has just begun a
// piece of work (the oracle shows it open, begun within a quarter of
// Setting.Work), and strikes then; FREEZE_LEADER checks after SIGSTOP
// that the piece is still in its first half, before its write. A lease
// learns that it lost its backend, its bouncer or its connection only at
// its next poll, so this is the moment a fault can do the most harm, and
// the moment at which a cell's answer repeats: struck at a random moment,
// the same cell showed a double-run in some runs and none in others. The
// runner logs its fault event before Inject, so that event comes before
// this wait (at most one cycle, about 300ms). KILL_LEADER,
// TERMINATE_LEADER_BACKEND and GRACEFUL_HANDOVER therefore mark the
// instant they act (the replica-killed event before the SIGKILL, an event
// of kind oracle.EventInjected before pg_terminate_backend and before the
// SIGTERM), and a report's failover latency is measured from that mark
// (failover_from "injection"); for the other faults it is measured from
// the fault event (failover_from "fault"). The chaos events, kind
// oracle.EventChaos, mark the moment each step really took hold.
//
// [Hold] is the TTL plus half of it (3s for the default TTL of 2s): long
// enough that a lease with a TTL has certainly expired, short enough that
// the matrix stays fast. The admin-console faults are scoped to the run's
// own database, on the work endpoint's bouncer, so they never touch
// another run's pools. PGBOUNCER_RESTART restarts the bouncer of the
// topology; on pinned it stops the lease's session bouncer and the work's
// transaction bouncer together and starts them together, as one PgBouncer
// serving both pools (the usual pinned deployment, see package lease)
// would be restarted. TERMINATE_LEADER_BACKEND kills the backend PID the
// leader reports (Replica.LeaseBackendPID) or, when it reports none, the
// backend holding the strategy's advisory lock (lease.DefaultAdvisoryLock,
// (271, 1), for the built-in ones) in the run's database, found in
// pg_locks.
//
// # Failover
//
// PRIMARY_FAILOVER, PRIMARY_FAILOVER_LOSSY and SWITCHOVER act on a stack
// with a standby (stack.Options.Replication; Setting.Replication says
// which mode, and they are unavailable without one): the primary goes
// down (SIGKILL of every process, or a fast shutdown), the standby is
// promoted and the stack's one address repointed, and each step is an
// event on the oracle's clock, from the instant of the kill (an
// oracle.EventInjected, which the failover latency is measured from) to
// the first statement through the run's work endpoint on the new primary
// (failover.go draws them). PRIMARY_FAILOVER_LOSSY first detaches the
// standby and freezes the leader for Hold, so the failover loses a
// grant, the writes made under it and the old leader's renewals every
// time (primary_failover_lossy.go says why the freeze). The oracle lives
// on the stack's third server, which none of them touches: the faults
// read it there (stack.Oracle), never through the address they repoint.
//
// A failover cannot be undone: the pair is left with the promoted
// standby, which the address and the bouncers lead to, until the runner
// rebuilds the standby (stack.RebuildStandby) for the next cell.
//
// # Partitions
//
// PARTITION_LEADER adds toxiproxy's timeout toxic with timeout 0 to both
// directions of every proxy between the leader and its endpoints. It does
// not stop the proxies: Proxy.Stop closes every open connection, which is a
// crash, not a partition. So:
//
//   - Open connections stay open, and every byte on them is dropped.
//     Neither end is told: the server keeps the leader's backend, and its
//     advisory lock, for as long as the partition lasts.
//     TestPartitionLeader shows it.
//   - New connections are accepted by the proxy and then hear nothing.
//   - A client that gives up and closes its socket still closes the
//     upstream connection: toxiproxy passes a close through the blackhole,
//     so the server does learn of that one, unlike in a real partition.
//     pgx, though, closes a connection whose query timed out only after
//     its cancel request (itself blackholed) gives up.
//   - Healing removes the toxics, and toxiproxy then closes every
//     connection that lived through the partition: their byte streams lost
//     data and cannot resume. Their backends end and an advisory lock held
//     on one is freed. This is where a real partition would differ most: a
//     short one heals before TCP gives up and the connections carry on.
//
// The oracle's own connections are direct and never partitioned, so a
// partitioned leader's work still shows on the timeline, as it would on
// the leader's own clock.
package fault
