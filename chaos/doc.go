// Package chaos is the matrix that runs every fault of the catalog
// (package scenarios/fault) against every strategy and topology, in the
// style of etcd's robustness tests: the cells as data, the table of what
// each cell must show, the run of a matrix across version sets, and the
// loops that reproduce the limitations it found. What the runs measured,
// finding by finding and with the command that runs each again, is in
// FINDINGS.md beside this file.
//
// # The matrix
//
// A [Cell] is the fields a cell's expectation is read from: strategy,
// topology, transaction pool size, fault and version set. [Matrix] returns
// a cell per strategy, topology and fault (and no fault) that the table
// has, [AtPoolSizes] repeats the cells of a topology with a transaction
// pool (transaction, pinned, alias) once per pool size, and
// [Cell.Scenario] is the scenario that runs one, named
// strategy/topology/FAULT (strategy/topology-poolN/FAULT above a pool of
// one) and measured for [CellDuration]: the fault comes at a third, and
// what is left holds the fault (fault.HeldFor) and a TTL and a second
// after it. Nothing about a cell is read back from its name.
//
// [Expect] answers "what does this cell expect, and why?" from one
// [Table], in table.go: a block per fault with the reason, a row per
// strategy, a column per topology, and the columns of the pool sizes and
// version sets where cells show otherwise. The most particular column
// that holds a cell answers: its pool size on its set, then its set, then
// its pool size, then its topology's. The table is the only place
// expectations live; TestTableIsComplete holds it to the catalog, and
// TestDocTableIsCurrent keeps the rendering below in step (`go test
// ./chaos -run TestDocTableIsCurrent -update-doc` rewrites it).
//
// [RunSets] runs a selection of cells on each version set asked for, one
// stack per set, one after another: each cell placed on the set its
// stack's servers make up (the native provider runs the host's binaries
// whatever is asked, and a set whose servers already ran is skipped), a
// deterministic [Shard] of them, each set's reports, cells.json,
// summary.md and summary.html (a grid cell per fault × strategy ×
// topology coloured by verdict, each opening its timeline;
// summary_html.go) under its own directory. [Merge] inverts [Shard]: it joins
// the shards' cells.json into what an unsharded run gives. `doublerun
// chaos` parses its flags into a RunConfig and prints; `doublerun chaos
// merge` calls [MergeDirs]. What the cells gave is a [CellResult] each;
// [Summary] renders them as summary.md and [SummarySets] across version
// sets, leading with the cells whose outcome differs between the sets
// (summary.go, summary_sets.go), [Verdict] judges them, and cells.json
// (cells.go) is what [Merge] reads back. A run's own files are package
// report's.
//
// [RunMatrix] runs cells one at a time on one stack (a Postgres restart
// touches every run on the stack), checks after each that every server
// still answers and starts again any that does not (stack.Repair), and
// runs a cell again once when it could not run or a replica failed on its
// own, or when a limitation it must reproduce did not show (a double-run
// needs the follower to take over before the old leader's 200ms piece
// ends, which a loaded machine can miss); its Notes say so. A cell
// expected to be safe is never run again: a double-run there is a finding.
//
//	safe                   no double-run and no accepted stale write
//	reproduces             a double-run must appear (a known limitation)
//	regresses              a token regression must appear: the plain
//	                       fence across a promotion that lost its last
//	                       grant (a failover that lost none is
//	                       INCONCLUSIVE)
//	unmeasured             a failover fault applies, and its cells were
//	                       not measured on the topology: no cell
//	fenced                 double-runs allowed, no accepted stale write
//	reproduces-or-orphans  a double-run or an orphaned lock must appear
//	-                      the fault does not apply
//	refused                the strategy refuses the topology's lease
//	                       endpoint, so the cell cannot run: advisory-wait
//	                       on transaction, where a waiting follower would
//	                       hold a pooled server connection (lease.Advisory
//	                       with Wait refuses a transaction-pooled endpoint;
//	                       scenarios.Scenario.Validate rejects the scenario
//	                       with that reason before any replica starts)
//
// # Failover cells
//
// The failover faults (PRIMARY_FAILOVER, PRIMARY_FAILOVER_LOSSY,
// SWITCHOVER) need a stack with a standby. Their blocks name the mode
// their cells run on (Block.Standby, shown beside the fault below and in
// the summary): sync for PRIMARY_FAILOVER and SWITCHOVER, where nothing
// acknowledged is lost, async for the lossy one, which loses the last
// grant on purpose. They hold a row for fenced-epoch (StandbyStrategies),
// the fenced lease whose tokens carry the server's timeline: it holds
// where the plain fence's token goes back, and under the other faults it
// is the plain fence again, so it has no row there ("-"). [Matrix] has
// none of these cells; [StandbyMatrix] has them, and `doublerun chaos
// --standby` (make chaos CHAOS_STANDBY=1) adds them after the others,
// each mode on a stack of its own that every cell fails over and the next
// rebuilds (stack.RebuildStandby): slow, half a minute or more a cell.
//
// The expectations come from measured runs (FINDINGS.md). The rule:
// reproduces where every run showed a double-run; safe where none ever did
// and there is no way for one to appear; fenced where some runs did and
// some did not, or where the lease's TTL is what the fault plays on. A
// block of a pool size shows what every cell at that size expects, its
// own column's or its topology's; a version set's column would show as a
// block of its own (none differs yet).
//
//	DIRECT                          advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            safe                   safe                   safe                   safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces             reproduces             reproduces             -                      -
//	KILL_LEADER                     safe                   safe                   safe                   safe                   -
//	FREEZE_LEADER                   safe                   safe                   safe                   fenced                 -
//	PARTITION_LEADER                fenced                 fenced                 fenced                 fenced                 -
//	DELAY_LEADER                    safe                   safe                   safe                   fenced                 -
//	PGBOUNCER_PAUSE                 -                      -                      -                      -                      -
//	PGBOUNCER_KILL                  -                      -                      -                      -                      -
//	PGBOUNCER_RECONNECT             -                      -                      -                      -                      -
//	PGBOUNCER_RESTART               -                      -                      -                      -                      -
//	POSTGRES_RESTART                fenced                 fenced                 fenced                 fenced                 -
//	GRACEFUL_HANDOVER               safe                   safe                   safe                   safe                   -
//	PRIMARY_FAILOVER (sync)         fenced                 fenced                 fenced                 safe                   safe
//	PRIMARY_FAILOVER_LOSSY (async)  fenced                 fenced                 fenced                 regresses              fenced
//	SWITCHOVER (sync)               fenced                 fenced                 fenced                 safe                   safe
//	SESSION                         advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            safe                   safe                   safe                   safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces             reproduces             reproduces             -                      -
//	KILL_LEADER                     safe                   safe                   safe                   safe                   -
//	FREEZE_LEADER                   safe                   safe                   safe                   fenced                 -
//	PARTITION_LEADER                safe                   safe                   safe                   fenced                 -
//	DELAY_LEADER                    safe                   safe                   safe                   fenced                 -
//	PGBOUNCER_PAUSE                 safe                   safe                   safe                   safe                   -
//	PGBOUNCER_KILL                  fenced                 fenced                 fenced                 safe                   -
//	PGBOUNCER_RECONNECT             safe                   safe                   safe                   safe                   -
//	PGBOUNCER_RESTART               fenced                 fenced                 fenced                 safe                   -
//	POSTGRES_RESTART                fenced                 fenced                 fenced                 fenced                 -
//	GRACEFUL_HANDOVER               safe                   safe                   safe                   safe                   -
//	PRIMARY_FAILOVER (sync)         unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	PRIMARY_FAILOVER_LOSSY (async)  unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	SWITCHOVER (sync)               unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	TRANSACTION                     advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            reproduces             reproduces             refused                safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces             reproduces             refused                -                      -
//	KILL_LEADER                     reproduces             reproduces             refused                safe                   -
//	FREEZE_LEADER                   reproduces             reproduces             refused                fenced                 -
//	PARTITION_LEADER                reproduces             reproduces             refused                fenced                 -
//	DELAY_LEADER                    reproduces             reproduces             refused                fenced                 -
//	PGBOUNCER_PAUSE                 reproduces             reproduces             refused                fenced                 -
//	PGBOUNCER_KILL                  reproduces             reproduces             refused                safe                   -
//	PGBOUNCER_RECONNECT             reproduces             reproduces             refused                safe                   -
//	PGBOUNCER_RESTART               reproduces             reproduces             refused                safe                   -
//	POSTGRES_RESTART                reproduces             reproduces             refused                fenced                 -
//	GRACEFUL_HANDOVER               reproduces             reproduces             refused                safe                   -
//	PRIMARY_FAILOVER (sync)         reproduces             reproduces             refused                safe                   safe
//	PRIMARY_FAILOVER_LOSSY (async)  reproduces             reproduces             refused                regresses              fenced
//	SWITCHOVER (sync)               reproduces             reproduces             refused                safe                   safe
//	TRANSACTION-POOL2               advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces-or-orphans  reproduces-or-orphans  refused                -                      -
//	KILL_LEADER                     reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	FREEZE_LEADER                   reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	PARTITION_LEADER                reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	DELAY_LEADER                    reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	PGBOUNCER_PAUSE                 reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	PGBOUNCER_KILL                  reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	PGBOUNCER_RECONNECT             reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	PGBOUNCER_RESTART               reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	POSTGRES_RESTART                reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	GRACEFUL_HANDOVER               reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	PRIMARY_FAILOVER (sync)         reproduces-or-orphans  reproduces-or-orphans  refused                safe                   safe
//	PRIMARY_FAILOVER_LOSSY (async)  reproduces-or-orphans  reproduces-or-orphans  refused                regresses              fenced
//	SWITCHOVER (sync)               reproduces-or-orphans  reproduces-or-orphans  refused                safe                   safe
//	TRANSACTION-POOL4               advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces-or-orphans  reproduces-or-orphans  refused                -                      -
//	KILL_LEADER                     reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	FREEZE_LEADER                   reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	PARTITION_LEADER                reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	DELAY_LEADER                    reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	PGBOUNCER_PAUSE                 reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	PGBOUNCER_KILL                  reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	PGBOUNCER_RECONNECT             reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	PGBOUNCER_RESTART               reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	POSTGRES_RESTART                reproduces-or-orphans  reproduces-or-orphans  refused                fenced                 -
//	GRACEFUL_HANDOVER               reproduces-or-orphans  reproduces-or-orphans  refused                safe                   -
//	PRIMARY_FAILOVER (sync)         reproduces-or-orphans  reproduces-or-orphans  refused                safe                   safe
//	PRIMARY_FAILOVER_LOSSY (async)  reproduces-or-orphans  reproduces-or-orphans  refused                regresses              fenced
//	SWITCHOVER (sync)               reproduces-or-orphans  reproduces-or-orphans  refused                safe                   safe
//	PINNED                          advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            safe                   safe                   safe                   safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces             reproduces             reproduces             -                      -
//	KILL_LEADER                     safe                   safe                   safe                   safe                   -
//	FREEZE_LEADER                   safe                   safe                   safe                   fenced                 -
//	PARTITION_LEADER                fenced                 fenced                 fenced                 fenced                 -
//	DELAY_LEADER                    safe                   safe                   safe                   fenced                 -
//	PGBOUNCER_PAUSE                 safe                   safe                   safe                   fenced                 -
//	PGBOUNCER_KILL                  safe                   safe                   safe                   safe                   -
//	PGBOUNCER_RECONNECT             safe                   safe                   safe                   safe                   -
//	PGBOUNCER_RESTART               fenced                 fenced                 fenced                 safe                   -
//	POSTGRES_RESTART                fenced                 fenced                 fenced                 fenced                 -
//	GRACEFUL_HANDOVER               safe                   safe                   safe                   safe                   -
//	PRIMARY_FAILOVER (sync)         unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	PRIMARY_FAILOVER_LOSSY (async)  unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	SWITCHOVER (sync)               unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	ALIAS                           advisory               advisory-unguarded     advisory-wait          fenced                 fenced-epoch
//	none                            safe                   safe                   safe                   safe                   -
//	TERMINATE_LEADER_BACKEND        reproduces             reproduces             reproduces             -                      -
//	KILL_LEADER                     safe                   safe                   safe                   safe                   -
//	FREEZE_LEADER                   safe                   safe                   safe                   fenced                 -
//	PARTITION_LEADER                safe                   safe                   safe                   fenced                 -
//	DELAY_LEADER                    safe                   safe                   safe                   fenced                 -
//	PGBOUNCER_PAUSE                 safe                   safe                   safe                   fenced                 -
//	PGBOUNCER_KILL                  safe                   safe                   safe                   safe                   -
//	PGBOUNCER_RECONNECT             safe                   safe                   safe                   safe                   -
//	PGBOUNCER_RESTART               fenced                 fenced                 fenced                 safe                   -
//	POSTGRES_RESTART                fenced                 fenced                 fenced                 fenced                 -
//	GRACEFUL_HANDOVER               safe                   safe                   safe                   safe                   -
//	PRIMARY_FAILOVER (sync)         unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	PRIMARY_FAILOVER_LOSSY (async)  unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//	SWITCHOVER (sync)               unmeasured             unmeasured             unmeasured             unmeasured             unmeasured
//
// # Adding a fault
//
// Write the fault in package scenarios/fault, in the file of what it acts
// on, and add it to fault.All; then give it a block in table.go, a row per
// strategy with a column per topology where it applies and a line of why.
// TestTableIsComplete fails until the block's columns match the fault's
// Available; `go test ./chaos -run TestDocTableIsCurrent -update-doc`
// renders it above. Run its cells (`doublerun chaos --fault NAME
// --topology direct,session,transaction,pinned,alias`) and write what
// they showed in FINDINGS.md.
//
// # Adding a topology
//
// A topology is a scenarios.TopologyKind: its constant, its place in
// scenarios.Topologies and whether its work goes through PgBouncer and
// through a transaction pool (Pooled, TransactionPooled; topology.go, in
// package scenarios), and the endpoints the runner gives its lease and its
// work (endpoints, run_prepare.go). The faults learn of it through
// fault.Setting; a strategy that refuses its lease endpoint says so in
// Strategy.RefusesTransactionPooling (package scenarios/strategy), which
// CheckStrategyTopology (topology.go) reads. Then give it a column in every row
// of table.go where a fault applies to it: TestTableIsComplete names every
// row that lacks it.
//
// # Reproducing a limitation
//
// Each reproduced limitation has a test in repro_test.go that fails with
// a line "REPRODUCED: ..." when the limitation shows, and a Make target
// that loops it, etcd style, through chaos/run.sh:
//
//	make repro-556            TestReproduceIssue556      advisory, transaction pool of one
//	make repro-backend-loss   TestReproduceBackendLoss   advisory/pinned/TERMINATE_LEADER_BACKEND
//	make repro-paused-holder  TestReproducePausedHolder  fenced/transaction/FREEZE_LEADER without the fence
//
// It prints "Successful reproduction" as soon as one run reproduced it,
// "Failed to reproduce" when none of REPRO_COUNT runs did, and exits 2 when
// the test could not run at all, which is not a reproduction.
package chaos
