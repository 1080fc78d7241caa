package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
			return nil, &EnvError{Var: v.name, msg: fmt.Sprintf("external provider: %s is not set; run `doublerun stack up` and eval its export lines, or use %s=auto", v.name, EnvProvider)}
		}
		if _, err := pgx.ParseConfig(v.value); err != nil {
			return nil, &EnvError{Var: v.name, msg: fmt.Sprintf("external provider: %s is not a valid DSN (%v); set it to a URL such as postgres://user:password@127.0.0.1:6432/doublerun", v.name, firstLine(err))}
		}
	}
	pg, _ := pgx.ParseConfig(vars[0].value)
	var err error
	s := &Stack{
		provider: ProviderExternal,
		backend:  &externalBackend{opts: opts, host: pg.Host, port: int(pg.Port)},
		log:      opts.Logger,
		user:     pg.User, password: pg.Password, database: pg.Database,
		bouncers: map[string]*bouncer{},
	}
	if opts.versionsAsked {
		s.asked = opts.Versions
	}
	s.postgres = Endpoint{Name: PostgresName, DSN: vars[0].value}
	if s.ext, err = readExternalFailover(ctx, opts); err != nil {
		return nil, err
	}
	version, err := probe(ctx, s.postgres.DSN)
	if err != nil {
		return nil, fmt.Errorf("external provider: %s (%s) does not answer: %s; %s", EnvPostgresDSN, hostPort(s.postgres.DSN), connectCause(err), externalFix)
	}
	s.postgres.PostgresVersion = version
	for _, b := range []struct{ name, dsn, admin, dsnVar, adminVar string }{
		{SessionName, vars[1].value, vars[2].value, EnvSessionDSN, EnvSessionAdminDSN},
		{TransactionName, vars[3].value, vars[4].value, EnvTransactionDSN, EnvTransactionAdminDSN},
	} {
		ep, err := describeBouncer(ctx, b.name, b.dsn, b.admin, "")
		var be *bouncerError
		if errors.As(err, &be) {
			return nil, be.external(b.name, b.dsn, b.dsnVar, b.adminVar)
		}
		if err != nil {
			return nil, fmt.Errorf("external provider: %w", err)
		}
		s.bouncers[b.name] = &bouncer{ep: ep}
	}
	return s, nil
}

// externalFix is what to do when an external endpoint does not answer.
const externalFix = "start that server, or run `doublerun stack up` and eval its export lines, or unset " + EnvProvider

// bouncerError says which of a bouncer's two DSNs failed and why.
type bouncerError struct {
	admin bool   // the admin DSN failed, not the client one
	dsn   string // the DSN that failed
	// notConsole: the admin DSN reached a server that is not PgBouncer's
	// admin console (Postgres answers SHOW VERSION with 42704).
	notConsole bool
	cause      string
}

func (e *bouncerError) Error() string {
	what := "endpoint"
	if e.admin {
		what = "admin console"
	}
	if e.notConsole {
		return fmt.Sprintf("%s at %s is not PgBouncer's admin console (%s)", what, hostPort(e.dsn), e.cause)
	}
	return fmt.Sprintf("%s at %s does not answer: %s", what, hostPort(e.dsn), e.cause)
}

// external is the one-line error of an external stack's bouncer, naming the
// variable to fix; clientDSN is the bouncer's client DSN, whose address the
// admin DSN shares.
func (e *bouncerError) external(name, clientDSN, dsnVar, adminVar string) error {
	switch {
	case e.notConsole:
		return fmt.Errorf("external provider: %s reaches Postgres, not PgBouncer's admin console (%s); set it to the %s bouncer's address with database pgbouncer, such as postgres://%s:PASSWORD@%s/pgbouncer",
			adminVar, e.cause, name, AdminUser, hostPort(clientDSN))
	case e.admin:
		return fmt.Errorf("external provider: %s (%s) does not answer: %s; %s", adminVar, hostPort(e.dsn), e.cause, externalFix)
	}
	return fmt.Errorf("external provider: %s (%s) does not answer: %s; %s", dsnVar, hostPort(e.dsn), e.cause, externalFix)
}

// describeBouncer reads a bouncer's version and settings through its
// admin console, and the version of the Postgres behind it through dsn
// unless postgresVersion already gives it.
func describeBouncer(ctx context.Context, name, dsn, adminDSN, postgresVersion string) (Endpoint, error) {
	if postgresVersion == "" {
		v, err := probe(ctx, dsn)
		if err != nil {
			return Endpoint{}, &bouncerError{dsn: dsn, cause: connectCause(err)}
		}
		postgresVersion = v
	}
	a, err := pgbouncer.ConnectAdmin(ctx, adminDSN)
	if err != nil {
		return Endpoint{}, &bouncerError{admin: true, dsn: adminDSN, cause: connectCause(err)}
	}
	defer a.Close(context.WithoutCancel(ctx))
	version, err := a.Version(ctx)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42704" {
		return Endpoint{}, &bouncerError{admin: true, dsn: adminDSN, notConsole: true, cause: "SHOW VERSION: " + pgErr.Message}
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("%s admin console: %w", name, err)
	}
	conf, err := a.Config(ctx)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%s admin console: %w", name, err)
	}
	size, _ := strconv.Atoi(conf["default_pool_size"])
	prepared, _ := strconv.Atoi(conf["max_prepared_statements"])
	return Endpoint{
		Name: name, DSN: dsn, AdminDSN: adminDSN,
		PoolMode: pgbouncer.PoolMode(conf["pool_mode"]), PoolSize: size,
		Version: version, MaxPreparedStatements: prepared, PostgresVersion: postgresVersion,
	}, nil
}

// connectCause is a connection error on one line, cause included: pgx puts
// the cause on the lines after "failed to connect to `user=... database=...`:".
func connectCause(err error) string {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		// pgx tries each address twice with sslmode=prefer; one says it.
		if line == "" || slices.Contains(parts, line) {
			continue
		}
		if strings.HasPrefix(line, "failed to connect to `") && strings.HasSuffix(line, ":") {
			continue
		}
		parts = append(parts, line)
	}
	if len(parts) == 0 {
		return err.Error()
	}
	return strings.Join(parts, "; ")
}

// hostPort is the host:port of dsn, for messages that must not print its
// password.
func hostPort(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "?"
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
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

// externalBackend starts the bouncers an external stack adds: as
// containers on the network of the docker stack the environment names
// (EnvDockerNetwork), else as native processes forwarding to the external
// Postgres. It looks for what it needs on first use, so an external stack
// that adds no bouncer needs neither.
type externalBackend struct {
	opts Options
	host string
	port int

	mu      sync.Mutex
	bouncer backend
}

func (e *externalBackend) startPostgres(context.Context, string, string, string) (node, string, int, error) {
	return nil, "", 0, fmt.Errorf("start postgres: %w", ErrNotSupported)
}

func (e *externalBackend) startPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (node, string, int, error) {
	e.mu.Lock()
	if e.bouncer == nil {
		b, err := e.bouncerBackend(ctx)
		if err != nil {
			e.mu.Unlock()
			return nil, "", 0, err
		}
		e.bouncer = b
	}
	b := e.bouncer
	e.mu.Unlock()
	return b.startPgBouncer(ctx, name, cfg)
}

// bouncerBackend picks where added bouncers run: beside a docker stack's
// own when the environment names its network and this binary has the
// docker provider, else as local processes.
func (e *externalBackend) bouncerBackend(ctx context.Context) (backend, error) {
	network, image := e.opts.getenv(EnvDockerNetwork), e.opts.getenv(EnvDockerPgBouncerImage)
	if network != "" && image != "" {
		b, err := attachDocker(ctx, e.opts, network, image, e.port)
		if err == nil || !errors.Is(err, errNoDocker) {
			return b, err
		}
	}
	b, err := newNativeBouncers(e.opts)
	if err != nil {
		return nil, fmt.Errorf("the external provider runs an added PgBouncer as a local process: %w", err)
	}
	b.pgHost, b.pgPort = e.host, e.port
	return b, nil
}

func (e *externalBackend) close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bouncer == nil {
		return nil
	}
	return e.bouncer.close(ctx)
}
