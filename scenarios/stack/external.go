package stack

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/pgbouncer"
)

// startExternal builds a stack from DSNs in the environment. It owns none
// of those servers: restarting them returns ErrNotSupported and Close
// leaves them running. It still checks every endpoint: pool mode, pool
// size and version come from each bouncer's admin console, never from
// what the caller claims.
//
// AddPgBouncer works where a pgbouncer binary is installed: the new bouncer
// runs as a local child process (as with the native provider) in front of
// the external Postgres, and Close stops it. That lets tests that start a
// bouncer of their own share a stack from `doublerun stack up`.
func startExternal(ctx context.Context, opts Options) (*Stack, error) {
	vars := []struct{ name, value string }{
		{EnvPostgresDSN, opts.getenv(EnvPostgresDSN)},
		{EnvSessionDSN, opts.getenv(EnvSessionDSN)},
		{EnvSessionAdminDSN, opts.getenv(EnvSessionAdminDSN)},
		{EnvTransactionDSN, opts.getenv(EnvTransactionDSN)},
		{EnvTransactionAdminDSN, opts.getenv(EnvTransactionAdminDSN)},
	}
	for _, v := range vars {
		if v.value == "" {
			return nil, fmt.Errorf("external provider: %s is not set; run `doublerun stack up` and eval its export lines, or use %s=auto", v.name, EnvProvider)
		}
		if _, err := pgx.ParseConfig(v.value); err != nil {
			return nil, fmt.Errorf("external provider: %s is not a valid DSN (%v); set it to a URL such as postgres://user:password@127.0.0.1:6432/doublerun", v.name, firstLine(err))
		}
	}
	pg, _ := pgx.ParseConfig(vars[0].value)
	s := &Stack{
		provider: ProviderExternal,
		backend:  &externalBackend{opts: opts, host: pg.Host, port: int(pg.Port)},
		log:      opts.Logger,
		user:     pg.User, password: pg.Password, database: pg.Database,
		bouncers: map[string]*bouncer{},
	}
	s.postgres = Endpoint{Name: PostgresName, DSN: vars[0].value}
	if err := ping(ctx, s.postgres.DSN); err != nil {
		return nil, fmt.Errorf("external provider: %s does not answer: %v", EnvPostgresDSN, firstLine(err))
	}
	for _, b := range []struct{ name, dsn, admin string }{
		{SessionName, vars[1].value, vars[2].value},
		{TransactionName, vars[3].value, vars[4].value},
	} {
		ep, err := describeBouncer(ctx, b.name, b.dsn, b.admin)
		if err != nil {
			return nil, fmt.Errorf("external provider: %w", err)
		}
		s.bouncers[b.name] = &bouncer{ep: ep}
	}
	return s, nil
}

func describeBouncer(ctx context.Context, name, dsn, adminDSN string) (Endpoint, error) {
	if err := ping(ctx, dsn); err != nil {
		return Endpoint{}, fmt.Errorf("%s endpoint does not answer: %v", name, firstLine(err))
	}
	a, err := pgbouncer.ConnectAdmin(ctx, adminDSN)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%s admin console: %v", name, firstLine(err))
	}
	defer a.Close(context.WithoutCancel(ctx))
	version, err := a.Version(ctx)
	if err != nil {
		return Endpoint{}, err
	}
	conf, err := a.Config(ctx)
	if err != nil {
		return Endpoint{}, err
	}
	size, _ := strconv.Atoi(conf["default_pool_size"])
	prepared, _ := strconv.Atoi(conf["max_prepared_statements"])
	return Endpoint{
		Name: name, DSN: dsn, AdminDSN: adminDSN,
		PoolMode: pgbouncer.PoolMode(conf["pool_mode"]), PoolSize: size,
		Version: version, MaxPreparedStatements: prepared,
	}, nil
}

// ExportLines returns `export NAME='value'` lines that let other processes
// share this stack through the external provider: Env, for a shell.
func (s *Stack) ExportLines() []string {
	var lines []string
	for _, kv := range s.Env() {
		name, value, _ := strings.Cut(kv, "=")
		lines = append(lines, "export "+name+"='"+value+"'")
	}
	return lines
}

// externalBackend starts the bouncers an external stack adds, as native
// processes forwarding to the external Postgres. It looks for the pgbouncer
// binary on first use, so an external stack that adds none needs none.
type externalBackend struct {
	opts Options
	host string
	port int

	mu     sync.Mutex
	native *nativeBackend
}

func (e *externalBackend) startPostgres(context.Context, string, string, string) (node, string, int, error) {
	return nil, "", 0, fmt.Errorf("start postgres: %w", ErrNotSupported)
}

func (e *externalBackend) startPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (node, string, int, error) {
	e.mu.Lock()
	if e.native == nil {
		b, err := newNativeBouncers(e.opts)
		if err != nil {
			e.mu.Unlock()
			return nil, "", 0, fmt.Errorf("the external provider runs an added PgBouncer as a local process: %w", err)
		}
		b.pgHost, b.pgPort = e.host, e.port
		e.native = b
	}
	b := e.native
	e.mu.Unlock()
	return b.startPgBouncer(ctx, name, cfg)
}

func (e *externalBackend) close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.native == nil {
		return nil
	}
	return e.native.close(ctx)
}
