package failover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/fault"
)

// Faults are the faults a trial injects into the leader, named and
// defined by the chaos catalog (package scenarios/fault), in table order:
//
//	KILL_LEADER               the leader is a child process (this binary,
//	                          started again), killed with SIGKILL; the
//	                          kernel closes its sockets
//	TERMINATE_LEADER_BACKEND  pg_terminate_backend of the leader's lease
//	                          backend; the leader lives on and keeps
//	                          calling, so the first Leader may be its own
//	GRACEFUL_HANDOVER         the leader stops calling and closes its
//	                          lease, which releases it; measured from the
//	                          start of Close
var Faults = []fault.Fault{fault.KillLeader, fault.TerminateLeaderBackend, fault.GracefulHandover}

// notInjected is the error for a fault of the catalog that a trial does
// not inject.
func notInjected(f fault.Fault) error {
	names := make([]string, len(Faults))
	for i, f := range Faults {
		names[i] = f.Name()
	}
	return fmt.Errorf("fault %s: a trial injects only %s", f.Name(), strings.Join(names, ", "))
}

// giveUp bounds how long a trial waits for a new leader after the fault.
const giveUp = time.Minute

// observation is one call of a replica.
type observation struct {
	replica        string
	started, ended time.Time
	res            lease.Result
}

// TrialResult is what one trial measured.
type TrialResult struct {
	// Latency runs from the fault until a call returned Leader.
	Latency time.Duration
	// Woken says that call was already under way when the fault landed:
	// the server handed the lease over to a waiting survivor, where a
	// polling one learns of it only from a call it starts later. It tells
	// a wake-up from a lucky poll without a bound on time.
	Woken bool
}

// Trial measures one failover: from the instant f, one of Faults, is
// injected into the leader until a replica's call returns Leader, on this
// process's monotonic clock, and whether that call was under way at the
// fault (TrialResult.Woken). Two replicas run, the leader ("a") and a survivor
// ("b"), each calling its lease at the pace of spec.Poll; the fault lands
// at a random phase of the poll, after the survivor has had a poll's time
// to start waiting. admin is a direct connection to spec's database, from
// which the leader's backend is found and terminated. Every lease the
// trial opens is closed, and its child process killed, before it returns.
func Trial(ctx context.Context, admin *pgx.Conn, spec Spec, f fault.Fault) (TrialResult, error) {
	if !slices.Contains(Faults, f) {
		return TrialResult{}, notInjected(f)
	}
	trialCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	obs := make(chan observation, 1024)
	closeCtx := context.WithoutCancel(ctx)

	// The leader: a child process for a kill, a lease in this process else.
	var (
		leader     lease.Lease
		term       lease.Term // the leader's before the fault
		kid        *child
		stopLeader = func() {}
		leaderDone = make(chan struct{})
	)
	if f == fault.KillLeader {
		var err error
		if kid, err = startChild(trialCtx, spec.As("a")); err != nil {
			return TrialResult{}, err
		}
		defer kid.stop()
		close(leaderDone)
	} else {
		var err error
		if leader, err = spec.As("a").lease(ctx, nil); err != nil {
			return TrialResult{}, fmt.Errorf("leader's lease: %w", err)
		}
		// Deferred first, it runs last: after the loops have stopped.
		defer leader.Close(closeCtx)
		first, err := leader.TryAcquire(ctx)
		if err != nil || first.Status != lease.Leader {
			return TrialResult{}, fmt.Errorf("the first lease did not lead: %s %v %v", first.Status, first.Err, err)
		}
		term = first.Term
		var leaderCtx context.Context
		leaderCtx, stopLeader = context.WithCancel(trialCtx)
		go func() { defer close(leaderDone); replicaLoop(leaderCtx, spec, leader, "a", obs) }()
	}
	defer func() { stopLeader(); <-leaderDone }()
	survivor, err := spec.As("b").lease(ctx, nil)
	if err != nil {
		return TrialResult{}, fmt.Errorf("survivor's lease: %w", err)
	}
	defer survivor.Close(closeCtx)
	if res, err := survivor.TryAcquire(ctx); err != nil || res.Status != lease.Follower {
		return TrialResult{}, fmt.Errorf("the second lease was not a follower: %s %v %v", res.Status, res.Err, err)
	}
	survivorDone := make(chan struct{})
	go func() { defer close(survivorDone); replicaLoop(trialCtx, spec, survivor, "b", obs) }()
	defer func() { stopAll(); <-survivorDone }()

	// Land the fault at a random phase of the poll, and let a waiting
	// survivor be in its wait.
	if err := sleep(ctx, spec.Poll+rand.N(spec.Poll)); err != nil {
		return TrialResult{}, err
	}
	var start time.Time
	switch f {
	case fault.GracefulHandover:
		stopLeader()
		<-leaderDone
		start = time.Now()
		if err := leader.Close(ctx); err != nil {
			return TrialResult{}, fmt.Errorf("release: %w", err)
		}
	case fault.KillLeader:
		start = time.Now()
		if err := kid.kill(); err != nil {
			return TrialResult{}, fmt.Errorf("kill the leader: %w", err)
		}
	case fault.TerminateLeaderBackend:
		var pid int32
		if err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
			spec.As("a").AppName()).Scan(&pid); err != nil {
			return TrialResult{}, fmt.Errorf("find the leader's backend: %w", err)
		}
		start = time.Now()
		var ok bool
		if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
			return TrialResult{}, fmt.Errorf("pg_terminate_backend(%d): %v %v", pid, ok, err)
		}
	}
	deadline := time.NewTimer(giveUp)
	defer deadline.Stop()
	oldLeaderNoticed := false
	for {
		select {
		case o := <-obs:
			if !o.ended.After(start) {
				continue
			}
			if o.replica == "a" && o.res.Status != lease.Leader {
				oldLeaderNoticed = true
			}
			// The survivor cannot be granted the lease before the fault
			// frees it. The old leader (terminate only) has led again
			// once it noticed the fault or holds a new term; a Leader it
			// reports with its old term and no fault seen came from a
			// backend that had not died yet.
			if o.res.Status == lease.Leader && (o.replica == "b" || oldLeaderNoticed || o.res.Term != term) {
				return TrialResult{Latency: o.ended.Sub(start), Woken: o.started.Before(start)}, nil
			}
		case <-deadline.C:
			return TrialResult{}, fmt.Errorf("%s/%s: no leader %s after the fault", spec.Strategy, f.Name(), giveUp)
		case <-ctx.Done():
			return TrialResult{}, ctx.Err()
		}
	}
}

// replicaLoop is one replica: it calls its lease (see call) and
// starts the next call spec.Poll after the last one started, or at once
// when the call took longer, as a waiting follower's does. It stops when
// ctx ends.
func replicaLoop(ctx context.Context, spec Spec, l lease.Lease, replica string, out chan<- observation) {
	for {
		started := time.Now()
		res, err := call(ctx, l)
		if err != nil {
			return
		}
		select {
		case out <- observation{replica: replica, started: started, ended: time.Now(), res: res}:
		case <-ctx.Done():
			return
		}
		if sleep(ctx, spec.Poll-time.Since(started)) != nil {
			return
		}
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
