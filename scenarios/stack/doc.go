// Package stack starts the servers every doublerun test and scenario runs
// against: one Postgres, one PgBouncer in session pooling and one in
// transaction pooling, each with real password authentication.
//
// # Providers
//
// Where the servers come from is a [Provider], chosen by Options.Provider or
// the DOUBLERUN_PROVIDER environment variable:
//
//	auto      docker when a Docker engine answers, otherwise native
//	docker    containers through testcontainers-go, on a private network
//	native    postgres and pgbouncer binaries as child processes on loopback
//	external  DSNs from DOUBLERUN_*_DSN variables (see `doublerun stack up`);
//	          a bouncer added to it runs as a local process, as with native
//
// A stack that cannot start fails with one error that names the fix. It
// never skips: a test that silently skips its database is a test that
// proves nothing.
//
// # Stable addresses
//
// Both the docker and the native provider bind each server to a loopback port
// chosen once, so an Endpoint's DSN stays valid across StopPostgres /
// StartPostgres and StopPgBouncer / StartPgBouncer. Chaos faults restart
// servers under running replicas and rely on this.
//
// # Databases through PgBouncer
//
// Every bouncer forwards any database name ("*" in [databases]) to the one
// Postgres, so tests can create a database of their own and reach it through
// every endpoint with [Endpoint.WithDatabase]. PgBouncer keeps one pool per
// database and user, so a pool size applies to each database separately.
// A bouncer added with [Stack.AddPgBouncer] keeps the database entries its
// config names, beside the "*" entry, so it can serve one database under
// several names with a pool mode and size each.
//
// # Docker image contract
//
// DOUBLERUN_POSTGRES_IMAGE must behave like the official postgres image:
// listen on 5432, create POSTGRES_USER with POSTGRES_PASSWORD and the
// database POSTGRES_DB on first start, accept password logins from the
// network, and accept `postgres -c key=value ...` as its command.
//
// DOUBLERUN_PGBOUNCER_IMAGE must have `pgbouncer` on PATH and run it as a
// non-root default user. doublerun copies /etc/pgbouncer/pgbouncer.ini and
// /etc/pgbouncer/userlist.txt into the container before it starts and runs
// `pgbouncer /etc/pgbouncer/pgbouncer.ini` as the entrypoint, so whatever
// entrypoint the image has is bypassed. PgBouncer listens on 6432.
package stack
