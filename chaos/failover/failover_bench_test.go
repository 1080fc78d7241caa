package failover_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos/failover"
	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// BenchmarkFailover measures failover latency with the trials of Measure (see
// the package documentation): per endpoint (Postgres directly, PgBouncer
// in session pooling), strategy and fault, 20 trials per iteration
// (-benchtime=Nx runs N times as many), reported as p50, p99 and max in
// milliseconds and the number of trials. `doublerun failover` prints the
// same as a table. Run it alone, with the native provider:
//
//	DOUBLERUN_PROVIDER=native go test -run '^$' -bench '^BenchmarkFailover$' -benchtime=1x ./failover/
func BenchmarkFailover(b *testing.B) {
	db := stacktest.NewDB(b)
	admin := stacktest.Connect(b, db.Postgres)
	ctx := b.Context()
	require.NoError(b, lease.MigrateFenced(ctx, admin, ""))
	key := int32(1000)
	for _, ep := range []stack.Endpoint{db.Postgres, db.Session} {
		for _, name := range failover.Strategies {
			for _, f := range failover.Faults {
				b.Run(ep.Name+"/"+name+"/"+f.Name(), func(b *testing.B) {
					var samples []time.Duration
					for b.Loop() {
						for range 20 {
							key++
							spec := failover.Spec{Strategy: name, DSN: ep.DSN, Key: key, TTL: 2 * time.Second, Poll: 100 * time.Millisecond,
								Name: fmt.Sprintf("fo-%s-%s-%s-%d", ep.Name, name, f.Name(), len(samples))}
							o, err := failover.Trial(ctx, admin, spec, f)
							require.NoError(b, err)
							samples = append(samples, o.Latency)
						}
					}
					s := failover.Summarize(samples)
					b.Logf("failover, sorted: %v", samplesMs(samples))
					b.ReportMetric(ms(s.P50), "p50-ms")
					b.ReportMetric(ms(s.P99), "p99-ms")
					b.ReportMetric(ms(s.Max), "max-ms")
					b.ReportMetric(float64(s.N), "trials")
				})
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func samplesMs(samples []time.Duration) []string {
	out := make([]string, len(samples))
	for i, d := range slices.Sorted(slices.Values(samples)) {
		out[i] = failover.Ms(d)
	}
	return out
}
