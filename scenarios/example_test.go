package scenarios_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// TestMain shows how a user's test binary takes part in scenarios: register
// the lease, then let reexec.Main turn this binary into a replica when
// the runner starts it as one.
func TestMain(m *testing.M) {
	strategy.Register("example-row-lease", strategy.Strategy{
		New: func(ctx context.Context, c strategy.LeaseConfig) (lease.Lease, error) {
			return newRowLease(ctx, c.DSN, c.Name, c.Replica, c.TTL)
		},
		Setup: func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_leader (
				name text PRIMARY KEY, holder text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL)`)
			return err
		},
	})
	// A strategy that declares no lock: its lease names its own through
	// lease.LockHolder, as a lease a user brings can.
	strategy.Register(byoLockStrategy, strategy.Strategy{
		New: func(ctx context.Context, c strategy.LeaseConfig) (lease.Lease, error) {
			return lease.NewAdvisory(ctx, lease.AdvisoryConfig{DSN: c.DSN, Name: c.Name, Holder: c.Replica, Logger: c.Logger,
				Key1: byoLock.Key1, Key2: byoLock.Key2, AllowTransactionPooling: true})
		},
	})
	reexec.Main()
	if pidFile := os.Getenv(envTestRunner); pidFile != "" {
		runLikeARunner(pidFile)
	}
	if id := os.Getenv(envTestDiesOnceWorkBegins); id != "" && id == os.Getenv(replica.EnvReplicaID) {
		os.Exit(dieOnceWorkBegins(os.Getenv(replica.EnvOracleDSN)))
	}
	// The built-in lease through the command path, as `doublerun replica`
	// runs it: this test binary started as a scenario's replica command.
	if name := os.Getenv(envTestCommandStrategy); name != "" {
		if err := replica.RunAsCommand(context.Background(), name, os.Getenv); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	stacktest.Main(m)
	os.Exit(0)
}

// rowLease is the kind of lease a user might bring: one row per lease name,
// taken when expired, renewed by its holder, every statement standing alone
// so it works through transaction pooling. It trusts a grant for TTL/2 on
// the local clock.
type rowLease struct {
	conn     *pgx.Conn
	name     string
	holder   string
	ttl      time.Duration
	token    int64
	validTil time.Time
}

func newRowLease(ctx context.Context, dsn, name, holder string, ttl time.Duration) (*rowLease, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &rowLease{conn: conn, name: name, holder: holder, ttl: ttl}, nil
}

func (l *rowLease) TryAcquire(ctx context.Context) (lease.Result, error) {
	sent := time.Now()
	var token int64
	err := l.conn.QueryRow(ctx, `INSERT INTO example_leader AS t (name, holder, token, expires_at)
		VALUES ($1, $2, 1, clock_timestamp() + $3::interval)
		ON CONFLICT (name) DO UPDATE SET holder = $2, expires_at = clock_timestamp() + $3::interval,
			token = CASE WHEN t.holder = $2 THEN t.token ELSE t.token + 1 END
		WHERE t.holder = $2 OR t.expires_at < clock_timestamp()
		RETURNING token`, l.name, l.holder, fmt.Sprintf("%d milliseconds", l.ttl.Milliseconds())).Scan(&token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return lease.Result{Status: lease.Follower}, nil
	case ctx.Err() != nil:
		return lease.Result{}, ctx.Err()
	case err != nil:
		return lease.Result{Status: lease.Faulted, Err: err}, nil
	}
	l.token, l.validTil = token, sent.Add(l.ttl/2)
	return lease.Result{Status: lease.Leader, Term: lease.Term{Name: l.name, Holder: l.holder, Token: token}}, nil
}

// Deadline tells the worker when to stop trusting the last grant.
func (l *rowLease) Deadline() time.Time { return l.validTil }

func (l *rowLease) Release(ctx context.Context) error {
	_, err := l.conn.Exec(ctx, `UPDATE example_leader SET expires_at = clock_timestamp() WHERE name = $1 AND holder = $2`, l.name, l.holder)
	return err
}

func (l *rowLease) Close(ctx context.Context) error {
	err := l.Release(ctx)
	return errors.Join(err, l.conn.Close(ctx))
}
