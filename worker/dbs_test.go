package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Through PgBouncer a test needs a database of its own: the bouncer keeps
// pools per database, and a pool size holds only if no other test shares
// the pool. CREATE DATABASE copies the template, which costs a tenth of a
// second of server time and a second or more on a busy machine, more than
// most tests take. So reusedDB hands each test a database for itself, but
// reuses the databases of tests that have ended, emptied.
//
// A database is slot N of this package, named doublerun_worker_N. Its
// slot belongs to one test binary at a time: the binary holds a session
// advisory lock on N for as long as it runs, so that another binary on the
// same stack (the mutation gate's runs, one after another) takes another
// slot or waits for the first to exit. The databases outlive the binary,
// at most as many as tests ran at once, and are emptied again when next
// taken; a stack of a test's own goes with its servers.

// reusedLockKey is the first key of the slots' advisory locks.
const reusedLockKey = 0x776f726b // "work"

var reused struct {
	mu    sync.Mutex
	free  []stacktest.DB
	next  int
	locks []*pgx.Conn // held until the binary exits
}

// reusedDB returns an empty database of the shared stack for the test
// alone, reachable through every endpoint as stacktest.NewDB's. When the
// test passes, the database goes back to the binary's free list; when it
// fails, it is left as it is for the test's logs and not used again by
// this binary.
func reusedDB(t *testing.T) stacktest.DB {
	t.Helper()
	s := stacktest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	reused.mu.Lock()
	var db stacktest.DB
	if n := len(reused.free); n > 0 {
		db = reused.free[n-1]
		reused.free = reused.free[:n-1]
	} else {
		name, err := claimSlot(ctx, s.Postgres().DSN)
		if err != nil {
			reused.mu.Unlock()
			require.NoError(t, err)
		}
		db = stacktest.DB{
			Name:        name,
			Stack:       s,
			Postgres:    s.Postgres().WithDatabase(name),
			Session:     s.Session().WithDatabase(name),
			Transaction: s.Transaction().WithDatabase(name),
		}
	}
	reused.mu.Unlock()

	require.NoError(t, emptyDatabase(ctx, db.Postgres.DSN), "empty database %s", db.Name)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		reused.mu.Lock()
		defer reused.mu.Unlock()
		reused.free = append(reused.free, db)
	})
	return db
}

// claimSlot takes the next slot no other binary holds, creates its
// database if it does not exist yet, and returns the database's name. The
// caller holds reused.mu.
func claimSlot(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	for ; ; reused.next++ {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, reusedLockKey, reused.next).Scan(&ok); err != nil {
			_ = conn.Close(context.Background())
			return "", fmt.Errorf("lock a database slot: %w", err)
		}
		if ok {
			break
		}
	}
	name := fmt.Sprintf("doublerun_worker_%d", reused.next)
	reused.next++
	reused.locks = append(reused.locks, conn)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") { // duplicate_database: a slot used before
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

// emptyDatabase drops every schema a test may have created, public
// included, and creates public again. A session left in a transaction by
// an earlier binary that was killed is ended first.
func emptyDatabase(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `DO $$
		DECLARE s name;
		BEGIN
			FOR s IN SELECT nspname FROM pg_namespace
				WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
			LOOP
				EXECUTE format('DROP SCHEMA %I CASCADE', s);
			END LOOP;
			CREATE SCHEMA public;
		END $$`)
	return err
}
