package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
)

// acquirerLease is a stub lease that waits in Acquire, as a lease does
// whose follower waits for the lock: Leader as soon as free is closed,
// Follower when wait has passed without it.
type acquirerLease struct {
	*stubLease
	wait     time.Duration
	free     chan struct{}
	acquires atomic.Int64
}

var _ lease.Acquirer = (*acquirerLease)(nil)

func newAcquirerLease(wait time.Duration) *acquirerLease {
	return &acquirerLease{stubLease: newStubLease(lease.Follower), wait: wait, free: make(chan struct{})}
}

func (l *acquirerLease) Acquire(ctx context.Context) (lease.Result, error) {
	l.acquires.Add(1)
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	select {
	case <-l.free:
		return lease.Result{Status: lease.Leader, Term: leaderTerm}, nil
	case <-timer.C:
		return lease.Result{Status: lease.Follower}, nil
	case <-ctx.Done():
		return lease.Result{}, ctx.Err()
	}
}

// The gate tests of a lease that waits for leadership (lease.Acquirer),
// in a synctest bubble as the others.
func TestGateAcquirer(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	// The worker asks through Acquire, and a follower that waited there is
	// asked again at once: it waits in the lease, never in the loop.
	t.Run("FollowerWaitsInTheLease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newAcquirerLease(2 * time.Second)
			w := newWorker(t, Config{Lease: l})
			begin := time.Now()
			start(t, w)
			for range 3 {
				rep := nextCycle(w)
				require.Equal(t, lease.Follower, rep.Status)
				require.True(t, rep.Stamped, "a follower is healthy")
				require.Zero(t, rep.Wait, "Acquire has waited already")
			}
			require.Equal(t, 6*time.Second, time.Since(begin), "three waits in the lease and none in the loop")
			require.Zero(t, l.calls.Load(), "TryAcquire is not called when Acquire exists")
			require.GreaterOrEqual(t, l.acquires.Load(), int64(3))
		})
	})

	// A follower waiting in Acquire starts leader work the moment the lease
	// comes free, not a poll interval later.
	t.Run("TakesOverTheMomentTheLeaseIsFree", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newAcquirerLease(10 * time.Second)
			b := &gateBundle{polls: &atomic.Int64{}}
			b.worker = newWorker(t, Config{Lease: l, Sweeps: []Sweep{SweepFunc("count", func(context.Context, lease.Term) error {
				b.polls.Add(1)
				return nil
			})}})
			begin := time.Now()
			start(t, b.worker)
			require.Equal(t, lease.Follower, b.next().Status) // at 10 s
			go func() {
				time.Sleep(3 * time.Second)
				close(l.free) // the leader went away
			}()
			rep := b.next()
			require.Equal(t, lease.Leader, rep.Status)
			require.True(t, rep.Polled)
			require.Equal(t, 13*time.Second, time.Since(begin), "leader work began the moment the lease came free")
			require.Equal(t, int64(1), b.polls.Load())
		})
	})
}
