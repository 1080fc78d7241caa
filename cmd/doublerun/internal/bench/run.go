package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/worker"
)

const benchKind = "bench"

var noop = worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil })

// cell is one point of the grid.
type cell struct {
	Batch    int
	Backlog  int
	Topology string // stack.PostgresName or stack.TransactionName
}

func (c cell) String() string {
	return fmt.Sprintf("batch %d, backlog %d, %s", c.Batch, c.Backlog, topologyLabel(c.Topology))
}

func topologyLabel(name string) string {
	if name == stack.PostgresName {
		return "direct"
	}
	return "transaction pooling"
}

// sample is one run's measurement.
type sample struct {
	Jobs    int64
	Elapsed time.Duration
	CPU     cpu
	Load    float64 // one-minute load average when the run started
}

func (s sample) jobsPerSecond() float64 { return float64(s.Jobs) / s.Elapsed.Seconds() }

func (s sample) jobsPerCPUSecond() float64 {
	if s.CPU.total() <= 0 {
		return 0
	}
	return float64(s.Jobs) / s.CPU.total().Seconds()
}

// bench holds what every run shares.
type bench struct {
	stack  *stack.Stack
	procs  procs
	admin  *pgx.Conn // direct, to the stack's own database: creates and drops the run databases
	poll   time.Duration
	window time.Duration
	log    func(format string, args ...any)
}

// database is one run's own database, with the jobs and lease tables and a
// backlog of due jobs.
type database struct {
	name   string
	direct *pgx.Conn
}

// newDatabase creates a database, migrates it and enqueues backlog jobs in
// one server-side statement, then vacuums, analyses and checkpoints so that
// the run starts from a settled table and no load work is left over for the
// measured window.
func (b *bench) newDatabase(ctx context.Context, backlog int) (*database, error) {
	raw := make([]byte, 6)
	_, _ = rand.Read(raw)
	name := "bench_" + hex.EncodeToString(raw)
	if _, err := b.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	d := &database{name: name}
	cfg, err := b.stack.Postgres().WithDatabase(name).ConnConfig()
	if err != nil {
		return nil, errors.Join(err, b.drop(d))
	}
	if d.direct, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, errors.Join(err, b.drop(d))
	}
	steps := []func() error{
		func() error { return worker.Migrate(ctx, d.direct, "") },
		func() error { return lease.MigrateFenced(ctx, d.direct, "") },
		func() error {
			_, err := d.direct.Exec(ctx, `INSERT INTO doublerun_jobs (kind) SELECT $1 FROM generate_series(1, $2::integer)`, benchKind, backlog)
			return err
		},
		func() error { _, err := d.direct.Exec(ctx, `VACUUM ANALYZE doublerun_jobs`); return err },
		func() error { _, err := d.direct.Exec(ctx, `CHECKPOINT`); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, errors.Join(fmt.Errorf("prepare %s: %w", name, err), b.drop(d))
		}
	}
	return d, nil
}

// drop removes a run's database.
func (b *bench) drop(d *database) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if d.direct != nil {
		_ = d.direct.Close(ctx)
	}
	_, err := b.admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", d.name))
	return err
}

func (b *bench) endpoint(topology, db string) (stack.Endpoint, error) {
	ep, ok := b.stack.Endpoint(topology)
	if !ok {
		return stack.Endpoint{}, fmt.Errorf("the stack has no %s endpoint", topology)
	}
	return ep.WithDatabase(db), nil
}

// running is one cell's database, lease and worker config, ready to start.
type running struct {
	db     *database
	ep     stack.Endpoint
	lease  *lease.Fenced
	config worker.Config
}

// prepare gives a cell a database of its own with its backlog, a Fenced
// lease on the cell's endpoint, and the config of a worker with no-op
// handlers. close removes them.
func (b *bench) prepare(ctx context.Context, c cell) (r running, close func(), err error) {
	if err := b.servers(ctx); err != nil {
		return r, nil, err
	}
	if r.db, err = b.newDatabase(ctx, c.Backlog); err != nil {
		return r, nil, err
	}
	close = func() { _ = b.drop(r.db) }
	if r.ep, err = b.endpoint(c.Topology, r.db.name); err != nil {
		close()
		return r, nil, err
	}
	if r.lease, err = lease.NewFenced(ctx, lease.FencedConfig{DSN: r.ep.DSN, Name: "bench", Holder: "bench"}); err != nil {
		close()
		return r, nil, err
	}
	close = func() {
		_ = r.lease.Close(context.Background())
		_ = b.drop(r.db)
	}
	r.config = worker.Config{
		Lease:        r.lease,
		DSN:          r.ep.DSN,
		Handlers:     map[string]worker.Handler{benchKind: noop},
		BatchSize:    c.Batch,
		PollInterval: b.poll,
	}
	return r, close, nil
}

// run measures one cell once: a Fenced lease and one worker with no-op
// handlers on the cell's endpoint work off the backlog until it is done or
// the window has passed. The count and the CPU times are read before Stop,
// so that shutting down is not part of the figure.
func (b *bench) run(ctx context.Context, c cell) (sample, error) {
	r, cleanup, err := b.prepare(ctx, c)
	if err != nil {
		return sample{}, err
	}
	defer cleanup()
	w, err := worker.New(r.config)
	if err != nil {
		return sample{}, err
	}
	defer w.Close()

	s := sample{Load: loadavg()}
	before, err := b.procs.read()
	if err != nil {
		return sample{}, err
	}
	begin := time.Now()
	if err := w.Start(ctx); err != nil {
		return sample{}, err
	}
	if err := waitDone(ctx, w, int64(c.Backlog), begin.Add(b.window)); err != nil {
		return sample{}, err
	}
	s.Jobs, s.Elapsed = w.Stats().JobsCompleted, time.Since(begin)
	after, err := b.procs.read()
	if err != nil {
		return sample{}, err
	}
	s.CPU = after.sub(before)
	if st := w.Stats(); st.PollErrors > 0 || st.Faults > 0 {
		b.log("  note: %d poll errors, %d lease faults in this run", st.PollErrors, st.Faults)
	}
	return s, nil
}

// waitDone returns once w has completed want jobs or the deadline passed.
// It looks every 10 ms: often enough for a run of a second or more, and
// rarely enough that its own wake-ups stay out of the worker's CPU time.
func waitDone(ctx context.Context, w *worker.Worker, want int64, deadline time.Time) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for w.Stats().JobsCompleted < want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// servers finds the process IDs of Postgres and of the transaction
// bouncer, starting again a server whose process has gone (the machine is
// shared, and a run must not report a dead bouncer as a failure of the
// worker).
func (b *bench) servers(ctx context.Context) error {
	for _, s := range []struct {
		name string
		pid  *int
		up   func(context.Context) error
	}{
		{stack.PostgresName, &b.procs.postmaster, b.stack.StartPostgres},
		{stack.TransactionName, &b.procs.bouncer, func(ctx context.Context) error { return b.stack.StartPgBouncer(ctx, stack.TransactionName) }},
	} {
		pid, err := b.stack.PID(s.name)
		if err == nil {
			if _, err = os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				*s.pid = pid
				continue
			}
		}
		b.log("  note: %s is not running (%v); starting it again", s.name, err)
		if err := s.up(ctx); err != nil {
			return fmt.Errorf("start %s again: %w", s.name, err)
		}
		if *s.pid, err = b.stack.PID(s.name); err != nil {
			return err
		}
	}
	return nil
}

// newPool opens a pool on ep the way the worker would, plus whatever
// adjust changes, for runs that must see the worker's statements.
func newPool(ctx context.Context, ep stack.Endpoint, adjust func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(ep.DSN)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	adjust(cfg)
	return pgxpool.NewWithConfig(ctx, cfg)
}
