package stack

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
)

// shared is one stack for the tests that only read from it; tests that
// restart or tear down servers start their own.
var shared struct {
	once sync.Once
	s    *Stack
	err  error
}

// restartable is one more stack, for the tests that stop and start its
// servers again and leave them running: they take it one at a time, so
// that they need not start a stack each.
var restartable struct {
	once sync.Once
	mu   sync.Mutex
	s    *Stack
	err  error
}

func TestMain(m *testing.M) {
	if os.Getenv(envSweepChild) != "" {
		runSweepChild()
	}
	runTestChild()
	code := m.Run()
	for _, s := range []*Stack{shared.s, restartable.s} {
		if s != nil {
			_ = s.Close(context.Background())
		}
	}
	os.Exit(code)
}

// restartableStack returns the restartable stack, the test's alone until
// it ends. The test must leave every server it stops running again.
func restartableStack(t *testing.T) *Stack {
	t.Helper()
	restartable.mu.Lock()
	t.Cleanup(restartable.mu.Unlock)
	restartable.once.Do(func() {
		restartable.s, restartable.err = Start(context.Background(), Options{})
	})
	require.NoError(t, restartable.err)
	return restartable.s
}

func sharedStack(t *testing.T) *Stack {
	t.Helper()
	shared.once.Do(func() {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		shared.s, shared.err = Start(context.Background(), Options{Logger: log})
	})
	require.NoError(t, shared.err)
	return shared.s
}

func connect(t *testing.T, ep Endpoint) *pgx.Conn {
	t.Helper()
	cfg, err := ep.ConnConfig()
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err, "connect to %s", ep.Name)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func backendPID(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

func TestStartAnswersOnEveryEndpoint(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	eps := s.Endpoints()
	require.Len(t, eps, 3)
	for _, ep := range eps {
		t.Run(ep.Name, func(t *testing.T) {
			conn := connect(t, ep)
			var db string
			require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db))
			require.Equal(t, Database, db)
		})
	}
	require.Equal(t, "transaction", string(s.Transaction().PoolMode))
	require.Equal(t, 1, s.Transaction().PoolSize)
	require.Equal(t, "session", string(s.Session().PoolMode))
	require.NotEmpty(t, s.Session().Version)
	require.NotEmpty(t, s.Transaction().AdminDSN)
}

// The stack's Postgres asks every TCP client for the stack's password: the
// docker provider's local image starts from a cluster made at build time
// with no password (images/entrypoint.sh), so a copy whose superuser got
// none, or whose pg_hba.conf trusted the network, would let this in.
func TestPostgresRefusesAWrongPassword(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	cfg, err := pgx.ParseConfig(s.Postgres().DSN)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Password)
	ctx := context.Background()
	for _, password := range []string{"", cfg.Password + "x"} {
		bad := cfg.Copy()
		bad.Password = password
		conn, err := pgx.ConnectConfig(ctx, bad)
		if err == nil {
			_ = conn.Close(ctx)
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "a login with password %q", password)
		require.Equal(t, "28P01", pgErr.Code, "invalid_password: %v", pgErr)
	}
	connect(t, s.Postgres())
}

// The pool mode is proven by what two clients observe, not by the config.
func TestPoolModeShowsInBehaviour(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	for _, tc := range []struct {
		endpoint        string
		samePID         bool
		secondLockTaken bool
	}{
		{endpoint: TransactionName, samePID: true, secondLockTaken: true},
		{endpoint: SessionName, samePID: false, secondLockTaken: false},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			ep, ok := s.Endpoint(tc.endpoint)
			require.True(t, ok)
			a, b := connect(t, ep), connect(t, ep)
			require.Equal(t, tc.samePID, backendPID(t, a) == backendPID(t, b), "same backend PID")

			key := int32(time.Now().UnixNano() % 1_000_000)
			var got bool
			ctx := context.Background()
			require.NoError(t, a.QueryRow(ctx, "SELECT pg_try_advisory_lock(1, $1)", key).Scan(&got))
			require.True(t, got, "first client takes the lock")
			require.NoError(t, b.QueryRow(ctx, "SELECT pg_try_advisory_lock(1, $1)", key).Scan(&got))
			require.Equal(t, tc.secondLockTaken, got, "second client's pg_try_advisory_lock")
			if tc.endpoint == TransactionName {
				// The lock leaked onto the pooled backend; free it for others.
				_, err := a.Exec(ctx, "SELECT pg_advisory_unlock_all()")
				require.NoError(t, err)
			}
		})
	}
}

func TestExternalProviderReadsExportedDSNs(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	env := exported(t, s)
	require.Equal(t, "external", env[EnvProvider])

	ext, err := Start(context.Background(), Options{lookupEnv: lookup(env)})
	require.NoError(t, err)
	require.Equal(t, ProviderExternal, ext.Provider())
	require.Equal(t, s.Endpoints(), ext.Endpoints(), "pool modes, sizes and versions read back from the admin consoles")
	for _, ep := range ext.Endpoints() {
		connect(t, ep)
	}
	require.ErrorIs(t, ext.RestartPostgres(context.Background()), ErrNotSupported)
	require.ErrorIs(t, ext.RestartPgBouncer(context.Background(), TransactionName), ErrNotSupported)

	// A bouncer added to an external stack runs in front of the external
	// Postgres, from the same PgBouncer as the stack's own: beside them on
	// a docker stack's network, else as a local process. It goes away with
	// the external stack.
	added, err := ext.AddPgBouncer(context.Background(), "added", pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: 2})
	require.NoError(t, err)
	require.Equal(t, pgbouncer.PoolTransaction, added.PoolMode)
	require.Equal(t, 2, added.PoolSize)
	require.Equal(t, s.Session().Version, added.Version, "the stack's own PgBouncer, not another")
	conn := connect(t, added)
	var db string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db))
	require.Equal(t, Database, db)
	require.NoError(t, conn.Close(context.Background()))
	require.Contains(t, ext.Endpoints(), added)

	require.NoError(t, ext.Close(context.Background()))
	require.Error(t, ping(context.Background(), added.DSN), "Close stops the bouncers the external stack added")
	connect(t, s.Postgres()) // and leaves the servers it was given alone
	connect(t, s.Transaction())
}

// exported parses s's export lines into variables.
func exported(t *testing.T, s *Stack) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range s.ExportLines() {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		require.True(t, ok, line)
		env[k] = strings.Trim(v, "'")
	}
	return env
}

// localBouncers is env without the docker stack's network, so that an
// external stack built from it adds its bouncers as local processes.
func localBouncers(env map[string]string) map[string]string {
	delete(env, EnvDockerNetwork)
	delete(env, EnvDockerPgBouncerImage)
	delete(env, EnvNativeRoot)
	return env
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// A stack whose servers run on an image's filesystem names it in Env, and
// the bouncers an external stack adds from that Env run from it: the
// stack's own PgBouncer, not the host's (which may be missing, or another
// version).
func TestExternalBouncersRunFromTheStacksRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	defer s.Close(ctx)
	nb, ok := s.backend.(*nativeBackend)
	if !ok || nb.root == "" {
		t.Skipf("the auto route ran %T, not processes on an image's filesystem (it needs root, a local engine and doublerun's images)", s.backend)
	}
	env := exported(t, s)
	require.Equal(t, nb.root, env[EnvNativeRoot])
	ext, err := Start(ctx, Options{lookupEnv: lookup(env)})
	require.NoError(t, err)
	defer ext.Close(ctx)
	ep, err := ext.AddPgBouncer(ctx, "added", pgbouncer.Config{})
	require.NoError(t, err)
	require.Equal(t, s.Transaction().Version, ep.Version, "the added bouncer is the stack's PgBouncer")
	eb := ext.backend.(*externalBackend).bouncer.(*nativeBackend)
	require.Equal(t, nb.root, eb.root)
}

// On an image's filesystem a stack's Postgres is a copy of the cluster the
// image was built with (unpackTemplate), not a new initdb: two stacks'
// servers share its system identifier, and the copy's superuser has the
// stack's password (TestPostgresRefusesAWrongPassword: and no other).
func TestImageRootCopiesTheImagesCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var ids []string
	for range 2 {
		s, err := Start(ctx, Options{})
		require.NoError(t, err)
		defer s.Close(ctx)
		if nb, ok := s.backend.(*nativeBackend); !ok || nb.root == "" {
			t.Skipf("the auto route ran %T, not processes on an image's filesystem (it needs root, a local engine and doublerun's images)", s.backend)
		}
		ids = append(ids, haValue[string](t, s.Postgres().DSN, "SELECT system_identifier::text FROM pg_control_system()"))
	}
	require.Equal(t, ids[0], ids[1], "both are copies of the image's cluster")
}

func TestExternalProviderAddsBouncersOnlyWithAPgBouncerBinary(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	env := localBouncers(exported(t, s))
	env[EnvPgBouncerBin] = filepath.Join(t.TempDir(), "no-pgbouncer")
	ext, err := Start(context.Background(), Options{lookupEnv: lookup(env)})
	require.NoError(t, err, "an external stack that adds no bouncer needs no pgbouncer binary")
	defer ext.Close(context.Background())
	_, err = ext.AddPgBouncer(context.Background(), "added", pgbouncer.Config{})
	require.ErrorContains(t, err, "the external provider runs an added PgBouncer as a local process: pgbouncer binary not found")
	require.Len(t, ext.Endpoints(), 3, "the failed bouncer left no endpoint behind")
}

func TestExternalProviderRejectsBadDSNs(t *testing.T) {
	t.Parallel()
	good := "postgres://u:p@127.0.0.1:1/db"
	env := map[string]string{
		EnvProvider: "external", EnvPostgresDSN: good, EnvSessionDSN: "postgres://u:p@host:notaport/db",
		EnvSessionAdminDSN: good, EnvTransactionDSN: good, EnvTransactionAdminDSN: good,
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	_, err := Start(context.Background(), Options{lookupEnv: lookup})
	require.ErrorContains(t, err, EnvSessionDSN+" is not a valid DSN")
	require.NotContains(t, err.Error(), "\n", "one line")

	delete(env, EnvTransactionDSN)
	env[EnvSessionDSN] = good
	_, err = Start(context.Background(), Options{lookupEnv: lookup})
	require.ErrorContains(t, err, EnvTransactionDSN+" is not set; run `doublerun stack up`")
}

func TestUnknownProviderIsRejected(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{Provider: "kubernetes"})
	require.EqualError(t, err, `unknown provider "kubernetes"; use auto, docker, native or external`)
}

func TestNativeNamesMissingBinaries(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{Provider: ProviderNative, PostgresBinDir: "/nonexistent"})
	require.EqualError(t, err, "initdb not found in DOUBLERUN_POSTGRES_BINDIR=/nonexistent; install package postgresql-15, set it to the directory holding initdb and postgres (such as /usr/lib/postgresql/15/bin) or unset it")

	_, err = Start(context.Background(), Options{Provider: ProviderNative, PgBouncerBin: "/nonexistent/pgbouncer"})
	require.EqualError(t, err, "pgbouncer binary not found at DOUBLERUN_PGBOUNCER_BIN=/nonexistent/pgbouncer; install package pgbouncer, set it to the pgbouncer binary (such as /usr/sbin/pgbouncer) or unset it")
}

func TestRestartsKeepEndpointsAnswering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := restartableStack(t)
	before := s.Endpoints()

	require.NoError(t, s.RestartPgBouncer(ctx, TransactionName))
	require.NoError(t, s.StopPgBouncer(ctx, SessionName))
	require.Error(t, ping(ctx, s.Session().DSN), "a stopped bouncer refuses connections")
	require.NoError(t, s.StartPgBouncer(ctx, SessionName))
	require.NoError(t, s.StopPostgres(ctx))
	require.Error(t, ping(ctx, s.Postgres().DSN), "a stopped postgres refuses connections")
	require.NoError(t, s.StartPostgres(ctx))

	require.Equal(t, before, s.Endpoints(), "addresses survive restarts")
	for _, ep := range s.Endpoints() {
		require.Eventually(t, func() bool { return ping(ctx, ep.DSN) == nil }, 20*time.Second, 100*time.Millisecond,
			"%s answers after the restarts", ep.Name)
	}
}

// The stack keeps its connections for creating and dropping databases
// open, so one can outlive its server's session: killed under it, the
// next database is made on a new one.
func TestCreateDatabaseOutlivesItsConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := sharedStack(t)
	// Both kept connections open: a restart ends them all.
	p, err := s.adminPool(s.Postgres())
	require.NoError(t, err)
	a, err := p.Acquire(ctx)
	require.NoError(t, err)
	b, err := p.Acquire(ctx)
	require.NoError(t, err)
	a.Release()
	b.Release()
	conn := connect(t, s.Postgres())
	var killed int
	// OFFSET 0 keeps the filter below the call: Postgres may evaluate
	// an AND's terms in any order.
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (
		SELECT pid FROM pg_stat_activity WHERE application_name = 'doublerun-stack' OFFSET 0) s`).Scan(&killed))
	require.GreaterOrEqual(t, killed, adminConns, "the stack kept its connections open")
	db, err := s.CreateDatabase(ctx, "t_")
	require.NoError(t, err, "a database is made after the stack's connections were killed")
	require.NoError(t, s.DropDatabase(ctx, db))
}

// A stopped bouncer is gone when StopPgBouncer returns, whatever its
// version and clients: from PgBouncer 1.23 SIGTERM waits for every client
// to leave, so the stack stops it with SIGQUIT (pgbouncerStopSignal).
func TestStoppingABouncerDoesNotWaitForItsClients(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := restartableStack(t)
	for _, name := range []string{SessionName, TransactionName} {
		ep, _ := s.Endpoint(name)
		connect(t, ep)
		begin := time.Now()
		require.NoError(t, s.StopPgBouncer(ctx, name))
		took := time.Since(begin)
		t.Logf("PgBouncer %s (%s) stopped with a client connected in %s", ep.Version, name, took)
		require.Less(t, took, 5*time.Second, "%s waited for its client", name)
		require.Error(t, ping(ctx, ep.DSN))
		require.NoError(t, s.StartPgBouncer(ctx, name))
	}
}

// captureBackend records the backend of the next Start in this process.
// Tests that use it do not run in parallel with each other.
func captureBackend(t *testing.T) *backend {
	var b backend
	testHookBackend = func(got backend) { b = got }
	t.Cleanup(func() { testHookBackend = nil })
	return &b
}

func TestCloseLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	got := captureBackend(t)
	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	nodes := s.nodes()
	_, err = s.CreateDatabase(ctx, "before_close_")
	require.NoError(t, err, "a kept admin connection to close")
	require.NoError(t, s.Close(ctx))
	requireNothingLeft(t, *got, nodes)
	require.NoError(t, s.Close(ctx), "Close is idempotent")
	_, err = s.CreateDatabase(ctx, "after_close_")
	require.ErrorContains(t, err, "the stack is closed", "no admin pool is made to outlive the stack")
	s.mu.Lock()
	require.Empty(t, s.admins)
	s.mu.Unlock()
}

func TestFailedStartLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	opts, err := Options{}.resolve()
	require.NoError(t, err)
	opts.PgBouncerBin = "/bin/false"                        // native: exits at once
	opts.PgBouncerImage = "doublerun/no-such-image:missing" // docker: cannot be found or pulled
	got := captureBackend(t)
	var nodes []node
	testHookNodes = func(n []node) { nodes = n }
	t.Cleanup(func() { testHookNodes = nil })

	_, err = Start(ctx, opts)
	require.Error(t, err)
	require.NotNil(t, *got)
	require.NotEmpty(t, nodes, "postgres had started before the bouncer failed")
	requireNothingLeft(t, *got, nodes)
}

func requireNothingLeft(t *testing.T, b backend, nodes []node) {
	t.Helper()
	switch b := b.(type) {
	case *nativeBackend:
		_, err := os.Stat(b.dir)
		require.True(t, errors.Is(err, os.ErrNotExist), "temp dir %s removed", b.dir)
		if b.rootStack != "" {
			requireNoDockerStack(t, b.rootStack) // the image root's container
		}
		for _, n := range nodes {
			p := n.(*process)
			err := syscall.Kill(p.cmd.Process.Pid, 0)
			require.ErrorIs(t, err, syscall.ESRCH, "%s (pid %d) has exited", p.name, p.cmd.Process.Pid)
		}
	default:
		requireNoContainersLeft(t, b)
	}
}

// A test binary that panics never reaches Close, nor a run its own
// cleanup; the next stack removes the temp dirs they left (a native
// stack's, a run's), and only dirs whose owner has died.
func TestNativeSweepsDirsOfDeadOwners(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	mk := func(prefix, owner string) string {
		dir, err := os.MkdirTemp(tmp, prefix)
		require.NoError(t, err)
		if owner != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644))
		}
		return dir
	}
	var deadDirs, keptDirs []string
	for _, prefix := range []string{nativeDirPrefix, RunDirPrefix} {
		deadDirs = append(deadDirs, mk(prefix, strconv.Itoa(dead.Process.Pid)))
		keptDirs = append(keptDirs, mk(prefix, strconv.Itoa(os.Getpid())), mk(prefix, ""))
	}
	keptDirs = append(keptDirs, mk("doublerun-other-", strconv.Itoa(dead.Process.Pid)))

	sweepStaleDirs(tmp, self(), slog.New(slog.DiscardHandler))

	for _, dir := range deadDirs {
		_, err := os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist, "dir of a dead owner removed: %s", dir)
	}
	for _, dir := range keptDirs {
		_, err := os.Stat(dir)
		require.NoError(t, err, "%s kept", dir)
	}
}

// A run's temp dir names its owner, so the sweep can tell when it is
// left over.
func TestTempDirNamesItsOwner(t *testing.T) {
	t.Parallel()
	dir, err := TempDir()
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.True(t, strings.HasPrefix(filepath.Base(dir), RunDirPrefix), dir)
	raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
	require.NoError(t, err)
	require.Equal(t, self(), parseOwner(string(raw)))
}

// A native stack lives where DOUBLERUN_STACK_DIR says, and without it on
// /dev/shm or in the system's temp dir.
func TestNativeRoot(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvStackDir, dir)
	require.Equal(t, dir, nativeRoot())
	t.Setenv(EnvStackDir, "")
	require.Contains(t, []string{shmDir, os.TempDir()}, nativeRoot())
}
