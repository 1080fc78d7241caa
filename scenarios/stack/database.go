package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
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
		if err := createDatabase(ctx, ep, name); err != nil {
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

func createDatabase(ctx context.Context, ep Endpoint, name string) error {
	conn, err := pgx.Connect(ctx, ep.DSN)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", ep.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+copyStrategy(conn.PgConn().ParameterStatus("server_version"))); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
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
		conn, err := pgx.Connect(ctx, ep.DSN)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", ep.Name, err)
		}
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
	}
	return nil
}
