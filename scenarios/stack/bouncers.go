package stack

import (
	"cmp"
	"context"
	"fmt"
	"syscall"

	"github.com/doublerun/doublerun/pgbouncer"
)

type bouncer struct {
	ep   Endpoint
	node node
}

// AddPgBouncer starts another PgBouncer in front of the stack's Postgres.
// The stack fills in cfg's listen address and port, users and auth file.
// It keeps cfg's databases, forwarding those without a host or port to its
// Postgres, and adds the "*" entry unless cfg has one. Everything else (pool
// mode and size, reset query, lifetimes, ...) comes from cfg.
func (s *Stack) AddPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (Endpoint, error) {
	if s.backend == nil {
		return Endpoint{}, fmt.Errorf("add pgbouncer %q: %w; use the docker or native provider", name, ErrNotSupported)
	}
	s.mu.Lock()
	if _, dup := s.bouncers[name]; dup || name == PostgresName || name == "" {
		s.mu.Unlock()
		return Endpoint{}, fmt.Errorf("add pgbouncer: name %q is empty or already used", name)
	}
	s.bouncers[name] = nil // reserve the name
	s.mu.Unlock()

	cfg.Users = append(cfg.Users, pgbouncer.User{Name: s.user, Password: s.password}, pgbouncer.User{Name: AdminUser, Password: s.password})
	cfg.AdminUsers = append(cfg.AdminUsers, AdminUser)
	cfg.PoolMode = cmp.Or(cfg.PoolMode, pgbouncer.PoolSession)
	n, host, port, err := s.backend.startPgBouncer(ctx, name, cfg)
	s.mu.Lock()
	if n != nil {
		s.bouncers[name] = &bouncer{node: n}
	} else {
		delete(s.bouncers, name)
	}
	s.mu.Unlock()
	if err != nil {
		return Endpoint{}, fmt.Errorf("pgbouncer %s: %w", name, err)
	}
	ep := Endpoint{
		Name:                  name,
		DSN:                   dsn(s.user, s.password, host, port, s.database),
		AdminDSN:              dsn(AdminUser, s.password, host, port, "pgbouncer"),
		PoolMode:              cfg.PoolMode,
		PoolSize:              cmp.Or(cfg.DefaultPoolSize, 20),
		MaxPreparedStatements: cfg.MaxPreparedStatements,
	}
	postgresVersion, err := waitReady(ctx, ep.DSN, n)
	if err != nil {
		return Endpoint{}, fmt.Errorf("pgbouncer %s: %w", name, err)
	}
	// Version and max_prepared_statements are read back rather than
	// assumed: an image's PgBouncer may differ from what was asked for,
	// and the defaults change between releases.
	seen, err := describeBouncer(ctx, name, ep.DSN, ep.AdminDSN, postgresVersion)
	if err != nil {
		return Endpoint{}, fmt.Errorf("pgbouncer %s: %w", name, err)
	}
	ep.Version, ep.MaxPreparedStatements, ep.PostgresVersion = seen.Version, seen.MaxPreparedStatements, seen.PostgresVersion
	// How PgBouncer shuts down at once depends on its version
	// (TestStoppingABouncerDoesNotWaitForItsClients).
	if v, ok := n.(interface{ setPgBouncerVersion(string) }); ok {
		v.setPgBouncerVersion(ep.Version)
	}
	if cfg.MaxPreparedStatements > 0 && !pgbouncer.SupportsPreparedStatements(ep.Version) {
		return Endpoint{}, fmt.Errorf("pgbouncer %s: max_prepared_statements needs PgBouncer 1.21 or later, have %s; use a newer image or leave it 0", name, ep.Version)
	}
	s.mu.Lock()
	s.bouncers[name].ep = ep
	s.mu.Unlock()
	s.log.Info("pgbouncer ready", "name", name, "pool_mode", ep.PoolMode, "pool_size", ep.PoolSize, "version", ep.Version)
	return ep, nil
}

// RemovePgBouncer stops the bouncer called name for good and removes it.
// The stack's own session and transaction bouncers cannot be removed.
func (s *Stack) RemovePgBouncer(ctx context.Context, name string) error {
	if name == SessionName || name == TransactionName {
		return fmt.Errorf("remove pgbouncer: %q belongs to the stack; stop it instead", name)
	}
	b, err := s.bouncer(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.bouncers, name)
	s.mu.Unlock()
	return b.node.terminate(ctx)
}

// pgbouncerStopSignal is the signal that shuts PgBouncer down at once, so
// that a stopped bouncer is gone when StopPgBouncer returns: SIGTERM up to
// 1.22; from 1.23 SIGTERM waits for every client to leave (a "super safe
// shutdown") and SIGQUIT is the immediate one.
func pgbouncerStopSignal(version string) syscall.Signal {
	if v, err := pgbouncer.ParseVersion(version); err == nil && !v.Less(pgbouncer.Version{Major: 1, Minor: 23}) {
		return syscall.SIGQUIT
	}
	return syscall.SIGTERM
}

// signalName is sig as the Docker API names it.
func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGQUIT: "SIGQUIT", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
}

// StopPgBouncer stops the bouncer called name.
func (s *Stack) StopPgBouncer(ctx context.Context, name string) error {
	b, err := s.bouncer(name)
	if err != nil {
		return err
	}
	return b.node.stop(ctx)
}

// StartPgBouncer starts the stopped bouncer called name on the same address
// and waits until it answers.
func (s *Stack) StartPgBouncer(ctx context.Context, name string) error {
	b, err := s.bouncer(name)
	if err != nil {
		return err
	}
	if err := b.node.start(ctx); err != nil {
		return err
	}
	_, err = waitReady(ctx, b.ep.DSN, b.node)
	return err
}

// RestartPgBouncer stops and starts the bouncer called name.
func (s *Stack) RestartPgBouncer(ctx context.Context, name string) error {
	if err := s.StopPgBouncer(ctx, name); err != nil {
		return err
	}
	return s.StartPgBouncer(ctx, name)
}

func (s *Stack) bouncer(name string) (*bouncer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bouncers[name]
	switch {
	case ok && b != nil && b.node == nil && b.ep.Name != "":
		// An external stack's own bouncers run elsewhere.
		return nil, fmt.Errorf("pgbouncer %q: %w", name, ErrNotSupported)
	case !ok || b == nil || b.node == nil:
		return nil, fmt.Errorf("no pgbouncer called %q", name)
	}
	return b, nil
}
