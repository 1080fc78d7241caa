package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
)

// The pinned configuration, the fix for issue #556: the lease has a DSN of
// its own on a session-pinned endpoint, and the work keeps the transaction
// pool. Both reach the same database, so the work's transactions can fence
// with the lease's tokens.
//
// This example is compiled but not run by go test: it needs a server. The
// DSNs are read from the environment, for example
// LEASE_DSN=postgres://svc@pgbouncer:6432/app_lease (pool_mode=session) and
// WORK_DSN=postgres://svc@pgbouncer:6432/app (pool_mode=transaction).
func ExampleNewAdvisory() {
	ctx := context.Background()
	l, err := lease.NewAdvisory(ctx, lease.AdvisoryConfig{
		DSN:    os.Getenv("LEASE_DSN"),
		Logger: slog.Default(),
	})
	if errors.Is(err, lease.ErrTransactionPooled) {
		slog.Error("the lease DSN is transaction-pooled; point it at a session-pinned endpoint", "err", err)
		return
	}
	if err != nil {
		slog.Error("lease", "err", err)
		return
	}
	defer l.Close(ctx)

	workCfg, err := pgxpool.ParseConfig(os.Getenv("WORK_DSN"))
	if err != nil {
		slog.Error("work dsn", "err", err)
		return
	}
	// Safe behind transaction pooling before PgBouncer 1.21.
	workCfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	work, err := pgxpool.NewWithConfig(ctx, workCfg)
	if err != nil {
		slog.Error("work pool", "err", err)
		return
	}
	defer work.Close()

	res, err := l.TryAcquire(ctx)
	if err != nil || res.Status != lease.Leader {
		return // a follower does no leader work; a faulted replica backs off
	}
	err = pgx.BeginFunc(ctx, work, func(tx pgx.Tx) error {
		if err := l.Fence(ctx, tx, res.Term); err != nil {
			return err // deposed: ErrStaleToken, and the write rolls back
		}
		_, err := tx.Exec(ctx, "UPDATE jobs SET state = 'done' WHERE id = $1", 42)
		return err
	})
	if errors.Is(err, lease.ErrStaleToken) {
		slog.Warn("another replica leads now; the write was refused")
	}
}

// A Fenced lease needs no pinned endpoint: it works through the transaction
// pool. Leader work stops at Deadline unless a later poll renewed.
//
// Compiled, not run: it needs a server (FENCED_DSN).
func ExampleFenced() {
	ctx := context.Background()
	dsn := os.Getenv("FENCED_DSN") // may be the transaction pool
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if err := lease.MigrateFenced(ctx, conn, ""); err != nil {
		return
	}

	l, err := lease.NewFenced(ctx, lease.FencedConfig{DSN: dsn})
	if err != nil {
		return
	}
	defer l.Close(ctx)

	res, err := l.TryAcquire(ctx)
	if err != nil || res.Status != lease.Leader {
		return
	}
	workCtx, cancel := context.WithDeadline(ctx, l.Deadline())
	defer cancel()
	_ = pgx.BeginFunc(workCtx, conn, func(tx pgx.Tx) error {
		if err := l.Fence(workCtx, tx, res.Term); err != nil {
			return err
		}
		_, err := tx.Exec(workCtx, "INSERT INTO audit (token) VALUES ($1)", res.Term.Token)
		return err
	})
}

// A replica that waits for leadership instead of polling for it: with Wait,
// a follower's Acquire waits in pg_advisory_lock and returns Leader the
// moment the holder's session lets go. The next call starts a poll after
// the last one started, or at once when the last one waited longer, so a
// follower is always waiting and a leader still probes once a poll.
//
// Compiled, not run: it needs a server (LEASE_DSN, session-pinned).
func ExampleAdvisory_Acquire() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	l, err := lease.NewAdvisory(ctx, lease.AdvisoryConfig{
		DSN:         os.Getenv("LEASE_DSN"),
		Wait:        true,
		WaitTimeout: time.Second,
	})
	if err != nil {
		return // ErrTransactionPooled: a waiting follower needs a pinned endpoint
	}
	// Close after the loop's context has ended, so no Acquire is waiting.
	defer l.Close(context.Background())

	const poll = 100 * time.Millisecond
	for {
		started := time.Now()
		res, err := l.Acquire(ctx)
		if err != nil {
			return // ctx ended
		}
		if res.Status == lease.Leader {
			_ = res.Term // leader work, fenced with l.Fence
		}
		select {
		case <-time.After(time.Until(started.Add(poll))):
		case <-ctx.Done():
			return
		}
	}
}
