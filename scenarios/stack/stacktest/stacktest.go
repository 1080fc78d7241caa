// Package stacktest gives a test binary one shared stack and each test a
// database of its own on it.
//
// A package that uses it calls Main from TestMain, so the stack is closed
// (containers, processes, temp dirs) however the tests end:
//
//	func TestMain(m *testing.M) { stacktest.Main(m) }
//
// The stack comes from the provider in DOUBLERUN_PROVIDER (auto by default),
// unless DOUBLERUN_SHARED_STACK=1 says that the DSN variables name one
// stack shared by the whole test run (`make test` starts it): then every
// test binary reaches that stack through the external provider instead of
// starting its own, while Own and the tests of the providers themselves
// still start theirs. When no provider can start, every test that asks for
// the stack fails with the provider's instructions; nothing is skipped. The stack's progress
// lines, its route line first, go to stderr, which go test shows for a
// failed package or with -v.
package stacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
)

var (
	once   sync.Once
	shared *stack.Stack
	err    error
)

// Main runs m and closes the shared stack, also on SIGINT or SIGTERM.
func Main(m *testing.M) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		closeShared()
		os.Exit(130)
	}()
	code := m.Run()
	closeShared()
	os.Exit(code)
}

func closeShared() {
	if shared != nil {
		_ = shared.Shutdown(context.Background())
	}
}

// Shared returns the test binary's stack, starting it on first use. Call
// Main from TestMain so it is closed.
func Shared(t testing.TB) *stack.Stack {
	t.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		opts := stack.Options{Logger: log}
		if SharedByRun() {
			opts.Provider = stack.ProviderExternal
		}
		shared, err = stack.Start(ctx, opts)
	})
	require.NoError(t, err, "start the test stack")
	return shared
}

// SharedByRun reports whether the test run shares one stack across its
// test binaries (DOUBLERUN_SHARED_STACK=1 beside the stack's DSNs). A test
// whose child processes should reach that stack rather than start their
// own passes it on with ShareEnv.
func SharedByRun() bool { return os.Getenv(stack.EnvSharedStack) == "1" }

// ShareEnv returns the environment entries with which a child process
// started by a test reaches the run's shared stack through the external
// provider, or nil when the run shares none (the child then starts its own
// stack, as the test binary would).
func ShareEnv() []string {
	if !SharedByRun() {
		return nil
	}
	return []string{stack.EnvProvider + "=" + string(stack.ProviderExternal)}
}

// Own starts a stack of the test's own and closes it when the test ends:
// for tests that stop or restart servers, which would cut every other test
// off the shared stack.
func Own(t testing.TB) *stack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{})
	require.NoError(t, err, "start a stack of this test's own")
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// OwnHA starts a stack with a standby of the test's own (see
// stack.Options.Replication), in mode, and closes it when the test ends:
// a failover leaves the pair with one server, so no test can share it. An
// external stack cannot be failed over, so where the environment names
// the external provider (the mutation gate's shared stack) it starts a
// native one.
func OwnHA(t testing.TB, mode stack.ReplicationMode) *stack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := stack.Options{Replication: mode}
	if stack.Provider(os.Getenv(stack.EnvProvider)) == stack.ProviderExternal {
		opts.Provider = stack.ProviderNative
	}
	s, err := stack.Start(ctx, opts)
	require.NoError(t, err, "start a stack with a standby of this test's own")
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// DB is a database of one test's own, reachable through every endpoint of
// the shared stack. Through PgBouncer it gets pools of its own, so pool
// sizes hold per test.
type DB struct {
	Name        string
	Stack       *stack.Stack
	Postgres    stack.Endpoint
	Session     stack.Endpoint
	Transaction stack.Endpoint
}

// NewDB creates a fresh database on the shared stack and drops it when the
// test ends.
func NewDB(t testing.TB) DB {
	t.Helper()
	s := Shared(t)
	return NewDBOn(t, s)
}

// NewDBOn creates a fresh database on s and drops it when the test ends.
func NewDBOn(t testing.TB, s *stack.Stack) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := s.CreateDatabase(ctx, "t_")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.DropDatabase(context.Background(), name) })
	return DB{
		Name:        name,
		Stack:       s,
		Postgres:    s.Postgres().WithDatabase(name),
		Session:     s.Session().WithDatabase(name),
		Transaction: s.Transaction().WithDatabase(name),
	}
}

// AddBouncer starts a PgBouncer with cfg (pool mode, pool size, reset
// query, ...) on the shared stack, removes it when the test ends, and
// returns its endpoint pointed at db. On the external provider the bouncer
// runs as a local process, so a pgbouncer binary must be installed.
func (db DB) AddBouncer(t testing.TB, cfg pgbouncer.Config) stack.Endpoint {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "extra-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ep, err := db.Stack.AddPgBouncer(ctx, name, cfg)
	require.NoError(t, err, "this test starts a PgBouncer of its own")
	t.Cleanup(func() { _ = db.Stack.RemovePgBouncer(context.Background(), name) })
	return ep.WithDatabase(db.Name)
}

// Endpoint returns db's endpoint called name ("postgres", "session" or
// "transaction").
func (db DB) Endpoint(name string) stack.Endpoint {
	switch name {
	case stack.PostgresName:
		return db.Postgres
	case stack.SessionName:
		return db.Session
	case stack.TransactionName:
		return db.Transaction
	}
	panic("stacktest: no endpoint " + name)
}

// Connect opens a connection to ep with its safe query mode and closes it
// when the test ends.
func Connect(t testing.TB, ep stack.Endpoint) *pgx.Conn {
	t.Helper()
	cfg, err := ep.ConnConfig()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err, "connect to %s", ep.Name)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// MustExec runs sql on a connection of its own to dsn.
func MustExec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err, "exec %q", sql)
}
