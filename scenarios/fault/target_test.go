package fault_test

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

type pgxConn = pgx.Conn

func TestMain(m *testing.M) { stacktest.Main(m) }

// lock is the built-in advisory strategies' lock, which the tests take by
// hand as the leader's lease would.
var lock = lease.DefaultAdvisoryLock

// shortTTL is an advisory strategy's setting whose holding faults hold
// 1.5s; its long Work keeps the piece of work newTarget shows fresh, so
// faults strike at once.
var shortTTL = fault.Setting{ReportsBackendPID: true, AdvisoryLock: &lock, Pooled: true, TTL: time.Second, Work: time.Hour}

// fakeTarget is a fault.Target whose parts a test chooses: real servers,
// real processes and real proxies, but no runner, so the test can look at
// the stack while the fault holds.
type fakeTarget struct {
	setting     fault.Setting
	db          stacktest.DB
	lease, work stack.Endpoint
	leader      fault.Replica
	proxies     map[string][]*toxiproxy.Proxy

	mu     sync.Mutex
	events []string
}

var _ fault.Target = (*fakeTarget)(nil)

func (f *fakeTarget) Setting() fault.Setting        { return f.setting }
func (f *fakeTarget) Stack() *stack.Stack           { return f.db.Stack }
func (f *fakeTarget) Database() string              { return f.db.Name }
func (f *fakeTarget) Direct() stack.Endpoint        { return f.db.Postgres }
func (f *fakeTarget) LeaseEndpoint() stack.Endpoint { return f.lease }
func (f *fakeTarget) WorkEndpoint() stack.Endpoint  { return f.work }
func (f *fakeTarget) Replicas() []fault.Replica     { return []fault.Replica{f.leader} }
func (f *fakeTarget) Proxies(replica string) []*toxiproxy.Proxy {
	return f.proxies[replica]
}

func (f *fakeTarget) Leader(context.Context) (fault.Replica, error) { return f.leader, nil }

func (f *fakeTarget) Event(_ context.Context, kind, replica, detail string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, strings.TrimSpace(kind+" "+replica+" "+detail))
	return nil
}

func (f *fakeTarget) Killed(ctx context.Context, replica string) error {
	return f.Event(ctx, oracle.EventReplicaKilled, replica, "")
}

func (f *fakeTarget) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// waitEvent waits until an event containing s has been logged.
func (f *fakeTarget) waitEvent(t *testing.T, s string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, e := range f.Events() {
			if strings.Contains(e, s) {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "event %q; have %q", s, f.Events())
}

// newTarget is a target on db whose lease and work go through
// db.Transaction, led by replica r1, which the oracle shows in the middle
// of a piece of work, the moment faults wait for.
func newTarget(t *testing.T, db stacktest.DB, s fault.Setting) *fakeTarget {
	t.Helper()
	conn := mustConnect(t, db.Postgres.DSN)
	require.NoError(t, oracle.Migrate(context.Background(), conn))
	rec, err := oracle.NewRecorder(context.Background(), db.Postgres.DSN, "r1")
	require.NoError(t, err)
	defer rec.Close()
	_, err = rec.Begin(context.Background(), 1, 0)
	require.NoError(t, err)
	return &fakeTarget{setting: s, db: db, lease: db.Transaction, work: db.Transaction,
		leader: fault.Replica{ID: "r1"}, proxies: map[string][]*toxiproxy.Proxy{}}
}

// startProcess starts a stand-in replica process and reaps it when it
// exits, as the runner does; the returned channel yields its exit.
func startProcess(t *testing.T) (*exec.Cmd, <-chan *exec.ExitError) {
	t.Helper()
	cmd := exec.Command("sleep", "120")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan *exec.ExitError, 1)
	go func() {
		err := cmd.Wait()
		ee, _ := err.(*exec.ExitError)
		exited <- ee
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	return cmd, exited
}

// proxyTo starts a toxiproxy proxy in front of ep's server and returns it
// with ep's DSN pointed at it.
func proxyTo(t *testing.T, ep stack.Endpoint) (*toxiproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(ep.DSN)
	require.NoError(t, err)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "test-"+ep.Name, "127.0.0.1:0", u.Host)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	u.Host = p.Listen
	return p, u.String()
}

// connect opens a connection to dsn in exec mode (safe through any pool).
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	return pgx.ConnectConfig(ctx, cfg)
}

func mustConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// backendPID asks conn for its backend within timeout.
func backendPID(conn *pgx.Conn, timeout time.Duration) (int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var pid int32
	err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

// tryLock takes lock through conn, as the advisory lease does, and
// reports whether it got it.
func tryLock(t *testing.T, conn *pgx.Conn) bool {
	t.Helper()
	var got bool
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT pg_try_advisory_lock($1, $2)", lock.Key1, lock.Key2).Scan(&got))
	return got
}

// backendAlive reports whether pid is a backend in pg_stat_activity.
func backendAlive(t *testing.T, s *stack.Stack, pid int32) bool {
	t.Helper()
	return backendAliveOn(t, mustConnect(t, s.Postgres().DSN), pid)
}

// backendAliveOn is backendAlive asked on conn, a direct connection the
// caller keeps open: no login, for checks inside a fault's window.
func backendAliveOn(t *testing.T, conn *pgx.Conn, pid int32) bool {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
	return n > 0
}

// inject runs f.Inject in the background and returns its result channel.
func inject(t *testing.T, f fault.Fault, tg fault.Target) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.Inject(context.Background(), tg) }()
	return done
}

func waitInjected(t *testing.T, done <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(within):
		t.Fatalf("Inject did not return within %s", within)
	}
}

func fmtEvents(es []string) string { return fmt.Sprintf("%q", es) }
