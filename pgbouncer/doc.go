// Package pgbouncer renders PgBouncer configuration, talks to its admin
// console, and picks the pgx query mode that is safe behind a given pool.
//
// # Why a package of its own
//
// doublerun exists to measure leases behind PgBouncer, so PgBouncer is a
// first-class part of every test stack rather than an opaque container. The
// scenarios need three things from it:
//
//   - A typed [Config] that renders pgbouncer.ini and userlist.txt, so each
//     stack and each extra bouncer is described in Go, with real password
//     authentication rather than trust.
//   - An [Admin] client for the console (SHOW, PAUSE, KILL, RECONNECT, ...).
//     The console speaks only the simple query protocol; [ConnectAdmin]
//     forces it.
//   - [ExecMode], which answers "which pgx QueryExecMode survives this
//     pool?". Behind transaction pooling before PgBouncer 1.21 (or with
//     max_prepared_statements = 0) a named prepared statement lands on
//     whichever server connection runs it, so pgx's default statement cache
//     fails with SQLSTATE 42P05 or 26000. QueryExecModeExec is the safe choice
//     there; DescribeExec is never safe with more than one server connection.
//
// # What transaction pooling does to session state
//
// In pool_mode=transaction a client owns a server connection only for the
// length of one transaction. Session state (SET, LISTEN, SQL PREPARE, and
// session advisory locks) stays on the server connection, where the next
// client to be given that connection inherits it. server_reset_query runs
// only in session pooling unless server_reset_query_always = 1. That is the
// mechanism behind doublerun's issue #556 reproduction.
package pgbouncer
