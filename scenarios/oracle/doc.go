// Package oracle is doublerun's one clock and its judge.
//
// Every replica logs each piece of leader work (start, end, replica, fencing
// token) through a direct connection to Postgres that no fault touches, with
// timestamps from clock_timestamp(). Replicas' own clocks never enter the
// figures, so two processes, or a frozen one, cannot skew them.
//
// [Analyze] turns a [History] into [Metrics]:
//
//		replica a   |=====|  |=====|  |====......(killed)
//		replica b                        |=====|  |=====|
//		                                 ^^^^^
//		                                 double-run: two replicas working at once
//		                     ^^          gap within tolerance: still one leader
//		                                          leaderless: gap > tolerance
//
//	  - The double-run window is the time during which two or more replicas
//	    did leader work at the same instant, with its episodes and the longest.
//	    A replica's own overlapping intervals are merged first. An episode
//	    is a maximal stretch: one replica stopping at the instant another
//	    starts, while a third works on, does not end it.
//	  - The leaderless window is the time inside the measured span covered by
//	    no work, counting only gaps longer than the tolerance (a leader's own
//	    pause between cycles is not leaderlessness).
//	  - Failover latency is the time from the first fault until work resumes
//	    under a term granted after it.
//	  - A stale write is a side-effect write accepted under a token older than
//	    the newest granted at that moment; a rejected one is the fence working.
//	  - The fence is checked for linearizability (porcupine): the grants,
//	    renewals and fenced writes, each with its invocation and completion
//	    on the server's clock, must have a legal order. See "The fence,
//	    checked for linearizability" below and fence.go.
//	  - The orphaned-lock window is the time the lease's advisory lock stayed
//	    on a backend after the replica that held it there let go or died,
//	    from the runner's samples of pg_locks ([LockSample]) and the
//	    replicas' claims ([EventLockClaim]); a replica that ends such a
//	    stretch by claiming that backend re-entered the lock. See locks.go.
//
// Reports carry the raw History, every sample a figure comes from
// included (the lock samples: time, backend, and the bouncer's client
// link where there is one), so anyone can recompute the figures:
// `doublerun check` does it with this package, and
// scenarios/report/reporttest with code of its own, for every report the
// tests write.
//
// A wrong window is a wrong verdict, so the windows are checked against
// brute force (a count of working replicas per millisecond over random
// histories; for the orphaned-lock window, held and claimed backends per
// millisecond), the package has a floor in the mutation gate's baseline,
// and the orphaned-lock window's guards are in
// testdata/mutation/oracle.guards.json.
// Those tests need no server: the figures are arithmetic over a History.
//
// # The fence, checked for linearizability
//
// The stale-write count compares each write's instant with the grants'
// instants: a sequential check on points, while two statements running at
// once in Postgres do not take effect in the order of their
// clock_timestamp()s. So the fence is also checked the way etcd's
// robustness tests and Jepsen check a store: each operation has an
// invocation and a completion, and porcupine looks for one order of them,
// each placed inside its own interval, that a sequential model allows:
//
//	state      the newest token granted (0: never granted)
//	grant t    legal only if t > state; state becomes t
//	renewal t  legal only if t == state; state stays
//	write t    accepted: legal only if t == state; rejected: only if t != state
//
// A history with no such order fails the run's verdict whatever the
// windows say; so does a check that did not finish within
// DefaultCheckTimeout (10 s), which proves nothing. report.md says
// "linearizable: yes, N operations, checked in X" and links porcupine's
// HTML view, linearizability.html, beside timeline.svg.
//
// Where the intervals come from, all on the server's clock:
//
//   - Grants and renewals: RecordTokens attaches a trigger to the
//     strategy's token table (strategy.Strategy.TokenTable). It runs
//     inside the statement that changed the row and commits with it:
//     call is statement_timestamp(), when the server received the
//     statement; return is clock_timestamp(), after the row changed. A
//     changed token is a grant, a kept one a renewal.
//   - Writes: the side-effect row records transaction_timestamp() and
//     clock_timestamp() of its one INSERT; the fence's check ran between
//     them. A refusal reads the same two in its own transaction.
//
// Why each interval holds the instant the operation took effect: the
// fence reads the token row FOR KEY SHARE and holds it to commit, and a
// grant changes the token, a key column, so it waits for every fenced
// write that read the old token, and a fenced write waits for a grant in
// progress. Take each operation's instant to be when it got the row:
// inside the grant's interval (the trigger runs after it), inside the
// write's (the fence ran after the transaction began and before the
// INSERT), and no other recorded operation sees the row between a grant
// getting it and the grant committing. Those instants order the history
// as the server did, so a fence that works always has a legal order.
//
// Renewals map to reads. lease.Fenced renews with UPDATE ... WHERE
// holder = $2 AND token = $3: it changes a row only while its token is
// the newest, and the trigger records only statements that changed a
// row, so a recorded renewal says the token was the newest at some
// instant inside it; it leaves the token as it was (the renewal's row
// lock does not even conflict with the fence's), so it must not move the
// state. A renewal of token t is therefore legal exactly when t == state,
// and changes nothing: a renewal recorded after a newer grant completed
// is a deposed holder told it still leads. The release, which expires
// the term at once, is the same kind of statement and maps the same way.
// A renewal that changed no row is not recorded; it says only that the
// token was not the newest, which the next grant says better.
//
// A refusal whose transaction broke before its times were read is logged
// when the oracle learns of it, later than it happened. That cannot
// change the answer: a writer holds token t only after t was granted, so
// at its refusal the state was above t, and tokens only rise.
//
// Only fenced writes count (a write no fence checked says nothing of
// it), and only runs whose strategy names its token table are checked:
// without the grants every accepted write would look illegal.
//
// # Across a primary failover: a third server
//
// On a stack with a standby (stack.Options.Replication) the oracle's
// connection goes to a third Postgres, the stack's Oracle endpoint, that
// no fault touches; it is not read back from the promoted standby. The
// choice was between those two, and a lossy failover decides it:
//
//   - What a lossy promotion loses is exactly what proves the harm: the
//     grant of the token that the new primary then grants again, and the
//     write made under it. A history read back from the new primary has
//     the second grant as the first of its token, and porcupine finds a
//     legal order for a history whose real one had none. A token
//     regression cannot be seen on the server whose tokens regressed.
//   - The pieces of work logged on the old primary after its standby
//     stopped receiving would vanish with it, and a double-run window
//     would be measured shorter than it was.
//   - "With the loss accounted for" would need the loss to be known
//     first, which is what the measurement is for.
//
// So the pair holds only what the failover is meant to act on: the
// lease's token table, the side-effect writes a fence guards, the
// worker's jobs. Each of those a replica is told about it also tells the
// oracle, on the third server, once it was acknowledged: a grant with its
// token ([Grant]), a write's commit, an enqueue, a job's completion
// ([Ack]), and each start of a job ([JobRun]). After the run the surviving
// rows are read from the new primary once ([Survivors]), and [Loss] is the
// difference (loss.go):
//
//   - token regressions: a token acknowledged to a second replica, or a
//     grant or renewal the server recorded whose statement began after a
//     higher token had been acknowledged;
//   - lost writes and lost enqueues: acknowledged, and not on the new
//     primary;
//   - jobs run again: a start of a job after its completion was
//     acknowledged (a start before it is the worker's at-least-once
//     delivery, not a loss).
//
// The fence's linearizability check takes the acknowledged grants the
// server's record lacks as grants too, made somewhere between the run's
// start and their acknowledgement. That is what lets porcupine see a
// token granted twice across a lossy promotion: from the new primary
// alone, the second grant is the first of its token and the history has
// a legal order (TestFenceCheckAcrossALossyFailover).
//
// The oracle stays one clock: on the docker and native providers every
// server runs on this host and reads the same kernel clock, so the times
// the pair's servers record (the token table's trigger) and the oracle's
// compare. An external HA cluster's servers have clocks of their own, and
// only the oracle server's times are compared there.
//
// # The oracle owns its tables
//
// No other package names the oracle's tables: replicas log through a
// [Recorder] (their side-effect write too, [Recorder.SideEffect]), the
// runner and the faults ask [LatestWork], [WorkBegun] and [AnyWork], and
// [Load] reads a run back ([LoadFailover] from the oracle's server and
// the pair's primary); [RecordTokens] has the server record a lease's
// token table. A replica in another language writes the same rows
// through the functions [Migrate] installs in schema doublerun
// (doublerun.work_begin, work_end, side_effect, rejected, became_leader,
// lock_claim, event, next_token, and for a failover side_effect_key, ack
// and job_run; scenarios' documentation gives their arguments), so its
// times are the server's clock_timestamp() too.
package oracle
