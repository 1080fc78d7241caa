package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestEnqueue(t *testing.T) {
	t.Parallel()

	t.Run("InsideATransactionOnlyOnCommit", func(t *testing.T) {
		t.Parallel()
		db := newSchema(t)
		conn := stacktest.Connect(t, db.Postgres)
		ctx := context.Background()
		require.NoError(t, Migrate(ctx, conn, "app_jobs"))
		require.NoError(t, Migrate(ctx, conn, "app_jobs"), "Migrate is idempotent")

		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = Enqueue(ctx, tx, "app_jobs", NewJob{Kind: "a"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
		ids, err := Enqueue(ctx, tx, "app_jobs", NewJob{Kind: "b", Args: json.RawMessage(`{"x":1}`), MaxAttempts: 2})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		var kind, args string
		var maxAttempts int
		require.NoError(t, conn.QueryRow(ctx, `SELECT kind, args::text, max_attempts FROM app_jobs`).Scan(&kind, &args, &maxAttempts))
		require.Equal(t, "b", kind)
		require.Equal(t, `{"x": 1}`, args)
		require.Equal(t, 2, maxAttempts)
		require.Len(t, ids, 1)
	})

	t.Run("ReturnsIDsInOrderAndFillsDefaults", func(t *testing.T) {
		t.Parallel()
		conn := migratedConn(t)
		ctx := context.Background()
		jobs := make([]NewJob, 50)
		for i := range jobs {
			jobs[i] = NewJob{Kind: fmt.Sprintf("k%02d", i)}
		}
		ids, err := Enqueue(ctx, conn, "", jobs...)
		require.NoError(t, err)
		for i, id := range ids {
			var kind, args string
			var maxAttempts int
			require.NoError(t, conn.QueryRow(ctx, `SELECT kind, args::text, max_attempts FROM doublerun_jobs WHERE id = $1`, id).Scan(&kind, &args, &maxAttempts))
			require.Equal(t, jobs[i].Kind, kind)
			require.Equal(t, "{}", args)
			require.Equal(t, DefaultMaxAttempts, maxAttempts)
		}
	})

	t.Run("CapsMaxAttemptsAtTheColumnsRange", func(t *testing.T) {
		t.Parallel()
		conn := migratedConn(t)
		ctx := context.Background()
		ids, err := Enqueue(ctx, conn, "", NewJob{Kind: "k", MaxAttempts: math.MaxInt})
		require.NoError(t, err)
		var maxAttempts int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT max_attempts FROM doublerun_jobs WHERE id = $1`, ids[0]).Scan(&maxAttempts))
		require.Equal(t, int64(math.MaxInt32), maxAttempts, "retried as often as an integer column can count")
	})

}

func TestEnqueueRejectsBadJobs(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).
	_, err := Enqueue(context.Background(), nil, "", NewJob{})
	require.ErrorContains(t, err, "Kind is required")
	_, err = Enqueue(context.Background(), nil, "", NewJob{Kind: "k", MaxAttempts: -1})
	require.ErrorContains(t, err, "MaxAttempts must be at least 1")
	_, err = Enqueue(context.Background(), nil, "a.b.c", NewJob{Kind: "k"})
	require.ErrorContains(t, err, "must be table or schema.table")
	w := newWorker(t, Config{Lease: newStubLease(lease.Follower)})
	_, err = w.Enqueue(context.Background(), NewJob{Kind: "k"})
	require.ErrorContains(t, err, "set Config.DSN or Config.Pool")
}

func jobIDs(jobs []*Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// assertNoError reports err from a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func TestMigrate(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).

	// The loser of a race a real server shows only when replicas migrate at
	// the very same moment.
	for _, tt := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"LostTheRaceOnTheCatalogIndex", &pgconn.PgError{Code: "23505"}, false},
		{"LostTheRaceOnTheRelation", &pgconn.PgError{Code: "42P07"}, false},
		{"LostTheRaceOnTheRowType", &pgconn.PgError{Code: "42710"}, false},
		{"NotAllowed", &pgconn.PgError{Code: "42501"}, true},
		{"ConnectionLost", io.ErrUnexpectedEOF, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Migrate(context.Background(), failingExec{err: tt.err}, "")
			if tt.wantErr {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
		})
	}

}

// Replicas that start together migrate the same table at once, through
// transaction pooling, and all succeed.
func TestMigrateManyReplicasAtOnce(t *testing.T) {
	t.Parallel()
	db := reusedDB(t)
	stacktest.MustExec(t, db.Postgres.DSN, `CREATE SCHEMA app`)
	conns := make([]*pgx.Conn, 4)
	for i := range conns {
		conns[i] = stacktest.Connect(t, db.Transaction)
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { assertNoError(t, Migrate(context.Background(), c, "app.jobs")) })
	}
	wg.Wait()
	_, err := Enqueue(context.Background(), conns[0], "app.jobs", NewJob{Kind: "k"})
	require.NoError(t, err)
	var indexes int
	require.NoError(t, conns[0].QueryRow(context.Background(),
		`SELECT count(*) FROM pg_indexes WHERE schemaname = 'app' AND tablename = 'jobs' AND indexname = 'jobs_due'`).Scan(&indexes))
	require.Equal(t, 1, indexes)
}

// migratedConn connects to a fresh schema with the default jobs table.
func migratedConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn := stacktest.Connect(t, newSchema(t).Postgres)
	require.NoError(t, Migrate(context.Background(), conn, ""))
	return conn
}

// failingExec is a DB whose Exec fails with err; Migrate uses nothing else.
type failingExec struct {
	DB
	err error
}

func (f failingExec) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, f.err
}
