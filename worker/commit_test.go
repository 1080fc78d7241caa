package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Two failures of completion happen between the worker's statements, where
// a test cannot ask the server for them: a connection that breaks at
// COMMIT, after the outcomes were written but before they were made
// durable, and a worker that stalls (a paused process) inside the
// transaction. pgxmock, which could script them, has no release that
// builds against pgx v5.11 or later (pgx.Rows gained TypeMap,
// pgx.BatchResults gained Tx). Instead the real transaction is wrapped, so
// that a real server and the real driver produce the failure.

// commitHookPool hands out transactions that call hook just before COMMIT.
type commitHookPool struct {
	*pgxpool.Pool
	hook func(ctx context.Context, tx pgx.Tx) error
}

func (p commitHookPool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := p.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return commitHookTx{Tx: tx, hook: p.hook}, nil
}

type commitHookTx struct {
	pgx.Tx
	hook func(ctx context.Context, tx pgx.Tx) error
}

func (tx commitHookTx) Commit(ctx context.Context) error {
	if err := tx.hook(ctx, tx.Tx); err != nil {
		return err
	}
	return tx.Tx.Commit(ctx)
}

func TestComplete(t *testing.T) {
	t.Parallel()

	// However many outcomes and however small the table, and although the
	// statistics saw no running job, recording finds the jobs through the
	// primary key and never reads the whole table, whose size grows with
	// every completed job.
	t.Run("FindsTheJobsThroughThePrimaryKey", func(t *testing.T) {
		t.Parallel()
		b := manyJobs(t, 10000)
		ctx := context.Background()
		explain := func(sql string, args ...any) string {
			var raw []byte
			require.NoError(t, b.conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+fmt.Sprintf(sql, b.worker.table), args...).Scan(&raw))
			return string(raw)
		}
		for _, n := range []int{100, 1000} {
			jobs, err := b.worker.claim(ctx, leaderTerm, n)
			require.NoError(t, err)
			errs := make([]error, n)
			ids, keys := buildOutcomes(jobs, errs, DefaultRetryDelay).succeeded()
			plan := explain(completedSQL, ids, keys, leaderTerm.Token)
			require.NotContains(t, plan, `"Seq Scan"`, "the plan for %d successes:\n%s", n, plan)
			require.Contains(t, plan, `"doublerun_jobs_pkey"`)

			for i := range errs {
				errs[i] = errors.New("no")
			}
			plan = explain(failedSQL, buildOutcomes(jobs, errs, DefaultRetryDelay).failed(), leaderTerm.Token)
			require.NotContains(t, plan, `"Seq Scan"`, "the plan for %d failures:\n%s", n, plan)
			require.Contains(t, plan, `"doublerun_jobs_pkey"`)
		}
	})

	t.Run("CommitFails", func(t *testing.T) {
		t.Parallel()
		db := newSchema(t)
		b := jobsSetup(t, db, db.Postgres, Config{Handlers: map[string]Handler{"k": noop}})
		ids := b.enqueue(t, 2, "k")
		ctx := context.Background()
		jobs, err := b.worker.claim(ctx, leaderTerm, 10)
		require.NoError(t, err)
		require.Len(t, jobs, 2)

		killer := stacktest.Connect(t, db.Postgres)
		b.worker.db = commitHookPool{Pool: b.worker.ownPool, hook: func(ctx context.Context, tx pgx.Tx) error {
			_, err := killer.Exec(ctx, `SELECT pg_terminate_backend($1)`, tx.Conn().PgConn().PID())
			return err
		}}
		err = b.worker.complete(ctx, leaderTerm, jobs, []error{nil, nil})
		require.ErrorContains(t, err, "commit")
		st := b.worker.Stats()
		require.Zero(t, st.JobsCompleted, "nothing is counted that did not commit")
		require.Zero(t, st.LostClaims)
		require.Zero(t, st.StaleRejected)
		for _, id := range ids {
			require.Equal(t, StateRunning, b.job(t, id).State, "left for the visibility timeout")
		}
	})

	// A worker paused inside its completion transaction, after the fence,
	// holds the fence's row lock, which holds off the lease's next grant.
	// The server ends the transaction after completeStall, so another
	// replica takes over after that, not after the pause.
	t.Run("StalledWorkerDoesNotHoldOffTheNextLeader", func(t *testing.T) {
		t.Parallel()
		db := newSchema(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn := stacktest.Connect(t, db.Postgres)
		require.NoError(t, lease.MigrateFenced(ctx, conn, ""))
		newLease := func(holder string) *lease.Fenced {
			l, err := lease.NewFenced(ctx, lease.FencedConfig{DSN: db.Postgres.DSN, Name: "stall", Holder: holder, TTL: time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			return l
		}
		first := newLease("first")
		// Its first answer may come after the 800 ms it may take (a loaded
		// machine): Faulted, or Follower when the grant committed but its
		// answer came after the trust deadline (make test, quiet machine,
		// once). It asks until it leads; a Follower must be its own
		// late grant, never another holder.
		var res lease.Result
		for res.Status != lease.Leader {
			var err error
			res, err = first.TryAcquire(ctx)
			require.NoError(t, err)
			if res.Status == lease.Follower {
				var holder string
				require.NoError(t, conn.QueryRow(ctx, `SELECT holder FROM doublerun_leases WHERE name = 'stall'`).Scan(&holder))
				require.Equal(t, "first", holder, "nobody else holds the lease")
			}
		}
		b := jobsSetup(t, db, db.Postgres, Config{Lease: first, Handlers: map[string]Handler{"k": noop}})
		id := b.enqueue(t, 1, "k")[0]
		jobs, err := b.worker.claim(ctx, res.Term, 1)
		require.NoError(t, err)

		// The worker stays paused until the next replica has taken over:
		// by then the server has ended the transaction, which the error
		// below shows. Without the server's stall bound the fence's row
		// lock is held for as long as the pause, and the next replica never
		// leads: the wait then gives up after heldOff, which is far above
		// the takeover's completeStall plus the TTL (2 s) on any machine.
		// A fixed pause and a bound below it once failed beside two CPU
		// hogs: the takeover took 10.3 s against a 9 s bound with a 300 ms
		// TTL, whose 240 ms answer budget a loaded machine missed on poll
		// after poll. (Before that it took 3 to 9 s under load: each poll
		// that timed out behind the fence dropped its connection, and
		// reconnecting counted against the answer budget. Fenced now
		// connects outside it: TestFencedConnect/SlowConnectStillLeads.)
		const heldOff = 30 * time.Second
		tookOver := make(chan struct{})
		b.worker.db = commitHookPool{Pool: b.worker.ownPool, hook: func(context.Context, pgx.Tx) error {
			// The fence has run; its lock is held. A paused worker keeps
			// no timeout of its own, so this waits on the test's context.
			select {
			case <-tookOver:
			case <-ctx.Done():
			}
			return nil
		}}
		completed := make(chan error, 1)
		go func() { completed <- b.worker.complete(ctx, res.Term, jobs, []error{nil}) }()

		next := newLease("next")
		begin := time.Now()
		for {
			res, err := next.TryAcquire(ctx)
			require.NoError(t, err)
			if res.Status == lease.Leader {
				break
			}
			require.Less(t, time.Since(begin), heldOff, "the next replica was held off for as long as the worker was paused")
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(begin)
		close(tookOver)
		select {
		case err = <-completed:
		case <-ctx.Done():
			t.Fatal("the completion never returned")
		}
		require.Error(t, err, "the server ended the stalled transaction")
		require.Equal(t, StateRunning, b.job(t, id).State, "left for the visibility timeout")
		t.Logf("the next replica took over %s after the worker stalled in its completion", took.Round(time.Millisecond))
	})
}
