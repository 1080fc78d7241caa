package scenarios

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// RunOptions configure Run.
type RunOptions struct {
	// Stack is where the run happens; required. Each run gets a database
	// of its own on it, and a PgBouncer of its own when its pool size
	// differs from the stack's transaction pool.
	Stack *stack.Stack
	// OutDir receives the replicas' logs, under OutDir/<scenario>/replicas,
	// where package report writes the report beside them; empty keeps the
	// logs in a temp dir, removed afterwards.
	OutDir string
	// Executable is the binary started as each replica; default this
	// one, or for a built-in strategy's replicas the binary that
	// reexec.EnvBinary names, when it is set (make test sets it).
	Executable string
	// Logger receives progress; default discards.
	Logger *slog.Logger
	// Keep leaves the run's database in place for inspection.
	Keep bool
	// LeaderWait is how long the run waits for the first piece of leader
	// work before it fails; zero is DefaultLeaderWait. A replica program
	// that builds, migrates or warms up before it contends needs longer.
	LeaderWait time.Duration

	// onReplica, for tests, sees each replica's PID as it starts.
	onReplica func(pid int)
	// inFlightWait, for tests, bounds the wait for the pieces a fault's
	// heal left in flight; default inFlightWait.
	inFlightWait time.Duration
	// stopGrace, for tests, is how long replicas have to stop after
	// SIGTERM; default stopGrace.
	stopGrace time.Duration
	// pieceWait, for tests, bounds the wait for the work the validity
	// floor asks for; default pieceWait.
	pieceWait time.Duration
}

// withDefaults returns o with every zero field at its default.
func (o RunOptions) withDefaults() RunOptions {
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	if o.Executable == "" {
		o.Executable, _ = os.Executable() // validate says why when it cannot
	}
	o.LeaderWait = cmp.Or(o.LeaderWait, DefaultLeaderWait)
	o.inFlightWait = cmp.Or(o.inFlightWait, inFlightWait)
	o.stopGrace = cmp.Or(o.stopGrace, stopGrace)
	o.pieceWait = cmp.Or(o.pieceWait, pieceWait)
	return o
}

// validate says what keeps o, defaults applied, from starting a run.
func (o RunOptions) validate() error {
	if o.Stack == nil {
		return errors.New("scenarios: RunOptions.Stack is required")
	}
	if o.Executable == "" {
		_, err := os.Executable()
		return fmt.Errorf("find this binary to start replicas: %w", err)
	}
	if o.LeaderWait < 0 {
		return fmt.Errorf("scenarios: RunOptions.LeaderWait is negative (%s); leave it zero for the default %s", o.LeaderWait, DefaultLeaderWait)
	}
	return nil
}

// Run runs one scenario and judges it, and returns what it measured as
// data; it writes no report (package report does). The error is for runs
// that could not be carried out; a run whose measurements disagree with
// its expectation returns a report whose Verdict fails.
func Run(ctx context.Context, sc Scenario, opts RunOptions) (*Report, error) {
	sc = sc.WithDefaults()
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if opts.Executable == "" {
		exe, err := reexec.Executable(standsIn(sc))
		if err != nil {
			return nil, err
		}
		opts.Executable = exe
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if sc.Replica != nil {
		if err := sc.Replica.Check(); err != nil {
			return nil, err
		}
	}
	r := &run{sc: sc, opts: opts, log: opts.Logger, exe: opts.Executable, began: time.Now()}
	defer r.cleanup()
	return r.execute(ctx)
}

// standsIn reports whether sc's replicas may be another doublerun binary
// than this one (reexec.Executable): a built-in strategy's run in any, but
// a strategy this binary registered, and a command's keeper, in this one
// alone. Caught by TestStandsIn.
func standsIn(sc Scenario) bool {
	return sc.Replica == nil && strategy.BuiltIn(sc.Strategy)
}

// run is one Run in progress. Its methods live in the files named run*:
// this file (the run's course and its measurement), run_prepare.go (the
// logs' directory, the run's database and endpoints, the oracle),
// run_replicas.go (the replica processes), run_command.go (a replica that
// is the user's command, and the keeper of its process group),
// run_lockwatch.go and run_pathwatch.go (what the runner samples while the
// replicas run), run_target.go (what its fault acts on) and run_report.go
// (the Report it returns).
type run struct {
	sc    Scenario
	opts  RunOptions
	log   *slog.Logger
	exe   string
	began time.Time

	dir     string // the replicas' logs
	tempDir bool
	db      string
	direct  stack.Endpoint
	leaseEP stack.Endpoint
	workEP  stack.Endpoint
	conn    *pgxpool.Pool // direct, to the run's database on the oracle's server; reconnects after a Postgres restart
	// oracleEP is where conn and the replicas' oracle connections go: the
	// stack's Postgres, or on a stack with a standby its third server.
	oracleEP stack.Endpoint
	// pair reaches the run's database on the server the lease and the
	// work use (direct): conn itself, unless the stack has a standby.
	pair       *pgxpool.Pool
	leaseCheck string
	lockWatch  *lockWatch
	toxics     *toxiproxy.ApiServer
	proxies    map[string][]*toxiproxy.Proxy

	tokens atomic.Int64 // log mode's terms, one counter for the run

	// stopping is set once the measurement ended and the runner stops the
	// replicas: an exit before it is an event (replicaExited).
	stopping atomic.Bool

	mu       sync.Mutex
	replicas []*proc
	cleanups []func()
}

// execute is the run's course: prepare, start the replicas, wait for the
// first piece of leader work, measure (with the fault at a third), stop
// the replicas and judge what the history holds.
func (r *run) execute(ctx context.Context) (*Report, error) {
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	r.watchLock(ctx)
	if err := r.startReplicas(ctx); err != nil {
		return nil, err
	}
	waitFrom := time.Now()
	start, err := r.waitForLeader(ctx)
	if errors.Is(err, errSilent) {
		// Replica commands that reported no leader work within the
		// leader wait: the measured span is from the first command's start
		// to now, and the verdict says what reported nothing and how to
		// fix it. Judge fails any run without work (Caught by
		// TestJudgeSilentReplicaIsNotSafe); the reason (silentReason)
		// names the mode.
		return r.finish(ctx, r.oracleTime(ctx, waitFrom))
	}
	if err != nil {
		return nil, err
	}
	r.log.Info("measuring", "scenario", r.sc.Name, "duration", r.sc.Duration, "fault", r.sc.Fault)
	measureEnd := time.Now().Add(r.sc.Duration)
	var faultAt time.Time
	if f, ok := fault.Lookup(r.sc.Fault); ok {
		if err := wait.Sleep(ctx, r.sc.Duration/3); err != nil {
			return nil, err
		}
		// The fault strikes once the work the validity floor asks for
		// before it has begun: a third of the run is the plan, and a
		// starved machine gets longer.
		if err := r.awaitPieces(ctx, start, oracle.MinPieces, r.opts.pieceWait); err != nil {
			return nil, err
		}
		// And once every replica contends: beside two CPU hogs one took
		// 6.3 s to build its lease, after PARTITION_LEADER had struck, and
		// the run was INCONCLUSIVE for want of a second contender.
		if err := r.awaitStarted(ctx, r.opts.pieceWait); err != nil {
			return nil, err
		}
		var healed time.Time
		var err error
		if faultAt, healed, err = r.inject(ctx, f); err != nil {
			return nil, err
		}
		// A fault that took longer than planned (a restart on a loaded
		// machine) still leaves the replicas a TTL and a second to recover
		// in before the measurement ends, as CellDuration plans for.
		measureEnd = later(measureEnd, time.Now().Add(r.sc.TTL+time.Second))
		if err := wait.Sleep(ctx, time.Until(measureEnd)); err != nil {
			return nil, err
		}
		if err := r.awaitInFlight(ctx, healed); err != nil {
			return nil, err
		}
	} else {
		if err := wait.Sleep(ctx, time.Until(measureEnd)); err != nil {
			return nil, err
		}
		if err := r.awaitSecondHalf(ctx, start); err != nil {
			return nil, err
		}
	}
	if err := r.awaitWorkAfter(ctx, faultAt); err != nil {
		return nil, err
	}
	return r.finish(ctx, start)
}

// finish ends the measurement that began at start on the oracle's clock:
// it logs the end, stops the replicas, takes the lock watch's last
// sample, loads the history between the two and judges it.
func (r *run) finish(ctx context.Context, start time.Time) (*Report, error) {
	end, err := oracle.LogEvent(ctx, r.conn, oracle.EventMeasureEnd, "", "")
	if err != nil {
		return nil, err
	}
	r.stopping.Store(true)
	r.stopReplicas(ctx)
	// The last sample comes after every replica stopped, so a lock they
	// left behind shows (oracle.Orphaned.LeftHeld).
	locks := r.lockWatch.stop(ctx)
	h, err := r.load(ctx, start, end)
	if err != nil {
		return nil, err
	}
	h.Locks, h.Backends, h.PathWatched = locks, r.lockWatch.backends(), r.lockWatch.pathWatched()
	return r.report(h, oracle.Analyze(h, r.analysis())), nil
}

// inject runs f, logging on the oracle's clock when it began and when it
// had recovered, and returns both. The measurement keeps running
// meanwhile.
func (r *run) inject(ctx context.Context, f fault.Fault) (time.Time, time.Time, error) {
	fctx, cancel := context.WithTimeout(ctx, fault.TimeoutOf(f))
	defer cancel()
	leader, _ := r.Leader(fctx)
	at, err := oracle.LogEvent(ctx, r.conn, oracle.EventFault, leader.ID, f.Name())
	if err != nil {
		return at, time.Time{}, err
	}
	r.log.Info("fault", "name", f.Name(), "leader", leader.ID)
	if err := f.Inject(fctx, r); err != nil {
		return at, time.Time{}, fmt.Errorf("fault %s: %w", f.Name(), err)
	}
	healed, err := oracle.LogEvent(ctx, r.conn, oracle.EventHealed, leader.ID, f.Name())
	return at, healed, err
}

// inFlightWait bounds how long a measurement goes on, past its planned
// end, for the pieces of work a fault's heal left in flight.
const inFlightWait = 30 * time.Second

// awaitInFlight extends the measurement until every live replica's piece
// of work that was open when the fault healed has ended. Such a piece is
// what the fault was about: a resumed holder's late write, a write that
// hung behind a partition or a pause. How long it takes to end after the
// heal is up to the machine's load (a frozen holder's piece took 10 s
// past a 6 s plan beside two CPU hogs), so the run waits for the event
// instead of assuming a time. A replica that is gone (killed) never ends
// its piece and is not waited for. Past inFlightWait the run ends anyway,
// and an event names the pieces still open. Caught by
// TestAwaitInFlight/WaitsForAPieceOpenAtTheHeal.
func (r *run) awaitInFlight(ctx context.Context, healed time.Time) error {
	bound := r.opts.inFlightWait
	deadline := time.Now().Add(bound)
	for {
		open, err := oracle.OpenWork(ctx, r.conn, healed)
		if err != nil {
			return err
		}
		live := r.running(open)
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			_, err := oracle.LogEvent(ctx, r.conn, oracle.EventChaos, live[0],
				fmt.Sprintf("pieces of %s open at the heal had not ended %s after the planned end of the measurement", strings.Join(live, ", "), bound))
			return err
		}
		if err := wait.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// running returns those of ids whose replica process has not ended.
func (r *run) running(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range ids {
		for _, rp := range r.replicas {
			if rp.id == id && !rp.ended() {
				out = append(out, id)
			}
		}
	}
	return out
}

// anyRunning reports whether a replica process of the run has not ended.
func (r *run) anyRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rp := range r.replicas {
		if !rp.ended() {
			return true
		}
	}
	return false
}

// workAfterWait bounds how much longer than planned a run measures for
// the work after its fault that the validity floor asks for. The longest
// wait a healthy run has is PgBouncer's after a Postgres restart: a login
// that failed while Postgres was down makes every bouncer refuse the pool
// for server_login_retry, 15 s by default, counted from that login
// (chaos/FINDINGS.md, finding 4; PgBouncer 1.18 and 1.24 alike once the
// server refuses the connection, as on the host's network:
// fenced/transaction/POSTGRES_RESTART began its next piece 14.9 s after
// the restart, on the docker provider with PgBouncer 1.24). 20 s covers it and a poll, with the TTL added below.
const workAfterWait = 20 * time.Second

// awaitWorkAfter measures on, for at most workAfterWait and a TTL, until
// oracle.MinPieces pieces of work began after the fault at faultAt (zero
// for none): the run is then long enough to have shown a double-run
// across it, and one that still is not is INCONCLUSIVE.
func (r *run) awaitWorkAfter(ctx context.Context, faultAt time.Time) error {
	if faultAt.IsZero() {
		return nil
	}
	return r.awaitPieces(ctx, faultAt, oracle.MinPieces, workAfterWait+r.sc.TTL)
}

// pieceWait bounds how much longer than planned a run waits for the work
// before its fault, or in the second half of a run without one, that the
// validity floor asks for. Beside two CPU hogs and the other packages'
// tests, a fenced lease's grants through a transaction pool timed out for
// 20 s in a row, and a leader's first piece took 10 s; a run that still
// has too little work after this is INCONCLUSIVE, as it should be.
const pieceWait = 30 * time.Second

// awaitPieces waits, at most bound, until n pieces of leader work have
// begun at or after since on the oracle's clock, or until no replica
// process is left to begin one: a run whose only replica a fault killed
// (the orphaned-lock tests) waited out the whole bound, 20 s and a TTL,
// for work that could not come. Caught by TestAwaitPieces.
func (r *run) awaitPieces(ctx context.Context, since time.Time, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		// Taken before the count: a replica that had ended by then had
		// logged every piece it began, so the count holds them all.
		live := r.anyRunning()
		got, err := oracle.PiecesSince(ctx, r.conn, since)
		if err != nil || got >= n || !live || time.Now().After(deadline) {
			return err
		}
		if err := wait.Sleep(ctx, r.sc.PollInterval); err != nil {
			return err
		}
	}
}

// awaitStarted waits, at most bound, until every replica of the run has
// logged its start. One that has not by then is left to the validity's
// contention condition, which names it. Caught by TestAwaitStarted.
func (r *run) awaitStarted(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		got, err := oracle.StartedReplicas(ctx, r.conn)
		if err != nil || got >= r.sc.Replicas || time.Now().After(deadline) {
			return err
		}
		if err := wait.Sleep(ctx, r.sc.PollInterval); err != nil {
			return err
		}
	}
}

// awaitSecondHalf measures a run without a fault on, at most pieceWait,
// until oracle.MinPiecesUnfaulted pieces of work have begun in its second
// half: as the run grows its middle moves, so the half is taken afresh on
// every look. A leader that stalled under load and works again settles it
// within a few of its pieces. Caught by TestAwaitSecondHalf.
func (r *run) awaitSecondHalf(ctx context.Context, start time.Time) error {
	deadline := time.Now().Add(r.opts.pieceWait)
	for {
		// The run ends just after this returns: its middle is taken a
		// second later than now, so a piece found is in its second half.
		end := r.oracleTime(ctx, time.Now()).Add(time.Second)
		got, err := oracle.PiecesSince(ctx, r.conn, start.Add(end.Sub(start)/2))
		if err != nil || got >= oracle.MinPiecesUnfaulted || time.Now().After(deadline) {
			return err
		}
		if err := wait.Sleep(ctx, r.sc.PollInterval); err != nil {
			return err
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// analysis is how the run's history is analysed; the report carries each
// option, so `doublerun check` analyses it the same way.
func (r *run) analysis() oracle.Options {
	return oracle.Options{GapTolerance: r.gapTolerance(), OrphanTolerance: orphanTolerance, CheckTimeout: oracle.DefaultCheckTimeout,
		TTL: r.sc.TTL, Commands: r.sc.Replica != nil, StaleWritesOnly: r.sc.Expect == ExpectFenced, FaultHold: r.sc.faultHold(),
		Regression: r.sc.Expect == ExpectRegresses}
}

// gapTolerance is the longest pause between two pieces of a leader's own
// work: its poll interval, the lease call and the oracle's writes.
func (r *run) gapTolerance() time.Duration { return 2*r.sc.PollInterval + 100*time.Millisecond }

func (r *run) defer_(f func()) { r.cleanups = append(r.cleanups, f) }

// cleanup kills any replica still running and undoes prepare, in reverse.
func (r *run) cleanup() {
	r.stopping.Store(true)
	r.killReplicas()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	if r.tempDir {
		_ = os.RemoveAll(r.dir)
	}
}

// load reads the run between start and end back from the oracle, and on
// a stack with a standby also from the pair's primary, which after a
// failover is the promoted standby (oracle.LoadFailover). The pair's pool
// may still hold connections to the server a failover took, so that read
// is on a fresh connection through the stack's address, once it leads to
// a primary.
func (r *run) load(ctx context.Context, start, end time.Time) (oracle.History, error) {
	if r.sc.Standby == "" {
		return oracle.Load(ctx, r.conn, start, end)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := r.opts.Stack.WaitPrimary(wctx, r.direct.DSN); err != nil {
		return oracle.History{}, fmt.Errorf("read the pair's primary back: %w", err)
	}
	pair, err := pgx.Connect(ctx, r.direct.DSN)
	if err != nil {
		return oracle.History{}, fmt.Errorf("read the pair's primary back: %w", err)
	}
	defer pair.Close(context.WithoutCancel(ctx))
	h, err := oracle.LoadFailover(ctx, r.conn, pair, start, end)
	if err != nil || !r.sc.Jobs {
		return h, err
	}
	// Caught by TestJobsAcrossALossyFailover.
	h.Survivors.Jobs, err = replica.JobKeys(ctx, pair)
	return h, err
}
