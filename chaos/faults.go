package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// The catalog. Each fault is an exported value on an unexported type, in the
// style of etcd's robustness failpoints; importing this package registers
// every one with scenarios.RegisterFault, so `doublerun run` and any
// Scenario can name them.
var (
	// TerminateLeaderBackend runs pg_terminate_backend on the Postgres
	// backend that holds the leader's lease, through a direct connection:
	// the PID the strategy reports (Replica.LeaseBackendPID) or, when it
	// reports none, the backend holding advisory lock (271, 1) in the run's
	// database. Only the advisory strategies have such a backend.
	TerminateLeaderBackend scenarios.Fault = terminateLeaderBackend{}
	// KillLeader sends SIGKILL to the leader process. It is not restarted:
	// the run goes on with one replica fewer.
	KillLeader scenarios.Fault = killLeader{}
	// FreezeLeader sends SIGSTOP to the leader in the first half of a piece
	// of work, before its write, holds it for longer than the TTL, then
	// sends SIGCONT: the paused holder that resumes believing it still
	// leads, with a write to make.
	FreezeLeader scenarios.Fault = freezeLeader{}
	// PartitionLeader blackholes every byte between the leader and its
	// endpoints (both directions, every proxy of the replica) for longer
	// than the TTL, then heals. See "Partitions" in the package docs for
	// what happens to open connections.
	PartitionLeader scenarios.Fault = partitionLeader{}
	// DelayLeader adds latency with jitter to both directions of every
	// proxy of the leader for longer than the TTL, then removes it.
	DelayLeader scenarios.Fault = delayLeader{}
	// PgBouncerPause sends PAUSE for the run's database to the work
	// endpoint's PgBouncer, holds, then sends RESUME.
	PgBouncerPause scenarios.Fault = pgbouncerPause{}
	// PgBouncerKill sends KILL for the run's database to the work endpoint's
	// PgBouncer (every client and server connection of that database
	// dropped at once), then RESUME, which KILL requires.
	PgBouncerKill scenarios.Fault = pgbouncerKill{}
	// PgBouncerReconnect sends RECONNECT for the run's database to the work
	// endpoint's PgBouncer: each server connection is closed once released,
	// so the next transaction gets a fresh backend.
	PgBouncerReconnect scenarios.Fault = pgbouncerReconnect{}
	// PgBouncerRestart stops and starts the PgBouncer process of the
	// topology. On pinned the lease and work bouncers are stopped together
	// and started together, as one PgBouncer serving both pools would be.
	PgBouncerRestart scenarios.Fault = pgbouncerRestart{}
	// PostgresRestart stops Postgres (fast shutdown: every backend ends) and
	// starts it again on the same address.
	PostgresRestart scenarios.Fault = postgresRestart{}
	// GracefulHandover sends SIGTERM to the leader: it stops its worker,
	// releases its lease and exits, and another replica takes over.
	GracefulHandover scenarios.Fault = gracefulHandover{}
)

// Faults is the catalog in the order the matrix lists it.
var Faults = []scenarios.Fault{
	TerminateLeaderBackend,
	KillLeader,
	FreezeLeader,
	PartitionLeader,
	DelayLeader,
	PgBouncerPause,
	PgBouncerKill,
	PgBouncerReconnect,
	PgBouncerRestart,
	PostgresRestart,
	GracefulHandover,
}

func init() {
	for _, f := range Faults {
		scenarios.RegisterFault(f)
	}
}

// FaultNames lists the catalog's names in matrix order.
func FaultNames() []string {
	names := make([]string, len(Faults))
	for i, f := range Faults {
		names[i] = f.Name()
	}
	return names
}

// LookupFault finds a fault of the catalog by name; the error lists the
// valid names.
func LookupFault(name string) (scenarios.Fault, error) {
	for _, f := range Faults {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("unknown fault %q; valid: %s", name, strings.Join(FaultNames(), ", "))
}

// EventChaos is the oracle event kind with which a fault logs the moments
// its steps really took hold (SIGSTOP delivered, partition in place,
// Postgres back up), beside the runner's own fault and healed events.
const EventChaos = "chaos"

// Hold is how long a holding fault (freeze, partition, delay, pause) lasts
// for sc: the TTL plus half of it (at least 500ms), so a lease with a TTL
// has certainly expired, and the matrix stays as fast as the TTL allows.
func Hold(sc scenarios.Scenario) time.Duration {
	sc = sc.WithDefaults()
	return sc.TTL + max(sc.TTL/2, 500*time.Millisecond)
}

// holdingTimeout bounds a holding fault's Inject. The runner's default of a
// minute is too short for a TTL above 40s.
const holdingTimeout = 10 * time.Minute

// recoverTimeout bounds each recovery step, which runs even when the
// injection's context has ended: a fault must never be left in place.
const recoverTimeout = 30 * time.Second

func recoverCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recoverTimeout)
}

// hold waits d, the length of a holding fault, or until ctx ends. It
// refuses at once a hold that cannot end before ctx's deadline.
func hold(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return fmt.Errorf("hold of %s does not fit in the fault's timeout (%s left)", d, time.Until(dl).Round(time.Millisecond))
	}
	return sleep(ctx, d)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func event(ctx context.Context, t scenarios.Target, replica, format string, args ...any) {
	// An event that cannot be logged leaves the timeline poorer, nothing
	// worse; the runner's own fault and healed events carry the verdict.
	_ = t.Event(ctx, EventChaos, replica, fmt.Sprintf(format, args...))
}

func leader(ctx context.Context, t scenarios.Target) (scenarios.Replica, error) {
	l, err := t.Leader(ctx)
	if err != nil {
		return l, fmt.Errorf("find the leader: %w", err)
	}
	return l, nil
}

// strikeWait bounds how long a fault waits for its moment.
const strikeWait = 5 * time.Second

// strike waits for the moment every fault strikes at: just after the
// leader began a piece of work (within a quarter of Scenario.Work), which
// the oracle shows. A lease learns that it lost its backend, its bouncer
// or its connection only at its next poll, so this is the moment at which
// a fault can do the most harm; striking at a random moment instead made
// the same cell show a double-run in some runs and none in others. It
// returns the leader as of that moment. A leader that begins no piece
// within strikeWait is struck anyway, and the event says so.
func strike(ctx context.Context, t scenarios.Target) (scenarios.Replica, error) {
	l, err := leader(ctx, t)
	if err != nil {
		return l, err
	}
	conn, err := direct(ctx, t)
	if err != nil {
		return l, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	fresh := max(t.Scenario().Work/4, 10*time.Millisecond)
	deadline := time.Now().Add(strikeWait)
	for {
		begun, err := oracle.WorkBegun(ctx, conn, l.ID, fresh)
		if err != nil {
			return l, err
		}
		if begun {
			break
		}
		if time.Now().After(deadline) {
			event(ctx, t, l.ID, "struck without waiting: %s began no piece of work within %s", l.ID, strikeWait)
			break
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return l, err
		}
	}
	// The latest piece may hold the lease on another backend than the one
	// before it.
	if now, err := t.Leader(ctx); err == nil && now.ID == l.ID {
		l = now
	}
	return l, nil
}

// strikeProcess is strike for faults that signal the leader's process.
func strikeProcess(ctx context.Context, t scenarios.Target) (scenarios.Replica, error) {
	l, err := strike(ctx, t)
	if err == nil && l.PID <= 0 {
		err = fmt.Errorf("leader %s has no process", l.ID)
	}
	return l, err
}

// runDatabase is the run's own database, which the endpoints point at.
func runDatabase(ep stack.Endpoint) (string, error) {
	u, err := url.Parse(ep.DSN)
	if err != nil {
		return "", fmt.Errorf("endpoint %s: %w", ep.Name, err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return "", fmt.Errorf("endpoint %s names no database", ep.Name)
	}
	return db, nil
}

// direct connects to the run's database on Postgres itself, bypassing every
// bouncer and proxy.
func direct(ctx context.Context, t scenarios.Target) (*pgx.Conn, error) {
	db, err := runDatabase(t.WorkEndpoint())
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(t.Stack().Postgres().WithDatabase(db).DSN)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams["application_name"] = "doublerun-chaos"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres directly: %w", err)
	}
	return conn, nil
}

// ---------------------------------------------------------------------------
// TERMINATE_LEADER_BACKEND

type terminateLeaderBackend struct{}

func (terminateLeaderBackend) Name() string { return "TERMINATE_LEADER_BACKEND" }

// reportsBackendPID lists the built-in strategies whose lease reports the
// backend that holds it (a BackendPID() int32 method). The scenario does
// not say whether a user's strategy does, so only these qualify.
var reportsBackendPID = []string{"advisory", "advisory-unguarded"}

func (terminateLeaderBackend) Available(sc scenarios.Scenario) bool {
	return slices.Contains(reportsBackendPID, sc.Strategy)
}

// Advisory lock keys the built-in advisory strategies use (lease's defaults).
const advisoryKey1, advisoryKey2 = 271, 1

func (terminateLeaderBackend) Inject(ctx context.Context, t scenarios.Target) error {
	l, err := strike(ctx, t)
	if err != nil {
		return err
	}
	db, err := runDatabase(t.WorkEndpoint())
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, t.Stack().Postgres().DSN)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pid, how := l.LeaseBackendPID, "reported by the leader"
	if pid == 0 {
		// A lease that does not report its backend: the backend that holds
		// the advisory lock in the run's database is the one.
		err := conn.QueryRow(ctx, `SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1 AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 2
			ORDER BY l.pid LIMIT 1`, db, advisoryKey1, advisoryKey2).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("leader %s reported no lease backend PID and no backend holds advisory lock (%d, %d) in %s", l.ID, advisoryKey1, advisoryKey2, db)
		}
		if err != nil {
			return fmt.Errorf("find the lock holder in pg_locks: %w", err)
		}
		how = "holding the advisory lock"
	}
	// Only a backend of the run's own database: a PID the leader reported
	// may have ended and been reused since.
	var done bool
	err = conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND datname = $2`,
		pid, db).Scan(&done)
	if errors.Is(err, pgx.ErrNoRows) {
		event(ctx, t, l.ID, "backend %d (%s) already gone", pid, how)
		return nil
	}
	if err != nil {
		return fmt.Errorf("pg_terminate_backend(%d): %w", pid, err)
	}
	if !done {
		return fmt.Errorf("pg_terminate_backend(%d) returned false", pid)
	}
	// pg_terminate_backend only signals; wait until the backend is gone, so
	// the fault has really happened when Inject returns.
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			event(ctx, t, l.ID, "backend %d (%s) terminated", pid, how)
			return nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("backend %d still running: %w", pid, err)
		}
	}
}

// ---------------------------------------------------------------------------
// KILL_LEADER

type killLeader struct{}

func (killLeader) Name() string                      { return "KILL_LEADER" }
func (killLeader) Available(scenarios.Scenario) bool { return true }

func (killLeader) Inject(ctx context.Context, t scenarios.Target) error {
	l, err := strikeProcess(ctx, t)
	if err != nil {
		return err
	}
	// Stop it first, so it cannot begin a piece of work after the killed
	// event, which would then count as running until the end of the run;
	// log the event; then kill. Its open work ends at the event.
	if err := syscall.Kill(l.PID, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s (pid %d): %w", l.ID, l.PID, err)
	}
	kerr := t.Killed(ctx, l.ID)
	if err := syscall.Kill(l.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("SIGKILL %s (pid %d): %w", l.ID, l.PID, err)
	}
	if kerr != nil {
		return fmt.Errorf("log that %s was killed: %w", l.ID, kerr)
	}
	return waitGone(ctx, l.PID)
}

// ---------------------------------------------------------------------------
// FREEZE_LEADER

type freezeLeader struct{}

func (freezeLeader) Name() string                      { return "FREEZE_LEADER" }
func (freezeLeader) Available(scenarios.Scenario) bool { return true }
func (freezeLeader) Timeout() time.Duration            { return holdingTimeout }

func (freezeLeader) Inject(ctx context.Context, t scenarios.Target) error {
	l, err := leader(ctx, t)
	if err == nil && l.PID <= 0 {
		err = fmt.Errorf("leader %s has no process", l.ID)
	}
	if err != nil {
		return err
	}
	conn, err := direct(ctx, t)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// SIGCONT however the injection ends. A frozen replica is the one
	// fault that must never outlive Inject.
	defer func() { _ = syscall.Kill(l.PID, syscall.SIGCONT) }()
	if err := freezeMidWork(ctx, t, conn, l); err != nil {
		return err
	}
	d := Hold(t.Scenario())
	event(ctx, t, l.ID, "SIGSTOP pid %d in the middle of its work, for %s", l.PID, d)
	herr := hold(ctx, d)
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	if err := syscall.Kill(l.PID, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %s (pid %d): %w", l.ID, l.PID, err)
	}
	if err := waitState(rctx, l.PID, func(s byte) bool { return s != 'T' && s != 't' }); err != nil {
		return fmt.Errorf("resume %s: %w", l.ID, err)
	}
	event(rctx, t, l.ID, "SIGCONT pid %d", l.PID)
	return herr
}

// freezeMidWork stops the leader while the oracle shows it in the first
// half of a piece of work, before the piece's write, so that it resumes
// with the write still to make: the case fencing is for. A leader frozen
// between pieces would only find, on waking, that it lost the lease, and
// one frozen after its write would have nothing late to write. It waits
// for such a piece (as strike does), stops the leader, and checks again
// while it is stopped; after strikeWait it freezes the leader wherever it
// is, and the event says so.
func freezeMidWork(ctx context.Context, t scenarios.Target, conn *pgx.Conn, l scenarios.Replica) error {
	half := max(t.Scenario().Work/2, 10*time.Millisecond)
	begun := func() (bool, error) { return oracle.WorkBegun(ctx, conn, l.ID, half) }
	deadline := time.Now().Add(strikeWait)
	for {
		late := time.Now().After(deadline)
		if ok, err := begun(); err != nil {
			return err
		} else if !ok && !late {
			if err := sleep(ctx, 2*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		if err := syscall.Kill(l.PID, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP %s (pid %d): %w", l.ID, l.PID, err)
		}
		if err := waitState(ctx, l.PID, func(s byte) bool { return s == 'T' || s == 't' }); err != nil {
			return fmt.Errorf("freeze %s: %w", l.ID, err)
		}
		if late {
			event(ctx, t, l.ID, "froze %s without waiting: it began no piece of work within %s", l.ID, strikeWait)
			return nil
		}
		// Stopped now: if the piece is still in its first half, the write
		// is still to come.
		if ok, err := begun(); err != nil || ok {
			return err
		}
		if err := syscall.Kill(l.PID, syscall.SIGCONT); err != nil {
			return err
		}
	}
}

// ---------------------------------------------------------------------------
// PARTITION_LEADER and DELAY_LEADER

type partitionLeader struct{}

func (partitionLeader) Name() string                      { return "PARTITION_LEADER" }
func (partitionLeader) Available(scenarios.Scenario) bool { return true }
func (partitionLeader) Timeout() time.Duration            { return holdingTimeout }

func (partitionLeader) Inject(ctx context.Context, t scenarios.Target) error {
	// timeout 0 holds every byte forever and never closes by itself: a
	// blackhole.
	return withToxics(ctx, t, "partition", "timeout", map[string]any{"timeout": 0})
}

type delayLeader struct{}

func (delayLeader) Name() string                      { return "DELAY_LEADER" }
func (delayLeader) Available(scenarios.Scenario) bool { return true }
func (delayLeader) Timeout() time.Duration            { return holdingTimeout }

// Delay is the one-way latency and jitter DELAY_LEADER adds for sc: a
// quarter and an eighth of the TTL, so a round trip costs about half the
// TTL and a statement of several round trips can outlast the lease.
func Delay(sc scenarios.Scenario) (latency, jitter time.Duration) {
	sc = sc.WithDefaults()
	return sc.TTL / 4, sc.TTL / 8
}

func (delayLeader) Inject(ctx context.Context, t scenarios.Target) error {
	latency, jitter := Delay(t.Scenario())
	return withToxics(ctx, t, "delay", "latency", map[string]any{
		"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds(),
	})
}

// withToxics adds a toxic of kind to both directions of every proxy of
// the leader, holds, and removes them again.
func withToxics(ctx context.Context, t scenarios.Target, label, kind string, attrs map[string]any) error {
	l, err := strike(ctx, t)
	if err != nil {
		return err
	}
	proxies := t.Proxies(l.ID)
	if len(proxies) == 0 {
		return fmt.Errorf("replica %s has no proxies to put a %s on", l.ID, label)
	}
	var added []func(context.Context) error
	heal := func() error {
		rctx, cancel := recoverCtx(ctx)
		defer cancel()
		var errs []error
		for _, remove := range added {
			errs = append(errs, remove(rctx))
		}
		return errors.Join(errs...)
	}
	for _, p := range proxies {
		for _, stream := range []string{"upstream", "downstream"} {
			remove, err := addToxic(p, "chaos-"+label+"-"+stream, kind, stream, attrs)
			if err != nil {
				return errors.Join(err, heal())
			}
			added = append(added, remove)
		}
	}
	d := Hold(t.Scenario())
	event(ctx, t, l.ID, "%s %v on %d proxies, for %s", label, attrs, len(proxies), d)
	herr := hold(ctx, d)
	if err := heal(); err != nil {
		return fmt.Errorf("heal %s: %w", label, err)
	}
	event(context.WithoutCancel(ctx), t, l.ID, "%s removed", label)
	return herr
}

// addToxic adds one toxic to p and returns what removes it.
func addToxic(p *toxiproxy.Proxy, name, kind, stream string, attrs map[string]any) (func(context.Context) error, error) {
	spec, err := jsonString(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return nil, err
	}
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return nil, fmt.Errorf("proxy %s: add %s toxic: %w", p.Name, kind, err)
	}
	return func(ctx context.Context) error {
		if err := p.Toxics.RemoveToxic(ctx, name); err != nil {
			return fmt.Errorf("proxy %s: remove %s toxic: %w", p.Name, kind, err)
		}
		return nil
	}, nil
}

// ---------------------------------------------------------------------------
// PgBouncer admin console faults

// bouncerFault is available wherever the work goes through PgBouncer.
func bouncerFault(sc scenarios.Scenario) bool { return sc.Topology.Kind != scenarios.Direct }

// withAdmin connects to the admin console of the work endpoint's bouncer
// and passes the run's database name, to which each command is scoped so a
// fault never touches another run's pools.
func withAdmin(ctx context.Context, t scenarios.Target, f func(a *pgbouncer.Admin, db string) error) error {
	ep := t.WorkEndpoint()
	if _, err := strike(ctx, t); err != nil {
		return err
	}
	if ep.AdminDSN == "" {
		return fmt.Errorf("work endpoint %s has no admin console (is the topology direct?)", ep.Name)
	}
	db, err := runDatabase(ep)
	if err != nil {
		return err
	}
	a, err := pgbouncer.ConnectAdmin(ctx, ep.AdminDSN)
	if err != nil {
		return err
	}
	defer a.Close(context.WithoutCancel(ctx))
	return f(a, db)
}

type pgbouncerPause struct{}

func (pgbouncerPause) Name() string                         { return "PGBOUNCER_PAUSE" }
func (pgbouncerPause) Available(sc scenarios.Scenario) bool { return bouncerFault(sc) }
func (pgbouncerPause) Timeout() time.Duration               { return holdingTimeout }

// Inject pauses the database for Hold. PAUSE returns only once every server
// connection of the database is released; in session pooling a client that
// stays connected (the advisory lease does) never releases its server, so
// PAUSE would wait forever. The pause is therefore sent on one console
// connection and RESUME on another once Hold has passed, whether or not
// PAUSE had completed; the events say which.
func (pgbouncerPause) Inject(ctx context.Context, t scenarios.Target) error {
	ep := t.WorkEndpoint()
	return withAdmin(ctx, t, func(resumer *pgbouncer.Admin, db string) error {
		pauser, err := pgbouncer.ConnectAdmin(ctx, ep.AdminDSN)
		if err != nil {
			return err
		}
		defer pauser.Close(context.WithoutCancel(ctx))
		d := Hold(t.Scenario())
		begin := time.Now()
		pctx, cancelPause := context.WithCancel(ctx)
		defer cancelPause()
		ch := make(chan error, 1)
		go func() { ch <- pauser.Pause(pctx, db) }()
		paused := ch
		event(ctx, t, "", "PAUSE %s on %s, for %s", db, ep.Name, d)
		herr := func() error {
			timer := time.NewTimer(d)
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-timer.C:
					return nil
				case err := <-paused:
					paused = nil // a nil channel is never ready again
					if err != nil {
						return fmt.Errorf("pause: %w", err)
					}
					event(ctx, t, "", "PAUSE %s took hold after %s", db, time.Since(begin).Round(time.Millisecond))
				}
			}
		}()
		if paused != nil {
			event(ctx, t, "", "PAUSE %s still waiting for server connections to be released after %s", db, d)
		}
		rctx, cancel := recoverCtx(ctx)
		defer cancel()
		if err := resumer.Resume(rctx, db); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if paused != nil {
			// PgBouncer never answers a PAUSE that RESUME overtook; give
			// up on it, which closes that console connection.
			cancelPause()
			<-paused
		}
		event(rctx, t, "", "RESUME %s", db)
		return herr
	})
}

type pgbouncerKill struct{}

func (pgbouncerKill) Name() string                         { return "PGBOUNCER_KILL" }
func (pgbouncerKill) Available(sc scenarios.Scenario) bool { return bouncerFault(sc) }

func (pgbouncerKill) Inject(ctx context.Context, t scenarios.Target) error {
	return withAdmin(ctx, t, func(a *pgbouncer.Admin, db string) error {
		kerr := a.Kill(ctx, db)
		if kerr == nil {
			event(ctx, t, "", "KILL %s on %s", db, t.WorkEndpoint().Name)
		}
		// KILL leaves the database paused: new clients wait until RESUME.
		rctx, cancel := recoverCtx(ctx)
		defer cancel()
		if err := a.Resume(rctx, db); err != nil {
			return errors.Join(kerr, fmt.Errorf("resume after kill: %w", err))
		}
		return kerr
	})
}

type pgbouncerReconnect struct{}

func (pgbouncerReconnect) Name() string                         { return "PGBOUNCER_RECONNECT" }
func (pgbouncerReconnect) Available(sc scenarios.Scenario) bool { return bouncerFault(sc) }

// Inject needs no recovery: RECONNECT only marks the server connections of
// the database to be closed when released.
func (pgbouncerReconnect) Inject(ctx context.Context, t scenarios.Target) error {
	return withAdmin(ctx, t, func(a *pgbouncer.Admin, db string) error {
		if err := a.Reconnect(ctx, db); err != nil {
			return err
		}
		event(ctx, t, "", "RECONNECT %s on %s", db, t.WorkEndpoint().Name)
		return nil
	})
}

// ---------------------------------------------------------------------------
// PGBOUNCER_RESTART and POSTGRES_RESTART

type pgbouncerRestart struct{}

func (pgbouncerRestart) Name() string                         { return "PGBOUNCER_RESTART" }
func (pgbouncerRestart) Available(sc scenarios.Scenario) bool { return bouncerFault(sc) }
func (pgbouncerRestart) Timeout() time.Duration               { return 3 * time.Minute }

// Bouncers names the PgBouncers PGBOUNCER_RESTART restarts for t: the work
// endpoint's, and on pinned the lease endpoint's as well. The usual pinned
// deployment is one PgBouncer with two databases, a session-pooled one for
// the lease and a transaction-pooled one for the work (see lease's
// "Pinned configuration"); restarting it drops both.
func Bouncers(t scenarios.Target) []string {
	var names []string
	for _, ep := range []stack.Endpoint{t.LeaseEndpoint(), t.WorkEndpoint()} {
		if !ep.Direct() && !slices.Contains(names, ep.Name) {
			names = append(names, ep.Name)
		}
	}
	return names
}

func (pgbouncerRestart) Inject(ctx context.Context, t scenarios.Target) error {
	names := Bouncers(t)
	if len(names) == 0 {
		return errors.New("the topology uses no PgBouncer")
	}
	if _, err := strike(ctx, t); err != nil {
		return err
	}
	s := t.Stack()
	var serr error
	for _, n := range names {
		if err := s.StopPgBouncer(ctx, n); err != nil {
			serr = errors.Join(serr, fmt.Errorf("stop pgbouncer %s: %w", n, err))
		}
	}
	if serr == nil {
		event(ctx, t, "", "stopped pgbouncer %s", strings.Join(names, ", "))
	}
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	for _, n := range names {
		if err := s.StartPgBouncer(rctx, n); err != nil {
			return errors.Join(serr, fmt.Errorf("start pgbouncer %s: %w", n, err))
		}
	}
	event(rctx, t, "", "started pgbouncer %s", strings.Join(names, ", "))
	return serr
}

type postgresRestart struct{}

func (postgresRestart) Name() string                      { return "POSTGRES_RESTART" }
func (postgresRestart) Available(scenarios.Scenario) bool { return true }
func (postgresRestart) Timeout() time.Duration            { return 3 * time.Minute }

// Inject restarts Postgres. The oracle's own connections are pools that
// reconnect, but a pool hands out a dead connection it has not yet pinged;
// Inject therefore logs an event until one succeeds, so the runner's next
// event finds a live connection.
func (postgresRestart) Inject(ctx context.Context, t scenarios.Target) error {
	if _, err := strike(ctx, t); err != nil {
		return err
	}
	s := t.Stack()
	rerr := s.StopPostgres(ctx)
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	if err := s.StartPostgres(rctx); err != nil {
		return errors.Join(rerr, fmt.Errorf("start postgres: %w", err))
	}
	if rerr != nil {
		return fmt.Errorf("stop postgres: %w", rerr)
	}
	for {
		err := t.Event(rctx, EventChaos, "", "postgres restarted")
		if err == nil {
			return nil
		}
		if herr := sleep(rctx, 50*time.Millisecond); herr != nil {
			return fmt.Errorf("the oracle did not come back after the restart: %w", err)
		}
	}
}

// ---------------------------------------------------------------------------
// GRACEFUL_HANDOVER

type gracefulHandover struct{}

func (gracefulHandover) Name() string                      { return "GRACEFUL_HANDOVER" }
func (gracefulHandover) Available(scenarios.Scenario) bool { return true }

func (gracefulHandover) Inject(ctx context.Context, t scenarios.Target) error {
	l, err := strikeProcess(ctx, t)
	if err != nil {
		return err
	}
	if err := syscall.Kill(l.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", l.ID, l.PID, err)
	}
	event(ctx, t, l.ID, "SIGTERM pid %d", l.PID)
	// The replica finishes its piece of work, closes its lease and exits.
	if err := waitGone(ctx, l.PID); err != nil {
		return fmt.Errorf("%s did not stop after SIGTERM: %w", l.ID, err)
	}
	return nil
}
