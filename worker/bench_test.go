package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// BenchmarkThroughput measures the statements of one leader, one after the
// other: each iteration claims a batch in one statement (from where the
// last claim stopped), runs no-op handlers, and records the outcomes in
// one transaction fenced by a real Fenced lease (BEGIN, the fence, one
// UPDATE, COMMIT). Jobs are enqueued before the timer starts. The worker's
// loop overlaps these steps; `make bench` measures it as a whole.
//
//	go test -run '^$' -bench Throughput -benchtime 3s -count 5 ./worker/
func BenchmarkThroughput(b *testing.B) {
	for _, topo := range []struct {
		name string
		ep   func(stacktest.DB) stack.Endpoint
	}{
		{"Direct", func(db stacktest.DB) stack.Endpoint { return db.Postgres }},
		{"TransactionPooling", func(db stacktest.DB) stack.Endpoint { return db.Transaction }},
	} {
		for _, batch := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("%s/Batch%d", topo.name, batch), func(b *testing.B) {
				w, term, conn := benchSetup(b, topo.ep, batch)
				ctx := context.Background()
				for left := b.N * batch; left > 0; left -= 10_000 {
					jobs := make([]NewJob, min(left, 10_000))
					for i := range jobs {
						jobs[i] = NewJob{Kind: "bench"}
					}
					_, err := Enqueue(ctx, conn, "", jobs...)
					require.NoError(b, err)
				}
				before := w.Stats().JobsCompleted
				var from claimKey
				b.ResetTimer()
				for range b.N {
					c, err := w.claimFrom(ctx, term, batch, from)
					if err != nil {
						b.Fatal(err)
					}
					from = c.last
					if err := w.complete(ctx, term, c.jobs, w.run(ctx, c.jobs)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				done := w.Stats().JobsCompleted - before
				require.Equal(b, int64(b.N*batch), done)
				b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
}

// benchSetup gives a worker on a database of its own and the Leader term
// of a real Fenced lease to claim and complete under, and a direct
// connection to enqueue on.
func benchSetup(b *testing.B, endpoint func(stacktest.DB) stack.Endpoint, batch int) (*Worker, lease.Term, *pgx.Conn) {
	b.Helper()
	ctx := context.Background()
	db := stacktest.NewDB(b)
	ep := endpoint(db)
	direct := stacktest.Connect(b, db.Postgres)
	require.NoError(b, Migrate(ctx, direct, ""))
	require.NoError(b, lease.MigrateFenced(ctx, direct, ""))
	l, err := lease.NewFenced(ctx, lease.FencedConfig{DSN: ep.DSN, Name: "bench", TTL: time.Hour})
	require.NoError(b, err)
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	res, err := l.TryAcquire(ctx)
	require.NoError(b, err)
	require.Equal(b, lease.Leader, res.Status)
	w, err := New(Config{Lease: l, DSN: ep.DSN, Handlers: map[string]Handler{"bench": noop}, BatchSize: batch})
	require.NoError(b, err)
	b.Cleanup(w.Close)
	return w, res.Term, direct
}
