package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Failover benchmark settings: replicas pace their calls at failoverPoll,
// Fenced's TTL is failoverTTL, and each sub-benchmark iteration runs
// failoverTrials trials (-benchtime=Nx runs N times as many).
const (
	failoverTrials = 20
	failoverPoll   = 100 * time.Millisecond
	failoverTTL    = 2 * time.Second
)

// BenchmarkFailover measures failover latency: from the instant a fault is
// injected into the leader until a replica's call returns Leader. Two
// replicas run per trial, the leader and a survivor, each calling its
// lease at the pace of replicaLoop; the fault lands at a random phase of
// the poll. It reports p50, p99 and max in milliseconds, and the number of
// trials (with 20 trials, p99 is the worst).
//
// Strategies: advisory (TryAcquire every 100 ms), advisory-wait (Acquire,
// waiting in pg_advisory_lock), fenced (TTL 2 s, TryAcquire every 100 ms)
// and fenced-wait (TTL 2 s, Acquire, woken by the release's NOTIFY).
// Endpoints: Postgres directly and PgBouncer in session pooling.
//
// Faults:
//   - graceful: the leader stops calling and Closes the lease, which
//     releases it; measured from the start of Close.
//   - kill: the leader is a child process (this test binary, started
//     again), killed with SIGKILL; the kernel closes its sockets.
//   - terminate: pg_terminate_backend of the leader's backend; the leader
//     lives on and keeps calling, so the first Leader may be its own.
//
// Run it alone, with the native provider:
//
//	DOUBLERUN_PROVIDER=native go test -run '^$' -bench '^BenchmarkFailover$' -benchtime=1x ./lease/
func BenchmarkFailover(b *testing.B) {
	db := stacktest.NewDB(b)
	admin := stacktest.Connect(b, db.Postgres)
	require.NoError(b, MigrateFenced(testCtx(b), admin, ""))
	key := int32(1000)
	for _, ep := range []stack.Endpoint{db.Postgres, db.Session} {
		for _, strategy := range []string{"advisory", "advisory-wait", "fenced", "fenced-wait"} {
			for _, fault := range []string{"graceful", "kill", "terminate"} {
				b.Run(ep.Name+"/"+strategy+"/"+fault, func(b *testing.B) {
					var samples []time.Duration
					for b.Loop() {
						for range failoverTrials {
							key++
							spec := benchSpec{
								Strategy: strategy, DSN: ep.DSN, Key: key, TTL: failoverTTL, Poll: failoverPoll,
								Name: fmt.Sprintf("fo-%s-%s-%s-%d", ep.Name, strategy, fault, len(samples)),
							}
							samples = append(samples, failoverTrial(b, testCtx(b), admin, spec, fault))
						}
					}
					slices.Sort(samples)
					b.Logf("failover in ms, sorted: %.1f", func() []float64 {
						out := make([]float64, len(samples))
						for i, d := range samples {
							out[i] = ms(d)
						}
						return out
					}())
					b.ReportMetric(ms(percentile(samples, 50)), "p50-ms")
					b.ReportMetric(ms(percentile(samples, 99)), "p99-ms")
					b.ReportMetric(ms(samples[len(samples)-1]), "max-ms")
					b.ReportMetric(float64(len(samples)), "trials")
				})
			}
		}
	}
}

// observation is one call of a replica.
type observation struct {
	replica string
	started time.Time
	ended   time.Time
	res     Result
}

func failoverTrial(b *testing.B, ctx context.Context, admin *pgx.Conn, spec benchSpec, fault string) time.Duration {
	b.Helper()
	trialCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	obs := make(chan observation, 1024)

	// The leader: a child process for kill, a lease in this process else.
	var (
		leader     Lease
		term       Term // the leader's before the fault
		child      *benchChild
		stopLeader = func() {}
		leaderDone = make(chan struct{})
	)
	if fault == "kill" {
		child = startBenchChild(b, trialCtx, spec.as("a"))
		close(leaderDone)
	} else {
		leader = benchLease(b, spec.as("a"))
		// Each trial's leases close with it, so a session pool is not
		// filled by trials gone by. Deferred first, they run last.
		defer leader.Close(context.WithoutCancel(ctx))
		first := mustTry(b, ctx, leader)
		require.Equal(b, Leader, first.Status)
		term = first.Term
		var leaderCtx context.Context
		leaderCtx, stopLeader = context.WithCancel(trialCtx)
		go func() { defer close(leaderDone); replicaLoop(leaderCtx, spec, leader, "a", obs) }()
	}
	defer func() { stopLeader(); <-leaderDone }()
	survivor := benchLease(b, spec.as("b"))
	defer survivor.Close(context.WithoutCancel(ctx))
	require.Equal(b, Follower, mustTry(b, ctx, survivor).Status)
	survivorDone := make(chan struct{})
	go func() { defer close(survivorDone); replicaLoop(trialCtx, spec, survivor, "b", obs) }()
	defer func() { stopAll(); <-survivorDone }()

	// Land the fault at a random phase of the poll, and let a waiting
	// survivor be in its wait.
	time.Sleep(failoverPoll + rand.N(spec.Poll))
	var start time.Time
	switch fault {
	case "graceful":
		stopLeader()
		<-leaderDone
		start = time.Now()
		require.NoError(b, leader.Close(ctx))
	case "kill":
		start = time.Now()
		child.kill()
	case "terminate":
		var pid int32
		require.NoError(b, admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", spec.as("a").appName()).Scan(&pid))
		start = time.Now()
		var ok bool
		require.NoError(b, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
		require.True(b, ok)
	}
	deadline := time.After(time.Minute)
	oldLeaderNoticed := false
	for {
		select {
		case o := <-obs:
			if !o.ended.After(start) {
				continue
			}
			if o.replica == "a" && o.res.Status != Leader {
				oldLeaderNoticed = true
			}
			// The survivor cannot be granted the lease before the fault
			// frees it. The old leader (terminate only) has led again
			// once it noticed the fault or holds a new term; a Leader it
			// reports with its old term and no fault seen came from a
			// backend that had not died yet.
			if o.res.Status == Leader && (o.replica == "b" || oldLeaderNoticed || o.res.Term != term) {
				return o.ended.Sub(start)
			}
		case <-deadline:
			b.Fatalf("%s/%s: no leader a minute after the fault", spec.Strategy, fault)
		}
	}
}

// replicaLoop is one replica: it calls its lease (see benchSpec.call) and
// starts the next call spec.Poll after the last one started, or at once
// when the call took longer, as a waiting follower's does. It stops when
// ctx ends.
func replicaLoop(ctx context.Context, spec benchSpec, l Lease, replica string, out chan<- observation) {
	for {
		started := time.Now()
		res, err := spec.call(ctx, l)
		if err != nil {
			return
		}
		select {
		case out <- observation{replica: replica, started: started, ended: time.Now(), res: res}:
		case <-ctx.Done():
			return
		}
		pause := time.NewTimer(spec.Poll - time.Since(started))
		select {
		case <-pause.C:
		case <-ctx.Done():
			pause.Stop()
			return
		}
	}
}
