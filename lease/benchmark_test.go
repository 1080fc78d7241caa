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

// BenchmarkPoll measures one TryAcquire, by the leader and by a follower,
// for each strategy, directly and through the stack's transaction pool
// (size 1). An Advisory leader's poll is the liveness probe; a follower's
// is the try-lock. A Fenced poll is one statement either way.
func BenchmarkPoll(b *testing.B) {
	db := stacktest.NewDB(b)
	ctx := testCtx(b)
	require.NoError(b, MigrateFenced(ctx, stacktest.Connect(b, db.Postgres), ""))
	var key int32
	for _, strategy := range []string{"Advisory", "Fenced"} {
		for _, ep := range []stack.Endpoint{db.Postgres, db.Transaction} {
			for _, role := range []Status{Leader, Follower} {
				key++
				if strategy == "Advisory" && !ep.Direct() && role == Follower {
					// Through a transaction pool of one backend there is no
					// Advisory follower: the second lease is a second
					// leader (#556), and its poll is the leader's probe.
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/%s", strategy, ep.Name, role), func(b *testing.B) {
					name := fmt.Sprintf("poll-%s-%s-%s", strategy, ep.Name, role)
					leader := benchLease(b, strategy, ep, name, "leader", key)
					require.Equal(b, Leader, mustTry(b, ctx, leader).Status)
					l := leader
					if role == Follower {
						l = benchLease(b, strategy, ep, name, "follower", key)
					}
					for b.Loop() {
						res, err := l.TryAcquire(ctx)
						if err != nil || res.Status != role {
							b.Fatalf("poll: %+v, %v", res, err)
						}
					}
				})
			}
		}
	}
}

// benchLease makes a lease of the strategy on ep. name and key keep
// benchmarks and trials apart: name is the Fenced row, key the Advisory
// lock's second key.
func benchLease(b *testing.B, strategy string, ep stack.Endpoint, name, holder string, key int32, mods ...func(*FencedConfig)) Lease {
	b.Helper()
	ctx := testCtx(b)
	var l Lease
	switch strategy {
	case "Advisory":
		a, err := NewAdvisory(ctx, AdvisoryConfig{
			DSN: ep.DSN, Name: name, Holder: holder, Key2: key,
			AllowTransactionPooling: true, ApplicationName: name + "-" + holder,
		})
		require.NoError(b, err)
		l = a
	case "Fenced":
		cfg := FencedConfig{DSN: ep.DSN, Name: name, Holder: holder, ApplicationName: name + "-" + holder}
		for _, m := range mods {
			m(&cfg)
		}
		f, err := NewFenced(ctx, cfg)
		require.NoError(b, err)
		l = f
	default:
		b.Fatalf("no strategy %q", strategy)
	}
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// BenchmarkFailover measures the leaderless window after a fault to the
// leader: from the fault until a replica reports Leader from a poll that
// started once the fault had taken effect. Two replicas poll every 100 ms,
// the fault lands at a random phase of the poll, and each sub-benchmark
// runs failoverTrials trials, reporting the median and the p99 (with 20
// trials, the worst) in milliseconds. Fenced runs with a 2 s TTL.
//
// Faults: Close is a graceful shutdown (Release, then close). KillBackend
// terminates the leader's backend with pg_terminate_backend; the leader
// process lives on and keeps polling. Crash stops the leader's polling and
// drops its connection without a release, as a killed process does.
func BenchmarkFailover(b *testing.B) {
	const (
		failoverTrials = 20
		poll           = 100 * time.Millisecond
		ttl            = 2 * time.Second
	)
	db := stacktest.NewDB(b)
	ctx := testCtx(b)
	admin := stacktest.Connect(b, db.Postgres)
	require.NoError(b, MigrateFenced(ctx, admin, ""))
	key := int32(1000)
	for _, strategy := range []string{"Advisory", "Fenced"} {
		for _, fault := range []string{"Close", "KillBackend", "Crash"} {
			b.Run(strategy+"/"+fault, func(b *testing.B) {
				var samples []time.Duration
				for b.Loop() {
					for i := range failoverTrials {
						key++
						name := fmt.Sprintf("failover-%s-%s-%d-%d", strategy, fault, len(samples), i)
						samples = append(samples, failoverTrial(b, ctx, admin, db.Postgres, strategy, fault, name, key, poll, ttl))
					}
				}
				slices.Sort(samples)
				b.ReportMetric(ms(percentile(samples, 50)), "p50-ms")
				b.ReportMetric(ms(percentile(samples, 99)), "p99-ms")
				b.ReportMetric(float64(len(samples)), "trials")
			})
		}
	}
}

type observation struct {
	replica string
	started time.Time
	ended   time.Time
	res     Result
}

func failoverTrial(b *testing.B, ctx context.Context, admin *pgx.Conn, ep stack.Endpoint, strategy, fault, name string, key int32, poll, ttl time.Duration) time.Duration {
	b.Helper()
	leader := benchLease(b, strategy, ep, name, "a", key, withTTL(ttl))
	survivor := benchLease(b, strategy, ep, name, "b", key, withTTL(ttl))
	defer func() {
		_ = leader.Close(context.WithoutCancel(ctx))
		_ = survivor.Close(context.WithoutCancel(ctx))
	}()
	require.Equal(b, Leader, mustTry(b, ctx, leader).Status)
	require.Equal(b, Follower, mustTry(b, ctx, survivor).Status)

	obs := make(chan observation, 1024)
	trialCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	leaderCtx, stopLeader := context.WithCancel(trialCtx)
	defer stopLeader()
	leaderDone := make(chan struct{})
	go func() { defer close(leaderDone); pollLoop(leaderCtx, leader, "a", poll, obs) }()
	go pollLoop(trialCtx, survivor, "b", poll, obs)

	// Land the fault at a random phase of the poll period.
	time.Sleep(rand.N(poll))
	start := time.Now()
	switch fault {
	case "Close":
		stopLeader()
		<-leaderDone
		require.NoError(b, leader.Close(ctx))
	case "Crash":
		stopLeader()
		<-leaderDone
		crash(ctx, leader)
	case "KillBackend":
		var pid int32
		require.NoError(b, admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", name+"-a").Scan(&pid))
		terminate(b, ctx, admin, pid)
	}
	effective := time.Now()
	for {
		select {
		case o := <-obs:
			if o.res.Status == Leader && o.started.After(effective) {
				return o.ended.Sub(start)
			}
		case <-time.After(time.Minute):
			b.Fatalf("%s/%s: no leader a minute after the fault", strategy, fault)
		}
	}
}

// pollLoop is one replica: TryAcquire every period until ctx ends.
func pollLoop(ctx context.Context, l Lease, replica string, every time.Duration, out chan<- observation) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		started := time.Now()
		res, err := l.TryAcquire(ctx)
		if err != nil {
			return
		}
		select {
		case out <- observation{replica: replica, started: started, ended: time.Now(), res: res}:
		case <-ctx.Done():
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// crash drops the lease's connection without releasing anything, as the
// death of its process would, and leaves the lease unusable.
func crash(ctx context.Context, l Lease) {
	switch l := l.(type) {
	case *Advisory:
		l.mu.Lock()
		defer l.mu.Unlock()
		closeConn(ctx, l.conn)
		l.conn, l.held, l.closed = nil, false, true
	case *Fenced:
		l.mu.Lock()
		defer l.mu.Unlock()
		closeConn(ctx, l.conn)
		l.conn, l.term, l.closed = nil, Term{}, true
	}
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100 // nearest rank
	return sorted[max(i, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
