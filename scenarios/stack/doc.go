// Package stack starts the servers every doublerun test and scenario runs
// against: one Postgres, one PgBouncer in session pooling and one in
// transaction pooling, each with real password authentication.
//
// # Providers
//
// Where the servers come from is a [Provider], chosen by Options.Provider or
// the DOUBLERUN_PROVIDER environment variable:
//
//	auto      the first route below that works (the default)
//	docker    containers through testcontainers-go, on the host's network
//	          (a Linux engine) or a private one with ports published on
//	          loopback (Docker Desktop)
//	native    postgres and pgbouncer binaries as child processes on loopback
//	external  DSNs from DOUBLERUN_*_DSN variables (see `doublerun stack up`);
//	          a bouncer added to it runs as a local process, as with native
//
// A variable [Options.FromEnv] cannot take is an [*EnvError] that names
// it, so that a command line can tell a mistake in its user's environment
// from a server that fails.
//
// # Routes
//
// A fresh machine needs no setup and no exports. Start (and [Prepare]) logs
// the route it took in one line, "stack route: ...", through Options.Logger:
//
//  1. Public images, when a Docker engine answers and the version set's
//     public images are present or can be pulled.
//  2. Local images, when the engine answers but cannot pull (no registry).
//     Missing or outdated ones are built on first use by the embedded
//     images/build.sh (debootstrap of the set's Debian suite, docker import,
//     docker create and commit per image; about 70 s a pair), with progress
//     lines. Builds are serialised across processes with flock, so the test
//     binaries of `go test ./...` build once. If the engine cannot get the
//     Ryuk image either, testcontainers' Ryuk is switched off for the
//     process; doublerun removes its own containers, and sweeps what a
//     killed process left.
//     On such images (doublerun's own, whose one filesystem holds both
//     servers), as root, on an engine of this machine whose containers
//     share the host's network, the servers run as route 3's child
//     processes instead of a container each: one container of the
//     Postgres image runs only sleep, with the stack dir's parent bound at
//     the same path, and the processes run the image's binaries chrooted
//     into /proc/PID/root as the image's postgres user, so the version
//     set asked for runs at the cost of processes (0.04 core-seconds to
//     add and remove a PgBouncer, 0.40 as a container). The stack's Env
//     names that root (EnvNativeRoot) for the bouncers external stacks add.
//  3. Native binaries, when no engine answers (or it has no images and none
//     can be built). Missing ones are installed with apt-get when running
//     as root where apt-get exists (the suite's `postgresql` and
//     `pgbouncer`; serialised the same way), said in one line; otherwise
//     the error names the command to run.
//
// The docker provider takes routes 1 and 2 only, always with a container
// per server, and the native provider route 3 only. Image variables
// (DOUBLERUN_POSTGRES_IMAGE, DOUBLERUN_PGBOUNCER_IMAGE) are used exactly
// as given, never swapped for others; binary variables
// (DOUBLERUN_POSTGRES_BINDIR, DOUBLERUN_PGBOUNCER_BIN) likewise, and
// nothing is installed in their place.
//
// # Version sets
//
// A [VersionSet] is a pair of server versions with its images, such as
// pg15-pgbouncer1.18 (Debian bookworm's) and pg17-pgbouncer1.24 (Debian
// trixie's), chosen by Options.Versions or DOUBLERUN_VERSIONS; the default
// is the newest. It picks the docker provider's images, and the image
// whose filesystem auto's native processes run on. The native provider
// runs whatever binaries the host has, and the route line says so when they
// differ from a set asked for. Whatever runs, [Stack.Versions] and
// [Endpoint.PostgresVersion] / [Endpoint.Version] name the exact versions,
// read from the running servers, so reports can name them.
//
// # Leftovers
//
// Close removes everything a stack created, also after a failed start. A
// process that is killed outright (SIGKILL, a test timeout) cannot; the
// next stack started on the machine removes what it left. Native temp dirs
// and a run's temp dir ([TempDir]) carry an owner file, and docker
// containers and networks carry owner labels (LabelOwnerPID and the
// others): the owner's PID, the start time of that PID, the kernel boot ID
// and the host name. Whatever belongs to an owner that has certainly ended
// on this host is removed; anything else is left alone. An image root's
// container carries its stack's labels: the next start through the docker
// route removes it, and every start removes the stack's dir.
//
// A native stack's servers die with their owner, but a killed Postgres
// leaves shared memory that outlives every process: a System V segment,
// which it removes only on a clean shutdown, and its dynamic shared memory
// segments. The latter are files in the data directory (the native
// provider starts Postgres with dynamic_shared_memory_type=mmap rather
// than the default, whose /dev/shm/PostgreSQL.<random> names say nothing
// of which server made them), so they go with the stack's dir. The System
// V segment is removed before the dir, and only when the dead stack's own
// postmaster.pid names it, it still has that key, its creator is that
// postmaster and no process is attached to it; a segment of any other
// server fails one of those and is left alone (releaseSharedMemory says
// why each one).
//
// # Stable addresses
//
// Both the docker and the native provider bind each server to a loopback port
// chosen once, so an Endpoint's DSN stays valid across StopPostgres /
// StartPostgres and StopPgBouncer / StartPgBouncer. Chaos faults restart
// servers under running replicas and rely on this.
//
// # Failover
//
// With Options.Replication a stack is an HA pair, the shape that RDS
// Multi-AZ, Patroni, CloudNativePG and Stolon give a service: a primary
// (PrimaryName) and a streaming standby (StandbyName) cloned from it with
// pg_basebackup -R, on the docker and the native provider alike:
//
//	replicas ── PgBouncer ──┐
//	replicas ───────────────┴── router ──▶ pg1 (primary) ══WAL══▶ pg2 (standby)
//	oracle connections ─────────────────▶ oracle (a third server)
//
// Three things make it what it is:
//
//   - The router is the stack's one address: an in-process TCP
//     forwarder that [Stack.Postgres] and every bouncer reach Postgres
//     through, and that [Stack.Repoint] turns to the promoted node,
//     closing every connection it carried, as a floating address or a DNS
//     name follows a promotion. It holds its port throughout. On the native provider it listens on
//     loopback; on the docker provider on the gateway of the stack's
//     network, the address of this host its containers reach.
//   - [ReplicationSync] sets synchronous_standby_names on the primary, so
//     a commit waits until the standby has flushed it;
//     [ReplicationAsync] acknowledges it once the primary has it. Either
//     way synchronous_commit is on (the stacks' usual off would
//     acknowledge commits the walsender has not even been given). The
//     standby never has synchronous_standby_names, so once promoted it
//     takes commits without a standby, as Patroni's non-strict
//     synchronous mode does.
//   - The oracle server ([Stack.Oracle]) is a third Postgres that no
//     failover touches: the harness's one clock must outlive the server it
//     watches (package oracle says why). [Stack.CreateDatabase] makes
//     each database on it too.
//
// The operations a failover is made of, each tested against real servers
// on both providers: [Stack.KillPrimary] (SIGKILL to every process of the
// server at once, or a container kill), [Stack.ShutdownPrimary] (a fast
// shutdown, which hands the standby everything first), [Stack.Promote]
// (pg_promote(), which returns once the standby takes writes on a new
// timeline), [Stack.Repoint], [Stack.DetachStandby] and
// [Stack.AttachStandby] (stop and restart the stream, which is how a
// failover is made to lose commits on purpose), [Stack.PauseReplay] and
// [Stack.ResumeReplay], [Stack.CatchUp], [Stack.Timeline] and
// [Stack.WaitPrimary] (the first statement a way in runs on the new
// primary). [Stack.Replication] reports the mode, both servers with their
// versions and roles, and where the address leads.
//
// Pausing replay does not lose anything: pg_promote() replays every WAL
// record the standby had received before it ends recovery, paused or not
// (TestKillInAsyncModeLosesWhatTheStandbyNeverReceived). A standby lags
// on purpose only when it stops receiving: DetachStandby clears its
// primary_conninfo and ends the primary's WAL sender. (Clearing
// primary_conninfo alone does not stop a paused standby's receiver: the
// startup process acts on it only where it waits for WAL, which a paused
// replay never reaches.)
//
// After a failover [Stack.RebuildStandby] clones the node that went down
// afresh from the new primary, and the pair can fail over again, onto
// the next timeline: one stack serves a matrix of failover cells. The
// servers' data directories are pgdata-pg1 and pgdata-pg2 in a native
// stack's dir, beside the oracle's pgdata, and Close and the sweep remove
// the System V segment each one left (a killed server's included).
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
