package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/pgbouncer"
)

// Credentials every stack uses. The password is random per stack.
const (
	User      = "doublerun"
	AdminUser = "doublerun_admin"
	Database  = "doublerun"
)

// testHookBackend lets tests see the backend of a stack whose Start fails.
var testHookBackend func(backend)

// testHookNodes lets tests see the servers a failed Start had started.
var testHookNodes func([]node)

// ErrNotSupported is returned for operations the provider cannot perform,
// such as restarting a server the external provider does not own.
var ErrNotSupported = errors.New("not supported by this provider")

// Stack is a running Postgres with its PgBouncers. Its methods are safe for
// concurrent use.
type Stack struct {
	provider Provider
	backend  backend
	log      interface{ Info(string, ...any) }
	// user, password and database are what clients of the stack log in
	// with: User and Database with a random password for a stack this
	// process started, whatever the Postgres DSN says for an external one.
	user, password, database string

	mu        sync.Mutex
	postgres  Endpoint
	pgNode    node
	bouncers  map[string]*bouncer
	closeErr  error
	closeOnce sync.Once
	// asked is the version set the caller or the environment named, ""
	// when none was (see VersionsNote).
	asked string
	// ha is the failover side of a stack with a standby, nil without.
	ha *ha
	// ext is the failover side of an external stack (external_failover.go).
	ext *externalFailover
	// admins are the connections that create and drop databases, per
	// server DSN (database.go); adminsClosed, that Close closed them.
	admins       map[string]*pgxpool.Pool
	adminsClosed bool
}

// backend is what a provider implements.
type backend interface {
	// startPostgres starts Postgres with the given credentials and returns
	// its node and the host and port clients use.
	startPostgres(ctx context.Context, user, password, db string) (node, string, int, error)
	// startPgBouncer starts a bouncer for cfg. The backend fills in the
	// listen address and port, the auth file and the database entries.
	startPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (node, string, int, error)
	// close removes what the backend created beyond its nodes.
	close(ctx context.Context) error
}

// node is one running server.
type node interface {
	stop(ctx context.Context) error
	start(ctx context.Context) error
	// terminate stops the server for good and removes its resources.
	terminate(ctx context.Context) error
	// logs returns the server's recent output, for error messages.
	logs(ctx context.Context) string
}

// Start brings up Postgres and the session and transaction bouncers. On
// error everything it started is removed again. Whatever the provider, it
// first removes the temp dirs (and a native stack's shared memory) that
// doublerun processes killed outright left on this machine, logging each
// (see "Leftovers" in the package documentation).
func Start(ctx context.Context, opts Options) (*Stack, error) {
	opts, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	sweepOwnedDirs(opts.Logger)
	if opts.Provider == ProviderExternal && opts.Replication != "" {
		return nil, fmt.Errorf("replication: the external provider runs no servers of its own to fail over; use %s=native or docker", EnvProvider)
	}
	if opts.Provider == ProviderExternal {
		return startExternal(ctx, opts)
	}
	b, provider, err := selectBackend(ctx, opts)
	if err != nil {
		return nil, err
	}
	if testHookBackend != nil {
		testHookBackend(b)
	}
	s := &Stack{
		provider: provider,
		backend:  b,
		log:      opts.Logger,
		user:     User,
		password: randomPassword(),
		database: Database,
		bouncers: map[string]*bouncer{},
	}
	if opts.versionsAsked {
		s.asked = opts.Versions
	}
	begin := time.Now()
	if err := s.start(ctx, opts); err != nil {
		if testHookNodes != nil {
			testHookNodes(s.nodes())
		}
		return nil, errors.Join(err, s.Shutdown(ctx))
	}
	v := s.Versions()
	opts.Logger.Info("stack ready", "provider", provider, "versions", v.Set, "postgres", v.Postgres, "pgbouncer", v.PgBouncer,
		"elapsed", time.Since(begin).Round(time.Millisecond))
	return s, nil
}

func (s *Stack) start(ctx context.Context, opts Options) error {
	n, host, port, err := s.backend.startPostgres(ctx, User, s.password, Database)
	if n != nil {
		s.pgNode = n
	}
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	s.postgres = Endpoint{Name: PostgresName, DSN: dsn(User, s.password, host, port, Database)}
	if s.postgres.PostgresVersion, err = waitReady(ctx, s.postgres.DSN, s.pgNode); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if opts.Replication != "" {
		if err := s.startReplication(ctx, opts.Replication); err != nil {
			return err
		}
	}
	if _, err := s.AddPgBouncer(ctx, SessionName, pgbouncer.Config{
		PoolMode: pgbouncer.PoolSession, DefaultPoolSize: opts.SessionPoolSize,
	}); err != nil {
		return err
	}
	_, err = s.AddPgBouncer(ctx, TransactionName, pgbouncer.Config{
		PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: opts.TransactionPoolSize,
	})
	return err
}

// Provider reports which provider runs the stack.
func (s *Stack) Provider() Provider { return s.provider }

// Postgres is the direct endpoint.
func (s *Stack) Postgres() Endpoint { return s.postgres }

// Session is the PgBouncer in session pooling.
func (s *Stack) Session() Endpoint { ep, _ := s.Endpoint(SessionName); return ep }

// Transaction is the PgBouncer in transaction pooling.
func (s *Stack) Transaction() Endpoint { ep, _ := s.Endpoint(TransactionName); return ep }

// Endpoint returns the endpoint called name: "postgres" or a bouncer's name.
func (s *Stack) Endpoint(name string) (Endpoint, bool) {
	if name == PostgresName {
		return s.postgres, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bouncers[name]
	if !ok || b == nil || b.ep.Name == "" {
		return Endpoint{}, false
	}
	return b.ep, true
}

// Versions names the exact server versions the stack runs: Postgres'
// server_version and the version of its transaction-pooling PgBouncer, as
// read from the running servers.
func (s *Stack) Versions() Versions {
	pg, pgb := s.postgres.PostgresVersion, s.Transaction().Version
	return Versions{Set: setName(pg, pgb), Postgres: pg, PgBouncer: pgb}
}

// Endpoints lists Postgres first, then every bouncer by name.
func (s *Stack) Endpoints() []Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Endpoint{s.postgres}
	for _, name := range slices.Sorted(maps.Keys(s.bouncers)) {
		if b := s.bouncers[name]; b != nil && b.ep.Name != "" {
			out = append(out, b.ep)
		}
	}
	return out
}

// postgresNode runs the stack's Postgres: on an HA stack the primary,
// which a promotion changes.
func (s *Stack) postgresNode() node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pgNode
}

// StopPostgres stops Postgres; every bouncer stays up and fails its server
// logins until StartPostgres.
func (s *Stack) StopPostgres(ctx context.Context) error {
	n := s.postgresNode()
	if n == nil {
		return fmt.Errorf("stop postgres: %w", ErrNotSupported)
	}
	return n.stop(ctx)
}

// StartPostgres starts a stopped Postgres on the same address and waits
// until it answers.
func (s *Stack) StartPostgres(ctx context.Context) error {
	n := s.postgresNode()
	if n == nil {
		return fmt.Errorf("start postgres: %w", ErrNotSupported)
	}
	if err := n.start(ctx); err != nil {
		return err
	}
	_, err := waitReady(ctx, s.postgres.DSN, n)
	return err
}

// RestartPostgres stops and starts Postgres.
func (s *Stack) RestartPostgres(ctx context.Context) error {
	if err := s.StopPostgres(ctx); err != nil {
		return err
	}
	return s.StartPostgres(ctx)
}

// Close stops every server and removes what the provider created: containers
// and networks, or processes and temp dirs. It is idempotent.
func (s *Stack) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closeAdmins()
		s.closeRouter()
		var errs []error
		for _, n := range s.nodes() {
			errs = append(errs, n.terminate(ctx))
		}
		if s.backend != nil {
			errs = append(errs, s.backend.close(ctx))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// shutdownTimeout bounds Shutdown: a stack's servers stop and its
// containers go within seconds, and a cleanup that hangs must not hold
// the command that asked for it for ever.
const shutdownTimeout = time.Minute

// Shutdown is Close on a context of its own that the end of ctx does not
// cancel, bounded by a minute: what the code that started s does on every
// way out, a Ctrl-C included, since the interrupt asks for the cleanup
// and must not cut it short.
func (s *Stack) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	return s.Close(ctx)
}

// nodes lists the running servers, bouncers first so they stop before the
// Postgres they forward to.
func (s *Stack) nodes() []node {
	s.mu.Lock()
	defer s.mu.Unlock()
	var nodes []node
	for _, b := range s.bouncers {
		if b != nil && b.node != nil {
			nodes = append(nodes, b.node)
		}
	}
	if s.pgNode != nil {
		nodes = append(nodes, s.pgNode)
	}
	return append(nodes, s.haNodes()...)
}

// waitReady polls dsn until a query succeeds and returns the server's
// version, which that query read: a second connection just for it once
// timed out on a loaded machine, a moment after the server was ready. It
// gives up early when n reports that its server has exited, and then
// includes the server's log.
func waitReady(ctx context.Context, dsn string, n node) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		if e, ok := n.(interface{ exited() error }); ok && n != nil {
			if err := e.exited(); err != nil {
				return "", fmt.Errorf("server exited during start: %w\n%s", err, n.logs(context.WithoutCancel(ctx)))
			}
		}
		version, err := probe(ctx, dsn)
		if err == nil {
			return version, nil
		}
		last = err
		select {
		case <-ctx.Done():
			var logs string
			if n != nil {
				logs = "\n" + n.logs(context.WithoutCancel(ctx))
			}
			return "", fmt.Errorf("not ready: %w (last error: %v)%s", ctx.Err(), last, logs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, dsn string) error {
	_, err := probe(ctx, dsn)
	return err
}

// probe runs a query through dsn and returns the server_version the
// connection reports (through PgBouncer: the Postgres behind it).
func probe(ctx context.Context, dsn string) (string, error) {
	conn, err := connectOnce(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return "", err
	}
	return conn.PgConn().ParameterStatus("server_version"), nil
}

func randomPassword() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
