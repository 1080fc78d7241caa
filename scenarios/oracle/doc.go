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
//	  - The orphaned-lock window is the time the lease's advisory lock stayed
//	    on a backend after the replica that held it there let go or died,
//	    from the runner's samples of pg_locks ([LockSample]) and the
//	    replicas' claims ([EventLockClaim]); a replica that ends such a
//	    stretch by claiming that backend re-entered the lock. See locks.go.
//
// Reports carry the raw History, so anyone can recompute the figures.
//
// A wrong window is a wrong verdict, so the windows are checked against
// brute force (a count of working replicas per millisecond over random
// histories; for the orphaned-lock window, held and claimed backends per
// millisecond), the package has a floor in the mutation gate's baseline,
// and the orphaned-lock window's guards are in
// testdata/mutation/oracle.guards.json.
// Those tests need no server: the figures are arithmetic over a History.
//
// # The oracle owns its tables
//
// No other package names the oracle's tables: replicas log through a
// [Recorder] (their side-effect write too, [Recorder.SideEffect]), the
// runner and the faults ask [LatestWork], [WorkBegun] and [AnyWork], and
// [Load] reads a run back.
package oracle
