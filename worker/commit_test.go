package worker

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// A connection that breaks at COMMIT, after the outcomes were written but
// before they were made durable, is the one failure of completion a test
// cannot ask the server for. The brief suggested pgxmock for it, but
// pgxmock v4.9.0 does not compile against pgx v5.12 (pgx.Rows gained
// TypeMap, pgx.BatchResults gained Tx). Instead the real transaction is
// wrapped so that its backend is terminated just before COMMIT is sent: a
// real server and the real driver produce the failure.

// dyingCommitPool hands out transactions whose backend dies at COMMIT.
type dyingCommitPool struct {
	*pgxpool.Pool
	killer *pgx.Conn
}

func (p dyingCommitPool) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return dyingCommitTx{Tx: tx, killer: p.killer}, nil
}

type dyingCommitTx struct {
	pgx.Tx
	killer *pgx.Conn
}

func (tx dyingCommitTx) Commit(ctx context.Context) error {
	pid := tx.Conn().PgConn().PID()
	if _, err := tx.killer.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		return err
	}
	return tx.Tx.Commit(ctx)
}

func TestCompleteWhenCommitFails(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	b := jobsSetup(t, db, db.Postgres, Config{Handlers: map[string]Handler{"k": noop}})
	ids := b.enqueue(t, 2, "k")
	ctx := context.Background()
	jobs, err := b.worker.claim(ctx, leaderTerm, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	b.worker.db = dyingCommitPool{Pool: b.worker.ownPool, killer: stacktest.Connect(t, db.Postgres)}
	err = b.worker.complete(ctx, leaderTerm, jobs, []error{nil, nil})
	require.ErrorContains(t, err, "commit")
	st := b.worker.Stats()
	require.Zero(t, st.JobsCompleted, "nothing is counted that did not commit")
	require.Zero(t, st.LostClaims)
	require.Zero(t, st.StaleRejected)
	for _, id := range ids {
		require.Equal(t, StateRunning, b.job(t, id).State, "left for the visibility timeout")
	}
}
