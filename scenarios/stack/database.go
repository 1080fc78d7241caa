package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CreateDatabase creates a database of its own on the stack's Postgres
// (and on an HA stack's oracle server),
// named prefix followed by twelve random hex digits, and returns its name.
// Every endpoint reaches it through Endpoint.WithDatabase; through
// PgBouncer it gets pools of its own, so a pool size holds per database.
func (s *Stack) CreateDatabase(ctx context.Context, prefix string) (string, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	for _, ep := range s.databaseServers() {
		if err := s.createDatabase(ctx, ep, name); err != nil {
			return "", err
		}
	}
	return name, nil
}

// databaseServers are the servers a database of a test or run is made on:
// the stack's Postgres and, on an HA stack, the oracle server beside it,
// so that its Oracle endpoint reaches the same database name.
func (s *Stack) databaseServers() []Endpoint {
	if o := s.Oracle(); o.DSN != s.postgres.DSN {
		return []Endpoint{s.postgres, o}
	}
	return []Endpoint{s.postgres}
}

func (s *Stack) createDatabase(ctx context.Context, ep Endpoint, name string) error {
	// The retry after a lost connection may find the database that the
	// first try made: duplicate_database is then its success.
	err := s.admin(ctx, ep, "42P04", func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+copyStrategy(c.PgConn().ParameterStatus("server_version")))
		return err
	})
	if err != nil {
		return fmt.Errorf("create database %s on %s: %w", name, ep.Name, err)
	}
	return nil
}

// copyStrategy is the STRATEGY clause of a test database's CREATE
// DATABASE on a server of version v: FILE_COPY from Postgres 15 on, where
// the default became WAL_LOG, which writes the whole template through the
// WAL. The stacks run without fsync, so FILE_COPY's checkpoints are cheap:
// 10 databases took 1.5 to 2.2 s with it and 3.6 to 4.7 s without, on the
// docker stack beside make test. Before 15 there is no clause to give.
func copyStrategy(v string) string {
	var major int
	if _, err := fmt.Sscanf(v, "%d", &major); err == nil && major >= 15 {
		return " STRATEGY FILE_COPY"
	}
	return ""
}

// DropDatabase drops the database called name, if it exists, ending every
// session still connected to it.
func (s *Stack) DropDatabase(ctx context.Context, name string) error {
	for _, ep := range s.databaseServers() {
		err := s.admin(ctx, ep, "", func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			return err
		})
		if err != nil {
			return fmt.Errorf("drop database %s on %s: %w", name, ep.Name, err)
		}
	}
	return nil
}

// adminConns is how many connections the stack keeps to each server for
// creating and dropping databases: tests do it two at a time.
const adminConns = 2

// admin runs f on a connection of the stack's own to ep's server, kept
// open between calls: a login cost this machine's Postgres 22 to 32 ms of
// CPU (200 logins, its postmaster's cutime and cstime), and one make test
// created and dropped about 320 databases on its shared stack with a login
// each. A kept connection can outlive its session (a restart, a
// terminated backend), so when f fails before the server answered, or
// with a FATAL error, which ends the session, the kept connections are
// closed and f runs once more on a new one; okOnRetry is an SQLSTATE that
// the second run may meet because the first took effect unseen. Caught by
// TestCreateDatabaseOutlivesItsConnection.
func (s *Stack) admin(ctx context.Context, ep Endpoint, okOnRetry string, f func(*pgx.Conn) error) error {
	p, err := s.adminPool(ep)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		err = p.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return f(c.Conn()) })
		var pgErr *pgconn.PgError
		isPg := errors.As(err, &pgErr)
		switch {
		case err == nil:
			return nil
		case try > 0 && isPg && pgErr.Code == okOnRetry:
			return nil
		case try > 0 || ctx.Err() != nil:
			return err
		case isPg && pgErr.SeverityUnlocalized != "FATAL":
			// The server answered, and the session lives: the
			// statement failed on its own.
			return err
		}
		// What ended this session (a restart) ended the other kept
		// one too: the second run starts from none.
		p.Reset()
	}
}

// adminPool is the stack's pool to ep's server, made on first use; the
// stack closes it.
func (s *Stack) adminPool(ep Endpoint) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adminsClosed {
		// A pool made now would outlive the stack: Close has passed.
		return nil, fmt.Errorf("%s: the stack is closed", ep.Name)
	}
	if p := s.admins[ep.DSN]; p != nil {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(ep.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ep.Name, err)
	}
	cfg.MaxConns = adminConns
	// No ping before each use, a round trip a statement: a connection
	// that died is found by the failure, and admin runs f again.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.RuntimeParams["application_name"] = "doublerun-stack"
	p, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects on first use
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ep.Name, err)
	}
	if s.admins == nil {
		s.admins = map[string]*pgxpool.Pool{}
	}
	s.admins[ep.DSN] = p
	return p, nil
}

// closeAdmins closes the pools of admin; adminPool makes none after it.
// Caught by TestCloseLeavesNothingBehind.
func (s *Stack) closeAdmins() {
	s.mu.Lock()
	pools := s.admins
	s.admins, s.adminsClosed = nil, true
	s.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
}
