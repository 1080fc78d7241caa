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
//     pool?" (measured per version below, "Exec modes by version"). Behind transaction pooling before PgBouncer 1.21 (or with
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
//
// # Pool mode per database and per user
//
// [Config.PoolMode] is PgBouncer's global pool_mode. [Database.PoolMode]
// sets one [databases] entry's mode (pool_mode= in its line), and
// [Config.UserPoolModes] renders the [users] section (name = pool_mode=...).
// PgBouncer takes a pool's mode from the user's entry first, then the
// database's, then the global setting; [Config.EffectivePoolMode] follows
// that order, and TestPoolModePerDatabaseReachesPgBouncer and
// TestUserPoolModeWinsOverDatabasePoolMode check it against a running
// PgBouncer (SHOW POOLS). [Config.Validate] rejects any mode but session,
// transaction and statement: PgBouncer 1.18 itself refuses to start on one
// ("invalid pool mode ... cannot load config file"), and doublerun says which
// entry is wrong before anything starts.
//
// # One bouncer, two names: the #556 fix without a second PgBouncer
//
// Many teams run one PgBouncer in transaction pooling. The lease can still
// have a session-pinned endpoint there: the same Postgres database under a
// second name, in session pooling, used only for the lease.
//
//	[databases]
//	app_lease = host=pg port=5432 dbname=app pool_size=2 pool_mode=session
//	app       = host=pg port=5432 pool_mode=transaction
//	[pgbouncer]
//	pool_mode = transaction
//
// PgBouncer keeps pools per name, so the lease's backend is never handed to a
// client of the work name. These are facts measured on PgBouncer 1.18 with
// Postgres 15 (onebouncer_test.go and onebouncer_stop_test.go; the figures
// are medians of 7 runs of
// `DOUBLERUN_PROVIDER=native go test -count=7 -parallel 1 -run TestOneBouncerLockAtStopAndReconnect -v ./pgbouncer/`,
// each from the moment the client's Close or the console command returned,
// observed by polling pg_locks and pg_stat_activity every millisecond through
// a direct connection; docker provider figures in brackets):
//
//   - Session name: a client keeps its backend PID across transactions, a
//     second client gets another backend, and the lock taken by the first
//     excludes the second. Transaction name, pool of one: two clients run on
//     the same backend and the second re-enters the first one's lock (#556).
//   - Exclusion: with the lock taken through the session name, every backend
//     of the transaction name's pool (pool sizes 1 and 2, each backend held
//     by a client's open transaction) answers pg_try_advisory_lock with false.
//   - SHOW POOLS lists the two names with modes session and transaction.
//   - Graceful stop (Close) of the lease client: server_reset_query (DISCARD
//     ALL, which unlocks every advisory lock) frees the lock; pg_locks was
//     empty 1.7 ms later (range 1.5-3.4) [1.8 ms]. The backend stays in the
//     pool, and the next lease client is handed that same PID and acquires.
//     A new holder on the previous holder's PID is therefore normal on the
//     session name and is not a re-entry.
//   - With a reset query that unlocks nothing (server_reset_query = SELECT 1)
//     the lock outlives its client on the idle session-name backend, and the
//     next lease client, handed that backend, re-enters a lock it never took.
//     That client also inherits the first one's prepared statements, so
//     pgx's statement cache fails with 42P05: [ExecMode] assumes session
//     pooling resets the backend.
//   - RECONNECT <lease name> while the leader is connected: the leader keeps
//     its backend and its lock (checked for 500 ms); RECONNECT closes a
//     server connection only once it is released, which in session pooling
//     is when the client leaves. After the leader's Close the backend was
//     gone and pg_locks empty 2.9 ms later [5.5 ms].
//   - RECONNECT <work name>: the lease's backend and lock are untouched; the
//     work client's next query ran on a new backend 8.1 ms later [13.0 ms].
//   - For contrast, a lock taken through the work name outlives its client:
//     200 ms after the Close, pg_locks still showed it on a backend that SHOW
//     SERVERS listed as idle with no client, an orphaned lock.
//     RECONNECT <work name> closed that backend and the lock was gone 40.5 ms
//     later [32.4 ms].
//
// # Exec modes by version
//
// TestExecModeTable runs 3 pgx v5.12 connections at once, each 200
// parameterised queries of four shapes, through a transaction pool in
// every exec mode, and fails if the mode [ExecMode] picks failed a query.
// PgBouncer 1.24 enables protocol-level prepared statements by default
// (max_prepared_statements = 200 when the setting is left out; 1.18 to
// 1.23 default to 0), so the "mps=0" columns write the setting out
// (Config.MaxPreparedStatements < 0). Failed queries of 600, docker
// provider, one run each
// (`DOUBLERUN_PROVIDER=docker DOUBLERUN_VERSIONS=SET go test -run TestExecModeTable -v ./pgbouncer/`,
// load average 13 to 17 on 2 cores; * is ExecMode's pick):
//
//	PgBouncer 1.24.1, Postgres 17.12
//	mode             pool 1                          pool 2
//	                 default(200)  mps=0      100    default(200)  mps=0            100
//	cache statement  0 *           400 42P05  0 *    0 *           237 42P05,26000  0 *
//	cache describe   0             0          0      0             0                0
//	describe exec    0             0          0      0             0                0
//	exec             0             0 *        0      0             0 *              0
//	simple protocol  0             0          0      0             0                0
//
//	PgBouncer 1.18.0, Postgres 15.18 (the setting does not exist)
//	mode             pool 1     pool 2
//	cache statement  400 42P05  236 42P05,26000
//	cache describe   0          0
//	describe exec    0          0
//	exec             0 *        0 *
//	simple protocol  0          0
//
// So the version alone does not decide: what matters is the bouncer's
// max_prepared_statements as read back from SHOW CONFIG, which the stack
// does (Endpoint.MaxPreparedStatements), and ExecMode picks the statement
// cache exactly where it measured clean. pgx's default, the statement
// cache, works through a stock 1.24 in transaction pooling; an explicit
// max_prepared_statements = 0 brings 1.18's 42P05 back. describe_exec
// failed nothing here even with two server connections, but it still
// sends its Describe and its Execute in two round trips, which
// transaction pooling may give to different servers, so ExecMode never
// picks it.
//
// # Findings by version
//
// The findings of the chaos matrix on 1.18 (chaos/FINDINGS.md),
// measured again on 1.24 with the tests in findings_test.go
// (`DOUBLERUN_MEASURE_FINDINGS=1 DOUBLERUN_VERSIONS=SET go test -run TestMeasure -v ./pgbouncer/`,
// docker provider, one run each, load average 13 to 17):
//
//   - Pool refused after a Postgres restart. A client asked for a server
//     connection while Postgres was down; from the moment Postgres
//     answered directly again, the transaction pool answered after 8.96 s
//     on 1.18 (12.2 s on the native provider; the lockout is
//     server_login_retry, 15 s, counted from the failed login) and after
//     11.75 s on 1.24. The 0.48 s once measured on 1.24 came from Docker's
//     private network: a stopped container's address answered nothing, so
//     no login failed outright. On the host's network, as on a real
//     server, the connection is refused and 1.24 locks the pool out as
//     1.18 does.
//   - Crash on a cancel request (pgbouncer/pgbouncer#801): 10 rounds of 8
//     clients × 25 queries cancelled by their context (5 to 14 ms) never
//     left the bouncer unable to answer, on 1.18 (docker and native) or on
//     1.24. The crash stays a rare event of the full matrix's teardown.
//   - 42P05 with pgx's default statement cache: on 1.24 only with
//     max_prepared_statements = 0 (see the table above); with the default
//     it does not happen.
package pgbouncer
