// Package replica is a replica process: one process that runs a lease and
// a worker, the child side of a scenario's run.
//
//   - spec.go: the Spec the runner hands a replica, and the protocol's
//     DOUBLERUN_* variables that carry it to a replica command.
//   - loop.go: the built-in replica, a worker.Worker gated by a strategy's
//     lease (package scenarios/strategy) whose one sweep is the leader
//     work: log its start, work for Scenario.Work, make a side-effect
//     write through the work endpoint in a transaction that first checks
//     the fence, log its end. It runs as this binary started again
//     (Spec.ChildCommand, package scenarios/reexec), or as a replica
//     command (`doublerun replica`, RunAsCommand).
//   - jobs.go: jobs mode (Scenario.Jobs), the durable job worker of
//     package worker beside the leader work: every replica enqueues, the
//     leader claims and completes, and the oracle hears of each
//     acknowledged enqueue and completion and each start of a job, so a
//     failover's lost enqueues and reruns can be counted.
//   - recorder.go: where a replica reports its work, the oracle's Recorder
//     or the doublerun.* SQL functions a replica in any language calls.
//   - command.go and logmatch.go: a replica that is a program of the
//     user's own ([Command]), and the log matcher that judges one that
//     cannot be changed.
//
// Starting, watching and stopping replicas is the runner's, in package
// scenarios.
//
// # Replicas in any language
//
// A scenario whose Replica is set runs the user's own program as each
// replica instead of a built-in lease ([Command]; the runner's side is
// run_command.go in package scenarios):
//
//	"strategy": "advisory",
//	"replica": {"command": ["/usr/bin/python3", "lease.py"], "env": {"X": "y"}}
//
// Strategy still says what the program's lease is like: its traits decide
// which faults apply, its Setup runs, and in `doublerun chaos --replica
// FILE` its column of the table is what each cell expects. The runner
// starts the program once per replica, in a process group of its own,
// with the runner's environment, the scenario's env, and the protocol's
// variables:
//
//	DOUBLERUN_REPLICA_ID         r1, r2, ...: the replica's id, for every report
//	DOUBLERUN_LEASE_NAME         the lease's name, the same for every replica
//	DOUBLERUN_LEASE_DSN          postgres:// URL of the lease endpoint, through the
//	                             replica's own proxy (and PgBouncer, by topology)
//	DOUBLERUN_WORK_DSN           postgres:// URL of the work endpoint, the same way
//	DOUBLERUN_ORACLE_DSN         postgres:// URL of the run's database, direct, that no
//	                             fault touches: where the reports go
//	DOUBLERUN_TTL_MS             the scenario's TTL, in milliseconds
//	DOUBLERUN_POLL_INTERVAL_MS   the poll interval, in milliseconds
//	DOUBLERUN_WORK_MS            the length of one piece of leader work, in milliseconds
//	DOUBLERUN_UNFENCED           1 when the side-effect writes are to skip the fence
//	DOUBLERUN_APPLICATION_NAME   doublerun-<id>, set as application_name in the lease
//	                             and work URLs, so pg_stat_activity shows the backends
//
// Its connections go through the same toxiproxy proxies and PgBouncers as
// a built-in replica's, so PARTITION, DELAY and the PgBouncer and Postgres
// faults act on them; TERMINATE_LEADER_BACKEND ends the backend the
// program reported (work_begin's backend_pid), else the one holding the
// strategy's advisory lock, else its oldest backend by application_name;
// KILL_LEADER, FREEZE_LEADER and GRACEFUL_HANDOVER
// signal its whole process group. The runner logs its start and its exit
// (which ends any piece of work it left open), kills its group on every
// way out, and fails a run in which the group outlived the program (its
// children ran unmeasured; exec the service, or wait for its children).
//
// It reports its leader work in one of two modes (scenarios.ProtocolInfo
// in the report says which).
//
// SQL mode, when "log" is absent: the program calls the functions the
// runner installs in schema doublerun of the run's database (package
// oracle), with any driver. Every time is the server's clock_timestamp()
// of the call, as for a built-in replica:
//
//	doublerun.next_token() bigint                       a fresh token, for a lease that has none
//	doublerun.became_leader(replica, token)             leadership under token began (optional:
//	                                                    work_begin records it too)
//	doublerun.work_begin(replica, token, backend_pid)   a piece of leader work begins; returns
//	                                                    its id; backend_pid (default 0) is the
//	                                                    backend holding the lease, if any
//	doublerun.work_end(id)                              that piece ended
//	doublerun.side_effect(replica, token, fenced)       the piece's write: call it in the
//	                                                    leader's own transaction on
//	                                                    DOUBLERUN_WORK_DSN, after the fence's
//	                                                    check if it has one (fenced true)
//	doublerun.rejected(replica, token)                  the fence refused a write (call it on
//	                                                    the oracle connection: the refused
//	                                                    transaction rolls back)
//	doublerun.lock_claim(replica, backend_pid, k1, k2)  the lease's advisory lock (k1, k2) is
//	                                                    held on backend_pid, 0 once let go:
//	                                                    what the orphaned-lock window needs
//	doublerun.event(replica, kind, detail)              any other event
//
// The calls go on DOUBLERUN_ORACLE_DSN except side_effect. Pass fenced
// true only when the lease's tokens live in the strategy's token table
// (Strategy.TokenTable: doublerun_leases for fenced, whose rows the runner
// records): the linearizability check judges fenced writes against the
// grants it recorded there, and a fenced write under a token it never saw
// granted has no legal order. `doublerun
// replica --strategy NAME` is a built-in lease speaking this protocol
// ([RunAsCommand]); testdata/replicas/seed_lease.py is the seed's
// C# lease ported to Python.
//
// Log mode, for a program that cannot be changed: "log" holds regular
// expressions (Go's RE2) matched against every line of its stdout and
// stderr:
//
//	"log": {"became_leader": "^became leader", "lost_leadership": "^lost leadership",
//	        "work_started": "^sweep started$", "work_ended": "^sweep finished$"}
//
// became_leader and lost_leadership, work_started and work_ended, or all
// four; without the work patterns, holding leadership is the work. Each
// match is written to the oracle at once through the runner's direct
// connection (a new token per leadership), so its time is the runner's
// receipt of the line, not the program's own moment: later by the
// program's output buffering (flush each line; PYTHONUNBUFFERED=1 for
// Python) and by the receipt lag, which the report gives as a median and
// a maximum over the run. There is no side-effect write in this mode, so
// stale writes and the fence are not measured.
//
// What a verdict means, by mode: built-in and SQL, the windows and the
// stale writes from the replica's own calls; log mode, the double-run and
// leaderless windows as the runner received the lines (an overlap shorter
// than the receipt lag is within its error). In every mode a run in which
// no leader work was reported fails, and says why ("called no
// doublerun.work_begin", "printed N lines and 0 matched a pattern"): no
// work shows no double-run, so silence must not pass as safe.
//
// Bad input is one line naming the problem and the fix, with nothing left
// running: a program not found in PATH (before the stack starts), a
// program that exits before any work was reported (its exit status and
// last line), a bad regular expression or an incomplete pair of patterns
// (Validate), a protocol variable set in env.
package replica
