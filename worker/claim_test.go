package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClaim(t *testing.T) {
	t.Parallel()

	// Every claimed job leaves a dead entry at the start of the due index
	// until VACUUM. A claim reads on from where the last one stopped, so
	// its cost does not grow with the number of jobs claimed before it.
	t.Run("ReadsNoDeadEntriesOfEarlierClaims", func(t *testing.T) {
		t.Parallel()
		b := manyJobs(t, 10100, `ALTER TABLE doublerun_jobs SET (autovacuum_enabled = false)`) // the dead entries stay
		ctx := context.Background()
		var from claimKey
		for range 10 {
			c, err := b.worker.claimFrom(ctx, leaderTerm, 1000, from)
			require.NoError(t, err)
			require.Len(t, c.jobs, 1000)
			from = c.last
			require.NoError(t, b.worker.complete(ctx, leaderTerm, c.jobs, make([]error, len(c.jobs))))
		}

		fromStart := b.dueIndexBuffers(t, claimKey{})
		fromLast := b.dueIndexBuffers(t, from)
		require.Greater(t, fromStart, 20, "the setup leaves 10,000 dead entries to read past")
		require.LessOrEqual(t, fromLast, 5, "a claim from where the last stopped reads a page or two of the due index")
	})

	// However large the batch and however small the table, the claim
	// finds its rows through the primary key and never reads the whole
	// table, whose size grows with every completed job.
	t.Run("FindsTheBatchThroughThePrimaryKey", func(t *testing.T) {
		t.Parallel()
		b := manyJobs(t, 10000)
		ctx := context.Background()
		w := b.worker
		var raw []byte
		require.NoError(t, b.conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+fmt.Sprintf(claimSQL, w.table),
			w.kinds, 1000, w.config.VisibilityTimeout.Microseconds(), w.config.ID, leaderTerm.Token,
			claimKey{}.timestamptz(), int64(0)).Scan(&raw))
		require.NotContains(t, string(raw), `"Seq Scan"`, "the plan of a claim of 1,000 from 10,000 jobs:\n%s", raw)
		require.Contains(t, string(raw), `"doublerun_jobs_pkey"`)
	})

	// Claims read on from where the last one stopped, so a job whose key
	// lies behind that point is found only when a claim reads the index
	// from its start: at least every rescanEvery while claims stay full.
	t.Run("RescansFromTheStartWhileClaimsStayFull", func(t *testing.T) {
		t.Parallel()
		db := newSchema(t)
		var once sync.Once
		var b *jobsBundle
		h := HandlerFunc(func(ctx context.Context, _ *Job) error {
			var err error
			once.Do(func() {
				// Due an hour ago: behind every key claimed so far.
				_, err = b.worker.Enqueue(ctx, NewJob{Kind: "late", RunAt: time.Now().Add(-time.Hour)})
			})
			if err != nil {
				return err
			}
			return sleepCtx(ctx, 5*time.Millisecond)
		})
		b = jobsSetup(t, db, db.Postgres, Config{Handlers: map[string]Handler{"k": h, "late": noop},
			BatchSize: 1, MaxHandlers: 1, PollInterval: time.Hour})
		b.worker.rescanEvery = 20 * time.Millisecond
		b.enqueue(t, 200, "k")
		start(t, b.worker)
		waitCompleted(t, b.worker, 201)
		var before bool
		require.NoError(t, b.conn.QueryRow(context.Background(), `
			SELECT (SELECT claimed_at FROM doublerun_jobs WHERE kind = 'late')
			     < (SELECT max(claimed_at) FROM doublerun_jobs WHERE kind = 'k')`).Scan(&before))
		require.True(t, before, "the late job ran while the backlog was still being claimed")
	})
}

// dueIndexBuffers runs the claim from the key after from under EXPLAIN
// (ANALYZE, BUFFERS), in a transaction it rolls back, and returns how many
// buffers its scan of the due index touched.
func (b *jobsBundle) dueIndexBuffers(t *testing.T, from claimKey) int {
	t.Helper()
	ctx := context.Background()
	tx, err := b.conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	w := b.worker
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+fmt.Sprintf(claimSQL, w.table),
		w.kinds, 100, w.config.VisibilityTimeout.Microseconds(), w.config.ID, leaderTerm.Token,
		from.timestamptz(), from.id).Scan(&raw))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(raw, &plans))
	n, ok := plans[0].Plan.find("doublerun_jobs_due")
	require.True(t, ok, "the claim reads the due index:\n%s", raw)
	return n.SharedHitBlocks + n.SharedReadBlocks
}

// planNode is the part of EXPLAIN's JSON a test reads.
type planNode struct {
	IndexName        string     `json:"Index Name"`
	SharedHitBlocks  int        `json:"Shared Hit Blocks"`
	SharedReadBlocks int        `json:"Shared Read Blocks"`
	Plans            []planNode `json:"Plans"`
}

// find returns the first node, depth first, that scans index.
func (n planNode) find(index string) (planNode, bool) {
	if n.IndexName == index {
		return n, true
	}
	for _, c := range n.Plans {
		if f, ok := c.find(index); ok {
			return f, true
		}
	}
	return planNode{}, false
}
