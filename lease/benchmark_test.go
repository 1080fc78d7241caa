package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	for _, strategy := range []string{"advisory", "fenced"} {
		for _, ep := range []stack.Endpoint{db.Postgres, db.Transaction} {
			for _, role := range []Status{Leader, Follower} {
				key++
				if strategy == "advisory" && !ep.Direct() && role == Follower {
					// Through a transaction pool of one backend there is no
					// Advisory follower: the second lease is a second
					// leader (#556), and its poll is the leader's probe.
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/%s", strategy, ep.Name, role), func(b *testing.B) {
					spec := benchSpec{Strategy: strategy, DSN: ep.DSN, Name: fmt.Sprintf("poll-%s-%s-%s", strategy, ep.Name, role), Key: key}
					leader := benchLease(b, spec.as("leader"))
					require.Equal(b, Leader, mustTry(b, ctx, leader).Status)
					l := leader
					if role == Follower {
						l = benchLease(b, spec.as("follower"))
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

// benchSpec is one lease of BenchmarkPoll. Name and Key keep benchmarks
// apart: Name is the Fenced row and the token row, Key the Advisory lock's
// second key. (Package failover measures failover with the same leases.)
type benchSpec struct {
	// Strategy is advisory or fenced.
	Strategy string
	DSN      string
	Name     string
	Holder   string
	Key      int32
}

func (s benchSpec) as(holder string) benchSpec { s.Holder = holder; return s }

// benchLease builds the lease spec describes and closes it when b ends.
// The advisory lease accepts a transaction pool, as BenchmarkPoll
// measures #556 there.
func benchLease(b testing.TB, s benchSpec) Lease {
	b.Helper()
	var (
		l   Lease
		err error
	)
	switch s.Strategy {
	case "advisory":
		l, err = NewAdvisory(testCtx(b), AdvisoryConfig{
			DSN: s.DSN, Name: s.Name, Holder: s.Holder, Key2: s.Key, ApplicationName: s.Name + "-" + s.Holder, AllowTransactionPooling: true,
		})
	case "fenced":
		l, err = NewFenced(testCtx(b), FencedConfig{DSN: s.DSN, Name: s.Name, Holder: s.Holder, ApplicationName: s.Name + "-" + s.Holder})
	default:
		err = fmt.Errorf("no strategy %q", s.Strategy)
	}
	require.NoError(b, err)
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
