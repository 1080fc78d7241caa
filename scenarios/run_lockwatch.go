package scenarios

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// lockWatchInterval is how often the runner samples the lease's lock. An
// orphaned stretch shorter than this can go unseen, and each one's ends
// are known to within it.
const lockWatchInterval = 20 * time.Millisecond

// orphanTolerance is the longest orphaned-lock stretch a run leaves out:
// the time a server takes to notice that a dead holder's socket closed,
// plus the samples' resolution. Through Docker's port proxy, which ends
// the client's connection a hop before Postgres, a SIGKILLed leader's lock
// on a direct endpoint outlived it by 27 ms in CI, above one 20 ms
// sample; 100 ms covers that with room. The orphans the window is for,
// behind a transaction pool, last seconds.
const orphanTolerance = 5 * lockWatchInterval

// lockWatch samples which backends hold the lease's advisory lock, through
// the run's direct connection (pg_locks), and, where a bouncer stands
// between the lease and Postgres, whether it has a client linked to each
// of those backends (SHOW SERVERS). It keeps a sample only where what it
// sees changes, and the last one before each change, so the oracle's
// stretches end where they were last seen (oracle.LockSample).
type lockWatch struct {
	// conn reaches the server the lease's lock is on; oracle the oracle's
	// tables, where a lease names its lock in a claim. They are one
	// server unless the stack has a standby.
	conn     *pgxpool.Pool
	oracle   *pgxpool.Pool
	adminDSN string // empty on a direct lease endpoint
	log      *slog.Logger

	lock    *lease.AdvisoryLock // nil until known
	admin   *pgbouncer.Admin
	samples []oracle.LockSample
	pending *oracle.LockSample // the last sample seen, not yet kept

	cancel context.CancelFunc
	done   sync.WaitGroup

	// paths samples the replicas' backends, built-in or a command's.
	paths *pathWatch
}

// watchLock starts watching the lock of the run's strategy. A strategy that
// declares no lock is watched once a replica's lease names its own (a
// lease.LockHolder, through its claims); a run in which none does records
// no samples.
func (r *run) watchLock(ctx context.Context) {
	st, _ := strategy.Lookup(r.sc.Strategy)
	w := &lockWatch{conn: r.pair, oracle: r.conn, log: r.log, lock: st.AdvisoryLock}
	if !r.leaseEP.Direct() {
		w.adminDSN = r.leaseEP.AdminDSN
	}
	// Every replica's backends, a built-in replica's too: the runner
	// gives it the proxies' DSNs, and this shows that its traffic took
	// them. Caught by TestIssue556Reproduces and TestIssue556PinnedFixHolds
	// (requirePathMeasured).
	w.paths = newPathWatch(r)
	ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for tick := 0; ; tick++ {
			w.sample(ctx)
			if tick%pathWatchEvery == 0 {
				w.paths.sample(ctx)
			}
			if wait.Sleep(ctx, lockWatchInterval) != nil {
				return
			}
		}
	}()
	r.lockWatch = w
	r.defer_(func() { r.lockWatch.stop(context.Background()) })
}

// stop ends the watch after one last sample and returns every kept sample.
// It is idempotent.
func (w *lockWatch) stop(ctx context.Context) []oracle.LockSample {
	if w == nil {
		return nil
	}
	if w.cancel != nil {
		w.cancel()
		w.done.Wait()
		w.cancel = nil
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w.sample(sctx)
		cancel()
		if w.pending != nil {
			w.samples = append(w.samples, *w.pending)
			w.pending = nil
		}
		if w.admin != nil {
			_ = w.admin.Close(context.Background())
			w.admin = nil
		}
		w.paths.close()
	}
	return w.samples
}

// pathWatched says the replicas' backends were sampled.
func (w *lockWatch) pathWatched() bool { return w != nil && w.paths != nil }

// backends is every replica's backend the watch saw, with its path. Call
// it after stop.
func (w *lockWatch) backends() []oracle.Backend {
	if w == nil || w.paths == nil {
		return nil
	}
	return w.paths.seen
}

// sample takes one sample and keeps it if it differs from the last kept.
// A sample that cannot be taken (Postgres restarting) is skipped.
func (w *lockWatch) sample(ctx context.Context) {
	if w.lock == nil {
		k1, k2, ok, err := oracle.ClaimedLock(ctx, w.oracle)
		if err != nil || !ok {
			return
		}
		w.lock = &lease.AdvisoryLock{Key1: k1, Key2: k2}
	}
	var s oracle.LockSample
	var pids []int32
	// classid and objid are oids: the keys' bits read as unsigned.
	err := w.conn.QueryRow(ctx, `SELECT clock_timestamp(), coalesce(array_agg(l.pid ORDER BY l.pid), '{}')
		FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()
		AND l.classid::int8 = ($1::int8 & 4294967295) AND l.objid::int8 = ($2::int8 & 4294967295) AND l.objsubid = 2`,
		w.lock.Key1, w.lock.Key2).Scan(&s.At, &pids)
	if err != nil {
		return
	}
	linked := w.linked(ctx, pids)
	for _, pid := range pids {
		h := oracle.LockHolding{PID: pid}
		if v, ok := linked[pid]; ok {
			h.ClientLinked = &v
		}
		s.Held = append(s.Held, h)
	}
	w.keep(s)
}

// keep records s when it differs from the last kept sample, after the last
// sample that did not.
func (w *lockWatch) keep(s oracle.LockSample) {
	if len(w.samples) > 0 && sameHolding(w.samples[len(w.samples)-1], s) {
		w.pending = &s
		return
	}
	if w.pending != nil {
		w.samples = append(w.samples, *w.pending)
		w.pending = nil
	}
	w.samples = append(w.samples, s)
}

func sameHolding(a, b oracle.LockSample) bool {
	return slices.EqualFunc(a.Held, b.Held, func(x, y oracle.LockHolding) bool {
		return x.PID == y.PID && (x.ClientLinked == nil) == (y.ClientLinked == nil) &&
			(x.ClientLinked == nil || *x.ClientLinked == *y.ClientLinked)
	})
}

// linked asks the lease endpoint's bouncer which of pids' server
// connections have a client linked; nil where there is no bouncer or it
// does not answer.
func (w *lockWatch) linked(ctx context.Context, pids []int32) map[int32]bool {
	if w.adminDSN == "" || len(pids) == 0 {
		return nil
	}
	if w.admin == nil {
		a, err := pgbouncer.ConnectAdmin(ctx, w.adminDSN)
		if err != nil {
			return nil
		}
		w.admin = a
	}
	servers, err := w.admin.Servers(ctx)
	if err != nil {
		_ = w.admin.Close(context.WithoutCancel(ctx))
		w.admin = nil
		return nil
	}
	out := map[int32]bool{}
	for _, pid := range pids {
		out[pid] = false
	}
	for _, sv := range servers {
		if _, ok := out[int32(sv.RemotePID)]; ok && sv.Linked() {
			out[int32(sv.RemotePID)] = true
		}
	}
	return out
}
