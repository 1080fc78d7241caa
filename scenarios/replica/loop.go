package replica

// The built-in replica: what this binary does when the runner started it
// as one (Spec.ChildCommand), or as a replica command (RunAsCommand). The
// spec is all it gets.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/strategy"
	"github.com/doublerun/doublerun/worker"
)

// runChild is a built-in replica process: the runner started this binary
// again as one (package reexec), with raw its Spec. It returns the
// process's exit code.
func runChild(raw string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		log.Error("replica: bad spec", "err", err)
		return 2
	}
	log = log.With("replica", spec.Replica)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := replicaMain(ctx, spec, log); err != nil {
		log.Error("replica failed", "err", err)
		return 1
	}
	return 0
}

// replicaMain runs a worker gated by the strategy's lease. Its one sweep is
// the leader work the oracle measures.
func replicaMain(ctx context.Context, spec Spec, log *slog.Logger) error {
	rec, err := oracle.NewRecorder(ctx, spec.OracleDSN, spec.Replica)
	if err != nil {
		return err
	}
	return leadAndWork(ctx, spec, rec, log)
}

// leadAndWork runs a worker gated by the strategy's lease, reporting to
// rec: the oracle's Recorder for a built-in replica, the SQL functions for
// `doublerun replica`.
func leadAndWork(ctx context.Context, spec Spec, rec workRecorder, log *slog.Logger) error {
	defer rec.Close()
	st, ok := strategy.Lookup(spec.Strategy)
	if !ok {
		return fmt.Errorf("strategy %q is not registered in this binary; register it before reexec.Main", spec.Strategy)
	}
	l, err := st.New(ctx, strategy.LeaseConfig{Replica: spec.Replica, Name: spec.LeaseName, DSN: spec.LeaseDSN, TTL: spec.TTL, PollInterval: spec.PollInterval, Logger: log,
		ApplicationName: spec.AppName})
	if err != nil {
		return fmt.Errorf("build lease: %w", err)
	}
	defer l.Close(context.Background())

	poolCfg, err := pgxpool.ParseConfig(spec.WorkDSN)
	if err != nil {
		return err
	}
	poolCfg.MaxConns = 2
	if spec.Jobs {
		poolCfg.MaxConns = 5 // the enqueuer, a claim, a completion, the sweep's write
	}
	poolCfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	cfg := worker.Config{
		Lease:          l,
		Sweeps:         []worker.Sweep{leaderWork(spec, l, rec, pool, log)},
		ID:             spec.Replica,
		PollInterval:   spec.PollInterval,
		BackoffInitial: spec.PollInterval,
		BackoffMax:     time.Second,
		LeaseTimeout:   10 * time.Second,
		Logger:         log,
	}
	var js *jobs
	if spec.Jobs {
		if err := worker.Migrate(ctx, pool, ""); err != nil {
			return err
		}
		js = newJobs(spec, rec, pool, log)
		cfg = js.config(cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	if js != nil {
		enqueued := make(chan struct{})
		go func() { defer close(enqueued); js.enqueue(ctx) }()
		defer func() { <-enqueued }()
	}
	_ = rec.Event(ctx, oracle.EventReplicaStarted, fmt.Sprintf("pid %d", os.Getpid()))
	claims := newClaimer(l, st, rec)
	claims.watch(ctx)
	w.Stop()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(cctx); err != nil {
		log.Warn("replica: close lease", "err", err)
	}
	claims.check(cctx) // the close let go of the lock, or should have
	return rec.Event(cctx, oracle.EventReplicaStopped, "")
}

// claimer logs the backend this replica's lease says holds its advisory
// lock (oracle.EventLockClaim) whenever that changes, 0 once it lets go:
// with the runner's samples of pg_locks that is how the oracle tells an
// orphaned lock. Only a lease that reports its backend (BackendPID, as
// lease.LockHolder has) and whose lock is known (its own AdvisoryLock, or
// the strategy's) can claim; for any other the claimer does nothing.
type claimer struct {
	pid  func() int32
	lock lease.AdvisoryLock
	rec  workRecorder
	last int32
}

func newClaimer(l lease.Lease, s strategy.Strategy, rec workRecorder) *claimer {
	c := &claimer{rec: rec}
	if p, ok := l.(interface{ BackendPID() int32 }); ok {
		c.pid = p.BackendPID
	}
	switch h := l.(type) {
	case interface{ AdvisoryLock() lease.AdvisoryLock }:
		c.lock = h.AdvisoryLock()
	default:
		if s.AdvisoryLock == nil {
			c.pid = nil
		} else {
			c.lock = *s.AdvisoryLock
		}
	}
	return c
}

// claimInterval is how often a replica looks at its lease's backend.
const claimInterval = 10 * time.Millisecond

// watch checks the claim every claimInterval until ctx ends.
func (c *claimer) watch(ctx context.Context) {
	for {
		c.check(ctx)
		if wait.Sleep(ctx, claimInterval) != nil {
			return
		}
	}
}

// check logs the claim if it changed; one that cannot be logged is tried
// again at the next check.
func (c *claimer) check(ctx context.Context) {
	if c.pid == nil {
		return
	}
	pid := c.pid()
	if pid == c.last {
		return
	}
	if c.rec.Event(ctx, oracle.EventLockClaim, oracle.ClaimDetail(pid, c.lock.Key1, c.lock.Key2)) == nil {
		c.last = pid
	}
}

// leaderWork is one piece of leader work: log its start, work, make the
// side-effect write through the work endpoint (fenced unless the scenario
// says otherwise), log its end. The write comes after the work, as in a
// real job, so a leader paused mid-work writes late: the case a fence is
// for.
func leaderWork(spec Spec, l lease.Lease, rec workRecorder, pool *pgxpool.Pool, log *slog.Logger) worker.Sweep {
	return worker.SweepFunc("doublerun-leader-work", func(ctx context.Context, term lease.Term) error {
		if err := rec.Grant(ctx, term.Token); err != nil {
			return err
		}
		var pid int32
		if p, ok := l.(interface{ BackendPID() int32 }); ok {
			pid = p.BackendPID()
		}
		// A piece begins only inside the term's trust, but once its row is
		// asked for, the answer is awaited past the term: a Begin whose
		// INSERT landed and whose answer the cycle's deadline cut off left
		// a piece nobody ended, open until the run's end (a 20 s false
		// double-run in a PGBOUNCER_RECONNECT run beside two CPU hogs).
		if err := ctx.Err(); err != nil {
			return err
		}
		bctx, bcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		id, err := rec.Begin(bctx, term.Token, pid)
		bcancel()
		if err != nil {
			return err
		}
		_ = wait.Sleep(ctx, spec.Work) // the work itself; a stop ends it early
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		werr := sideEffect(ctx, wctx, spec, fences(l), pool, rec, term)
		if err := endWork(ctx, rec, id); err != nil {
			return err
		}
		if werr != nil {
			log.Warn("replica: side-effect write failed", "token", term.Token, "err", werr)
		}
		return nil
	})
}

// fences says whether l's side-effect writes are fenced: worker.Fence
// checks nothing for a lease that is no lease.Fencer.
func fences(l lease.Lease) bool {
	_, ok := l.(lease.Fencer)
	return ok
}

// sideEffect writes one row under term in a transaction that first checks
// the fence (unless unfenced, or the lease cannot fence). leaderCtx
// carries the term for worker.Fence; the statements run on ctx, which
// outlives the leader cycle. A refusal is logged with the transaction's
// times, read in it.
func sideEffect(leaderCtx, ctx context.Context, spec Spec, fencer bool, pool *pgxpool.Pool, rec workRecorder, term lease.Term) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	fenced := fencer && !spec.Unfenced
	if fenced {
		fenceCtx, cancel := context.WithTimeout(context.WithoutCancel(leaderCtx), 5*time.Second)
		defer cancel()
		if err := worker.Fence(fenceCtx, tx); err != nil {
			if errors.Is(err, lease.ErrStaleToken) {
				return rec.Rejected(ctx, tx, term.Token)
			}
			return err
		}
	}
	key, err := rec.SideEffectKey(ctx, tx, term.Token, fenced)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	// Told only once the commit returned: on a stack with a standby, a
	// write acknowledged here and missing from the primary afterwards was
	// lost by a failover (oracle.Loss).
	if spec.Acks {
		return rec.Ack(ctx, oracle.AckWrite, key, term.Token)
	}
	return nil
}

// endWork logs the end of a piece of work, retrying for a while: a piece
// whose end is lost would count as work until the run ends, and the oracle
// can be briefly unreachable (a Postgres restart).
func endWork(ctx context.Context, rec workRecorder, id int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for {
		err := rec.End(ctx, id)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if wait.Sleep(ctx, 100*time.Millisecond) != nil {
			return err
		}
	}
}

// RunAsCommand runs a built-in strategy's lease as a replica command
// would: its settings from the protocol's DOUBLERUN_* variables, its
// reports through the doublerun.* SQL functions. It is what `doublerun
// replica --strategy NAME` runs, so that a scenario whose replica is that
// command measures the built-in lease through the command path. It returns
// when SIGTERM or an interrupt stops it, or ctx ends.
func RunAsCommand(ctx context.Context, name string, getenv func(string) string) error {
	if err := strategy.Check(name); err != nil {
		return err
	}
	spec, err := specFromEnv(getenv)
	if err != nil {
		return err
	}
	spec.Strategy = name
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", spec.Replica)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	rec, err := newSQLRecorder(ctx, spec.OracleDSN, spec.Replica)
	if err != nil {
		return err
	}
	return leadAndWork(ctx, spec, rec, log)
}
