package lease

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// benchSpec is one lease of a benchmark, in a form that can also be handed
// to a child process (see runBenchChild). Name and Key keep benchmarks and
// trials apart: Name is the Fenced row and the token row, Key the Advisory
// lock's second key.
type benchSpec struct {
	// Strategy is advisory, advisory-wait, fenced or fenced-wait; a -wait
	// strategy is the lease with Wait set, called through Acquire.
	Strategy string        `json:"strategy"`
	DSN      string        `json:"dsn"`
	Name     string        `json:"name"`
	Holder   string        `json:"holder"`
	Key      int32         `json:"key"`
	TTL      time.Duration `json:"ttl"`  // Fenced's; 0 for the default
	Poll     time.Duration `json:"poll"` // a replica's pace; see replicaLoop
}

func (s benchSpec) as(holder string) benchSpec { s.Holder = holder; return s }

func (s benchSpec) waits() bool { return strings.HasSuffix(s.Strategy, "-wait") }

// appName is the lease connection's application_name, by which a
// benchmark finds its backend.
func (s benchSpec) appName() string { return s.Name + "-" + s.Holder }

// newBenchLease builds the lease spec describes, logging to log (nil
// discards). The advisory lease accepts a transaction pool, as
// BenchmarkPoll measures #556 there, unless it waits, which is refused
// there.
func newBenchLease(ctx context.Context, s benchSpec, log *slog.Logger) (Lease, error) {
	switch strings.TrimSuffix(s.Strategy, "-wait") {
	case "advisory":
		return NewAdvisory(ctx, AdvisoryConfig{
			DSN: s.DSN, Name: s.Name, Holder: s.Holder, Key2: s.Key, ApplicationName: s.appName(),
			AllowTransactionPooling: !s.waits(), Wait: s.waits(), Logger: log,
		})
	case "fenced":
		return NewFenced(ctx, FencedConfig{
			DSN: s.DSN, Name: s.Name, Holder: s.Holder, ApplicationName: s.appName(), TTL: s.TTL, Wait: s.waits(), Logger: log,
		})
	}
	return nil, fmt.Errorf("no strategy %q", s.Strategy)
}

// benchLease builds the lease spec describes and closes it when b ends.
func benchLease(b testing.TB, s benchSpec) Lease {
	b.Helper()
	l, err := newBenchLease(testCtx(b), s, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// call is one call of a replica: Acquire for a waiting strategy,
// TryAcquire otherwise.
func (s benchSpec) call(ctx context.Context, l Lease) (Result, error) {
	if s.waits() {
		return l.(Acquirer).Acquire(ctx)
	}
	return l.TryAcquire(ctx)
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100 // nearest rank
	return sorted[max(i, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
