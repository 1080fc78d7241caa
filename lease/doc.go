// Package lease elects a leader among replicas through PostgreSQL, and
// says, with evidence, whether the election can hold on the endpoint it is
// given.
//
// Every strategy implements [Lease]: TryAcquire reports [Leader] (with a
// [Term] whose fencing token rises across grants), [Follower] or
// [Faulted]; Release hands leadership over; Close releases for good. The
// worker, the scenarios and a user's own lease all meet at that interface.
// A lease that can wait for leadership instead of asking once per poll
// also implements [Acquirer]; both strategies do, and wait when their
// config's Wait is set (see "Waiting instead of polling").
//
// # The contract: at most one leader, never exactly once
//
// A lease promises that at most one replica believes itself leader at a
// time, and only while its assumptions hold. It never promises that leader
// work runs exactly once. A leader can lose the lease in the middle of its
// work (a dropped connection, a pause longer than the TTL), and a process
// can crash after an external effect but before recording it. So handlers
// must be idempotent: leader work is at-least-once. Writes that must not be
// made by a deposed leader go through a fence (see "Fencing writes").
//
// [Follower] and [Faulted] are different on purpose. A follower reached the
// lease and found it held elsewhere: a healthy replica that should keep its
// health green. A faulted replica could not reach the lease at all: it
// backs off, and its health should degrade.
//
// # Strategies
//
//   - [Advisory] is the original: pg_try_advisory_lock(271, 1) on one
//     dedicated, non-pooled connection, a liveness probe with a 5 s timeout,
//     and the backend-PID affinity guard. With DisablePIDGuard it is the
//     advisory-unguarded baseline; with Wait it is advisory-wait, whose
//     followers wait in pg_advisory_lock. It is correct only on a
//     session-pinned endpoint.
//   - [Fenced] is a table lease with a TTL and a fencing token. It keeps no
//     session state, so it is correct through PgBouncer transaction
//     pooling. With Wait, its followers are woken by a release's NOTIFY
//     on a direct endpoint.
//
// # Advisory states
//
// The lock lives in the Postgres session (the backend) that took it, and
// dies with it. The lease keeps the PID of that backend, read in the same
// statement as the lock (SELECT pg_try_advisory_lock($1,$2),
// pg_backend_pid(), or the waiting statement below), and probes it at
// every call while it holds the lock.
//
//	          Acquire with Wait: pg_advisory_lock under a lock_timeout
//	         +------------------------> +---------+ granted, token taken
//	         |  +---------------------- | waiting | ----------------+
//	         |  |  lock_timeout (55P03) +---------+                 |
//	         |  v                                                   v
//	+----------+    pg_try_advisory_lock granted, token taken   +--------+
//	| follower | ---------------------------------------------> | leader |
//	+----------+ <--------------------------------------------- +--------+
//	  |    ^      probe failed, timed out or saw another PID:     |  ^  |
//	  |    |      reset, then a fresh acquire that lost           |  +--+ probe: same
//	  |    |      (one that wins leads again, with a new token)   |  PID, same term
//	  |    |                                                      |
//	  |    |      Release / Close: pg_advisory_unlock with        |
//	  |    |      pg_backend_pid() in one statement, then close   v
//	  |    +---------------------------------------------------- released
//	  | connect, lock, wait or token failed: reset
//	  v
//	+---------+   the next call reconnects and tries again
//	| faulted | -----------------------------------------> follower or leader
//	+---------+
//
// "Reset" closes the connection: the session ends and Postgres frees the
// lock. A lost session (a failed probe, another PID) is just reset.
// Cancellation of ctx is passed through as TryAcquire's or Acquire's
// error, after a reset, because a connection cancelled in mid-statement
// cannot be trusted.
//
// A release tells the truth. Release and Close unlock on the lease's
// session, reading pg_backend_pid() in the same statement, and only then
// close. When the unlock returned true on the backend that took the lock,
// the hand-over was clean and is logged as "gave up leadership". When it
// ran on another backend, freed nothing, or failed, the release returns an
// error wrapping [ErrUnlockUnconfirmed] and logs a warning instead: behind
// a transaction pool the lock may remain held on a pooled server
// connection that no client owns, until that connection closes, and the
// next holder may re-enter it there (issue #556 again, after the leader
// has gone). The unlock runs even if the caller's ctx has ended, bounded
// by ProbeTimeout. A reset (the PID guard, a failed probe) on an endpoint
// CheckEndpoint proved transaction-pooled closes only the client's
// connection, so it too logs that the lock may remain held, never a clean
// "gave up leadership".
//
// # Waiting instead of polling
//
// When a leader process dies, the kernel resets its connection and
// Postgres ends its backend, which frees the session lock within a
// millisecond or so; a graceful release frees it at once. A follower that
// asks once per poll learns of it at its next poll. A follower already
// waiting in pg_advisory_lock is granted the lock by the server at that
// instant. [Acquirer] is how a caller asks a lease to wait:
//
//   - Advisory with Wait: Acquire runs, in one statement, WITH bound AS
//     MATERIALIZED (SELECT set_config('lock_timeout', WaitTimeout, true))
//     SELECT pg_advisory_lock($1,$2), pg_backend_pid() FROM bound. The
//     bound is local to the statement's own implicit transaction: it covers
//     the wait and nothing else, and it is gone when the statement ends,
//     however it ends. A session-level SET would outlive the wait, on the
//     lease's session (where the token grant, which must be free to wait
//     for an open fenced write, would be cut short) and on a
//     session-pooled server connection. SET LOCAL in an explicit
//     transaction would be as tight, but costs BEGIN and COMMIT around
//     every wait. The PID is read in the same statement, so the PID guard
//     holds as for pg_try_advisory_lock.
//   - The end of a wait decides the result. Granted: Leader, once the
//     token is taken. lock_timeout (SQLSTATE 55P03): Follower, the lock
//     is held elsewhere. Any other error, or a server silent for
//     WaitTimeout + ProbeTimeout: Faulted, and reset. ctx ending: the
//     error, and reset; closing a connection cancelled in mid-statement
//     sends the server a cancel request (pgx does), so the backend does
//     not stay queued for the lock. pgx sends it from a goroutine, so
//     Close waits (at most a second) until it has gone: a process that
//     exits right after Close would otherwise cut it short, which can
//     crash PgBouncer 1.18 in session pooling (pgbouncer/pgbouncer#801).
//   - A waiting follower holds its server connection for as long as it
//     waits. Through a transaction pool that is a pooled server connection
//     taken from the work and from the leader's own probe, and a follower
//     handed the lock-holding backend is granted the re-entrant lock at
//     once (#556). So NewAdvisory refuses a proven transaction-pooled
//     endpoint when Wait is set, and AllowTransactionPooling does not lift
//     that refusal: #556 is reproduced with Wait off.
//   - While it waits, a follower's backend holds one snapshot, so the
//     database's xmin horizon can lag by up to WaitTimeout.
//   - Fenced with Wait: every Release notifies in its own statement
//     (NOTIFY is transactional and works through any pool). A follower
//     that holds no term LISTENs, tries a grant, and then waits for the
//     notification, or for the holder's term to expire on the server's
//     clock, whichever comes first, bounded by WaitTimeout. NewFenced
//     checks the endpoint and listens only on a proven direct one; through
//     PgBouncer Acquire does not wait, and the poll and the TTL stay the
//     fallback. Through transaction pooling LISTEN has no session. Through
//     session pooling it has, but PgBouncer 1.18 takes a server connection
//     it is resetting (DISCARD ALL, after a listening client left) for
//     idle when a notification reaches it first, and the next client of
//     that connection then reads every answer one statement late: a lease
//     could read an earlier statement's row as a grant. The lease is as
//     correct either way; the notification only shortens the wait.
//
// A waiting Acquire returns Follower once it has waited out its bound
// (save a Fenced holder whose renewal answered too late: it returns at
// once, so its next call renews), so a caller can pace its calls by when
// they start: the next call starts a
// poll interval after the last one started, or at once if the last one
// took longer. A follower is then never without a waiting call for more
// than a round trip, while a leader, and a lease that does not wait, is
// still called once a poll interval.
// Release and Close wait for an Acquire in progress; cancel its ctx to
// end a wait at once.
//
// # Issue #556: advisory locks behind transaction pooling
//
// Through PgBouncer in pool_mode=transaction a client owns a server
// connection only for one transaction. The acquire statement's lock stays
// on whichever pooled backend ran it, and the client's connection no
// longer has anything to do with that backend. The next client handed that
// backend, another replica, runs pg_try_advisory_lock on it; advisory
// locks are re-entrant within a session, so it succeeds, and there are two
// leaders. Closing the client connection does not free the lock either: it
// stays on the backend until the server connection closes
// (server_lifetime, 3600 s by default).
//
// The PID guard narrows the window but cannot close it. It runs at the
// next poll, after the second replica has already acted; with a pool of
// one backend every probe sees the same PID and it never fires at all.
// BenchmarkPIDGuardAtPoolSizes measures this, one trial per iteration
// (-benchtime=20x for 20 trials per pool size): at size 1 every trial
// gives two leaders and the guard never fires, which
// TestAdvisoryTransactionPooling also checks on every test run; at sizes 2
// to 4 a second leader appeared in 17 to 20 trials of 20 in our runs, and
// the guard had removed it by the next poll in only 3 to 14 of them,
// varying from run to run.
//
// # Detecting the endpoint
//
// The original said of #556 that "nothing detects that topology".
// [CheckEndpoint] detects what a client can, without the pooler's admin
// console. [NewAdvisory] runs it at start and refuses an endpoint it proves
// transaction-pooled, unless AllowTransactionPooling is set, which only
// reproductions should do.
//
// What it can prove:
//
//   - Transaction (or statement) pooling. It opens three connections at
//     once and asks each, in turn, four times, for pg_backend_pid(). One
//     backend serving two open connections, or one connection moving
//     between backends, happens only in a pool that does not pin sessions.
//   - That a pooler answered the login. Postgres puts its own PID in the
//     cancel key (BackendKeyData) it sends at login; PgBouncer sends a key
//     of its own. When they match on every connection and no connection
//     moved, the verdict is [EndpointDirect].
//
// What it cannot:
//
//   - Prove the absence of transaction pooling. A pool that happens to give
//     each of the check's connections the same backend every time looks
//     pinned, and is reported as [EndpointPinned]: session pooling and
//     undetected transaction pooling are the same verdict, and the evidence
//     says so. PgBouncer reuses the server connection released last, so an
//     idle pool is always caught; a busy one usually is.
//     BenchmarkCheckEndpointFalseNegatives measures it at pool sizes 1, 2
//     and 4, idle and with more clients than servers kept busy: pool size
//     1 is always detected (TestCheckEndpoint checks that on every test
//     run), and in our runs CheckEndpoint missed no pool of
//     size 2 or 4 either, while a naive check (two connections, one query
//     each) missed a busy pool of size 2 in 15% to 70% of its attempts and
//     one of size 4 in 60% to 85%. A pool busier than the test's, or with
//     longer transactions, can hide better; the rate is a measurement, not
//     a bound.
//   - See the future. The pool mode can change after the check (a
//     configuration reload, a DNS or load-balancer change), and the check
//     runs only at start.
//   - Tell a plain TCP proxy or a container port mapping from a direct
//     connection: they forward the cancel key unchanged. They pin sessions,
//     so that is also the right verdict for a lease. inet_server_port() is
//     reported beside the DSN's port as a hint, never as proof.
//   - Judge poolers that forward the cancel key yet multiplex sessions, or
//     that send none (the verdict is then [EndpointUnknown]).
//
// # Pinned configuration: the #556 fix
//
// Give the lease a DSN of its own that reaches a session-pinned endpoint:
// Postgres itself, or a PgBouncer database in pool_mode=session. The work
// keeps using the transaction pool. The lease holds one server connection
// per replica for as long as it lives, so the pinned pool's pool_size must
// be at least the number of replicas; that is all it costs:
//
//	; pgbouncer.ini: one pool for the work, one pinned pool for the lease
//	[databases]
//	app       = host=10.0.0.5 port=5432 dbname=app pool_mode=transaction
//	app_lease = host=10.0.0.5 port=5432 dbname=app pool_mode=session
//
//	lease, err := lease.NewAdvisory(ctx, lease.AdvisoryConfig{
//		DSN: "postgres://svc@pgbouncer:6432/app_lease", // pinned: the lease only
//	})
//	work, err := pgxpool.New(ctx, "postgres://svc@pgbouncer:6432/app?default_query_exec_mode=exec")
//
// ExampleNewAdvisory shows the same in Go. The alternative is [Fenced],
// which needs no pinned endpoint at all.
//
// # Fenced: TTL, trust deadline, tokens
//
// The lease is one row of a table [MigrateFenced] creates: holder, token
// and expires_at. Every statement stands alone and computes expiry from
// the server's clock_timestamp(), so it is correct through any pool and
// never compares two replicas' clocks:
//
//   - A holder renews only its exact term: the row's holder and token must
//     both match, so neither another replica that learnt the token nor an
//     old instance of the same replica can renew it.
//   - A grant happens only when the row is missing or expired, and raises
//     the token; tokens never go back, because the row is never deleted
//     and the table is logged (an UNLOGGED table would forget its tokens in
//     crash recovery). While the lease is held, a follower's poll is a
//     plain read: it neither writes nor waits for the leader's locks.
//   - Release expires the holder's exact term at once, so the next poll of
//     any replica takes over without waiting for the TTL, and notifies the
//     followers waiting in Acquire in the same statement.
//
// The holder trusts its lease only until the instant it sent the
// successful poll plus TTL minus Margin, on its local monotonic clock
// ([Fenced.Deadline]). The poll's start is read before the statement is
// sent, and the server computes expires_at later than that, so the
// deadline never overstates the lease, however slow the answer. An answer
// that arrives after the deadline is reported as Follower, not Leader; the
// term is kept, so the next poll renews it. The Margin absorbs clock-rate
// drift and scheduling delay; it cannot absorb a pause of the whole
// process, which is what fencing is for.
//
// Fenced holds one connection, reconnecting lazily after an error, rather
// than a pool: it sends one statement per poll and its calls are
// serialised, so a pool would only add idle connections and a health-check
// goroutine; behind PgBouncer the pooling is PgBouncer's. Its query mode
// defaults to QueryExecModeExec, which needs nothing to survive between
// transactions (pgx's default statement cache fails with SQLSTATE 42P05
// behind PgBouncer before 1.21). A failure keeps the term, so a transient
// fault, such as its backend being killed, costs one Faulted poll, not a
// failover. The reconnect is bounded by ConnectTimeout, not by the
// answer's TTL - Margin: a poll that timed out behind a fenced write drops
// its connection, and with a short TTL on a loaded host (SCRAM
// authentication under the race detector took more than 240 ms) a
// connect inside that budget failed every poll, and the replica never
// led again.
//
// # Fencing writes
//
// A paused leader can act after its lease has expired and been granted to
// another replica; no lease can prevent that by itself. What makes it safe
// is a token that rises with every grant, checked where the write lands.
// Both strategies implement [Fencer]: Fence runs inside the caller's
// transaction, on the database that holds the lease, and returns an error
// wrapping [ErrStaleToken] unless the term is still the newest grant. The
// write and the check commit together or not at all.
//
// The check locks the lease row FOR KEY SHARE until the transaction ends.
// The token is a key column (it is in a UNIQUE constraint), so a grant,
// which changes it, waits for every open fenced transaction: a write that
// passed the fence commits before any newer leader exists. A renewal
// changes only expires_at and does not wait, so an open fenced write never
// holds up its own leader's renewal. Fence does not look at expiry: a term
// that expired but was not granted again is still the newest, and its
// writes are still safe.
//
// [Advisory] takes its token from a table of tokens (TokenTable) right
// after the lock is granted, so its writes can be fenced the same way;
// behind a transaction pool that is what tells #556's two leaders apart.
//
// # Fencing across a failover
//
// "Tokens never go back" holds on one server. When an asynchronous
// standby is promoted after its primary died, the commits it had not
// received are gone, the token table's last grants among them, and the
// new primary grants those tokens again: the replica they were first
// granted to still holds one, trusts it until its deadline, and its
// fenced writes pass the fence beside the new leader's, since both hold
// the newest token. TestFencedEpochAcrossALossyFailover shows it on a
// real primary and standby.
//
// [FencedConfig.Epoch] closes it. Every promotion starts a new timeline,
// which is the first 8 hex digits of the name of the WAL file a server
// writes (pg_walfile_name(pg_current_wal_lsn())), and the lease keeps
// every token on the timeline it was granted on, in its high 32 bits:
//
//	timeline 1   1<<32|1, 1<<32|2, 1<<32|3 (lost with the promotion)
//	timeline 2   2<<32|1, 2<<32|2, ...     above every token of timeline 1
//
// Three statements carry it:
//
//   - A grant gives at least timeline << 32 | 1, so the first grant on a
//     new timeline is above every token an earlier one granted, lost ones
//     included, as long as a timeline grants fewer than 2^32.
//   - The fence refuses a term of an earlier timeline than the server's,
//     even when its token is the newest there: after a lossy promotion the
//     new primary's newest token can be one that a later, lost grant had
//     superseded, and its holder, paused through the failover, would
//     otherwise write beside the holder of the lost grant.
//   - A renewal moves a term of an earlier timeline to the server's (its
//     token becomes timeline << 32 | 1, which no grant there has given
//     out while the row still holds the old token), so a leader that
//     lived through a promotion writes again after its next poll.
//
// TestFencedEpochAcrossALossyFailover shows all three on a real primary
// and standby. What it does not cover: two primaries at once (a standby
// promoted while the old primary still takes writes), whose timelines can
// be equal; that is the HA system's fencing to prevent.
//
// It is an option rather than the default because it changes what
// tokens look like (above 2^32 from the first grant) and needs a server
// that names its WAL files to every user, which some managed services
// do not; its cost is one function call in each grant, renewal and
// fenced write, and a follower's poll, which grants nothing, does not
// make it (BenchmarkFencedGrant).
package lease
