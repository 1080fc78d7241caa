package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// RunOptions configure Run.
type RunOptions struct {
	// Stack is where the run happens; required. Each run gets a database
	// of its own on it, and a PgBouncer of its own when its pool size
	// differs from the stack's transaction pool.
	Stack *stack.Stack
	// OutDir receives the report (report.json, report.md, timeline.svg)
	// and the replicas' logs under OutDir/<scenario>; empty writes nothing
	// but a temp dir for the logs, removed afterwards.
	OutDir string
	// Executable is the binary started as each replica; default this one.
	Executable string
	// Logger receives progress; default discards.
	Logger *slog.Logger
	// Keep leaves the run's database in place for inspection.
	Keep bool

	// onReplica, for tests, sees each replica's PID as it starts.
	onReplica func(pid int)
}

// Run runs one scenario and judges it. The error is for runs that could
// not be carried out; a run whose measurements disagree with its
// expectation returns a report whose Verdict fails.
func Run(ctx context.Context, sc Scenario, opts RunOptions) (*Report, error) {
	sc = sc.WithDefaults()
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if opts.Stack == nil {
		return nil, errors.New("scenarios: RunOptions.Stack is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	exe := opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find this binary to start replicas: %w", err)
		}
	}
	r := &run{sc: sc, opts: opts, log: log, exe: exe, began: time.Now()}
	defer r.cleanup()
	return r.run(ctx)
}

type run struct {
	sc    Scenario
	opts  RunOptions
	log   *slog.Logger
	exe   string
	began time.Time

	dir        string // reports and logs
	tempDir    bool
	db         string
	direct     stack.Endpoint
	leaseEP    stack.Endpoint
	workEP     stack.Endpoint
	bouncer    string        // a bouncer this run added
	conn       *pgxpool.Pool // direct, to the run's database; reconnects after a Postgres restart
	leaseCheck string
	toxics     *toxiproxy.ApiServer
	proxies    map[string][]*toxiproxy.Proxy

	mu       sync.Mutex
	replicas []*replica
	cleanups []func()
}

type replica struct {
	id   string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (r *run) run(ctx context.Context) (*Report, error) {
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	if err := r.startReplicas(ctx); err != nil {
		return nil, err
	}
	start, err := r.waitForLeader(ctx)
	if err != nil {
		return nil, err
	}
	r.log.Info("measuring", "scenario", r.sc.Name, "duration", r.sc.Duration, "fault", r.sc.Fault)
	measureEnd := time.Now().Add(r.sc.Duration)
	if f, ok := fault.Lookup(r.sc.Fault); ok {
		if err := sleepCtx(ctx, r.sc.Duration/3); err != nil {
			return nil, err
		}
		if err := r.inject(ctx, f); err != nil {
			return nil, err
		}
	}
	if err := sleepCtx(ctx, time.Until(measureEnd)); err != nil {
		return nil, err
	}
	end, err := oracle.LogEvent(ctx, r.conn, oracle.EventMeasureEnd, "", "")
	if err != nil {
		return nil, err
	}
	r.stopReplicas(ctx)
	h, err := oracle.Load(ctx, r.conn, start, end)
	if err != nil {
		return nil, err
	}
	m := oracle.Analyze(h, oracle.Options{GapTolerance: r.gapTolerance()})
	rep := r.report(h, m)
	if r.opts.OutDir != "" {
		if err := rep.WriteFiles(r.dir); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// inject runs f, logging on the oracle's clock when it began and when it
// had recovered. The measurement keeps running meanwhile.
func (r *run) inject(ctx context.Context, f fault.Fault) error {
	fctx, cancel := context.WithTimeout(ctx, fault.TimeoutOf(f))
	defer cancel()
	leader, _ := r.Leader(fctx)
	if _, err := oracle.LogEvent(ctx, r.conn, oracle.EventFault, leader.ID, f.Name()); err != nil {
		return err
	}
	r.log.Info("fault", "name", f.Name(), "leader", leader.ID)
	if err := f.Inject(fctx, r); err != nil {
		return fmt.Errorf("fault %s: %w", f.Name(), err)
	}
	_, err := oracle.LogEvent(ctx, r.conn, oracle.EventHealed, leader.ID, f.Name())
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// gapTolerance is the longest pause between two pieces of a leader's own
// work: its poll interval, the lease call and the oracle's writes.
func (r *run) gapTolerance() time.Duration { return 2*r.sc.PollInterval + 100*time.Millisecond }

func (r *run) prepare(ctx context.Context) error {
	s := r.opts.Stack
	if r.opts.OutDir != "" {
		r.dir = filepath.Join(r.opts.OutDir, r.sc.Name)
		if err := os.MkdirAll(filepath.Join(r.dir, "replicas"), 0o755); err != nil {
			return err
		}
	} else {
		dir, err := os.MkdirTemp("", "doublerun-run-")
		if err != nil {
			return err
		}
		r.dir, r.tempDir = dir, true
		if err := os.MkdirAll(filepath.Join(dir, "replicas"), 0o755); err != nil {
			return err
		}
	}
	var err error
	if r.db, err = s.CreateDatabase(ctx, "run_"); err != nil {
		return err
	}
	if !r.opts.Keep {
		r.defer_(func() { _ = s.DropDatabase(context.Background(), r.db) })
	}
	r.direct = s.Postgres().WithDatabase(r.db)
	if err := r.endpoints(ctx); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(r.direct.DSN)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "doublerun-runner"
	r.conn, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	r.defer_(r.conn.Close)
	err = r.conn.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if err := oracle.Migrate(ctx, c.Conn()); err != nil {
			return err
		}
		strategy, _ := lookupStrategy(r.sc.Strategy)
		if strategy.Setup != nil {
			if err := strategy.Setup(ctx, c.Conn()); err != nil {
				return fmt.Errorf("strategy %s setup: %w", r.sc.Strategy, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if rep, err := lease.CheckEndpoint(ctx, r.leaseEP.DSN); err == nil {
		r.leaseCheck = rep.String()
	} else {
		r.leaseCheck = "check failed: " + err.Error()
	}
	return nil
}

// endpoints picks the lease and work endpoints for the topology.
func (r *run) endpoints(ctx context.Context) error {
	s := r.opts.Stack
	switch r.sc.Topology.Kind {
	case Direct:
		r.leaseEP, r.workEP = r.direct, r.direct
		return nil
	case Session:
		ep := s.Session().WithDatabase(r.db)
		r.leaseEP, r.workEP = ep, ep
		return nil
	}
	tx := s.Transaction()
	if tx.PoolSize != r.sc.Topology.PoolSize {
		r.bouncer = "run-" + strings.TrimPrefix(r.db, "run_")
		ep, err := s.AddPgBouncer(ctx, r.bouncer, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: r.sc.Topology.PoolSize})
		if err != nil {
			return fmt.Errorf("start a transaction pool of %d: %w", r.sc.Topology.PoolSize, err)
		}
		r.defer_(func() { _ = s.RemovePgBouncer(context.Background(), r.bouncer) })
		tx = ep
	}
	tx = tx.WithDatabase(r.db)
	r.workEP, r.leaseEP = tx, tx
	if r.sc.Topology.Kind == Pinned {
		r.leaseEP = s.Session().WithDatabase(r.db)
	}
	return nil
}

// isTestBinary reports whether this process is a go test binary, whose
// replicas must not run the tests if TestMain forgot MaybeRunReplica.
func isTestBinary() bool { return flag.Lookup("test.run") != nil }

func (r *run) startReplicas(ctx context.Context) error {
	r.toxics = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	r.proxies = map[string][]*toxiproxy.Proxy{}
	r.defer_(func() {
		for _, ps := range r.proxies {
			for _, p := range ps {
				p.Stop()
			}
		}
	})
	for i := range r.sc.Replicas {
		id := fmt.Sprintf("r%d", i+1)
		leaseDSN, err := r.proxy(id, "lease", r.leaseEP.DSN)
		if err != nil {
			return err
		}
		workDSN := leaseDSN
		if r.workEP.DSN != r.leaseEP.DSN {
			if workDSN, err = r.proxy(id, "work", r.workEP.DSN); err != nil {
				return err
			}
		}
		spec := replicaSpec{
			Replica:      id,
			Strategy:     r.sc.Strategy,
			LeaseName:    "doublerun-" + r.sc.Name,
			LeaseDSN:     leaseDSN,
			WorkDSN:      workDSN,
			OracleDSN:    r.direct.DSN,
			PollInterval: r.sc.PollInterval,
			Work:         r.sc.Work,
			TTL:          r.sc.TTL,
			Unfenced:     r.sc.Unfenced,
		}
		if err := r.startReplica(ctx, spec); err != nil {
			return err
		}
	}
	return nil
}

// proxy starts a toxiproxy proxy for replica in front of dsn's server and
// returns dsn pointed at it, so a fault can cut one replica's path alone.
func (r *run) proxy(replica, role, dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	p := toxiproxy.NewProxy(r.toxics, replica+"-"+role, "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("start proxy for %s: %w", replica, err)
	}
	r.proxies[replica] = append(r.proxies[replica], p)
	u.Host = p.Listen
	return u.String(), nil
}

func (r *run) startReplica(_ context.Context, spec replicaSpec) error {
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	logPath := filepath.Join(r.dir, "replicas", spec.Replica+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	var args []string
	if isTestBinary() {
		args = []string{"-test.run=^$"}
	}
	cmd := exec.Command(r.exe, args...)
	cmd.Env = append(os.Environ(), envReplica+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group so faults can signal one replica alone; Pdeathsig
	// so no replica outlives a runner that is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start replica %s: %w", spec.Replica, err)
	}
	rp := &replica{id: spec.Replica, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		rp.err = cmd.Wait()
		logf.Close()
		close(rp.done)
	}()
	r.mu.Lock()
	r.replicas = append(r.replicas, rp)
	r.mu.Unlock()
	if r.opts.onReplica != nil {
		r.opts.onReplica(cmd.Process.Pid)
	}
	return nil
}

// waitForLeader waits for the first piece of leader work and starts the
// measurement there, so start-up time is not counted as leaderless.
func (r *run) waitForLeader(ctx context.Context) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		led, err := oracle.AnyWork(ctx, r.conn)
		if err != nil {
			return time.Time{}, err
		}
		if led {
			return oracle.LogEvent(ctx, r.conn, oracle.EventMeasureStart, "", "")
		}
		r.mu.Lock()
		for _, rp := range r.replicas {
			select {
			case <-rp.done:
				r.mu.Unlock()
				return time.Time{}, fmt.Errorf("replica %s exited before any leader work (%v); its log: %s%s", rp.id, rp.err, rp.log, tailFile(rp.log))
			default:
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			hint := ""
			if isTestBinary() {
				hint = "; a test binary must call scenarios.MaybeRunReplica() first in TestMain"
			}
			return time.Time{}, fmt.Errorf("no replica became leader within 30s%s; replica logs in %s", hint, filepath.Join(r.dir, "replicas"))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopReplicas asks every replica to stop, then kills those that do not.
func (r *run) stopReplicas(ctx context.Context) {
	r.mu.Lock()
	reps := append([]*replica(nil), r.replicas...)
	r.mu.Unlock()
	for _, rp := range reps {
		_ = rp.cmd.Process.Signal(syscall.SIGCONT) // a frozen replica cannot stop
		_ = rp.cmd.Process.Signal(syscall.SIGTERM)
	}
	timeout := time.After(15 * time.Second)
	for _, rp := range reps {
		select {
		case <-rp.done:
		case <-timeout:
			_, _ = oracle.LogEvent(context.WithoutCancel(ctx), r.conn, oracle.EventReplicaKilled, rp.id, "did not stop within 15s")
			_ = rp.cmd.Process.Kill()
			<-rp.done
		}
	}
}

func (r *run) defer_(f func()) { r.cleanups = append(r.cleanups, f) }

// cleanup kills any replica still running and undoes prepare, in reverse.
func (r *run) cleanup() {
	r.mu.Lock()
	reps := append([]*replica(nil), r.replicas...)
	r.mu.Unlock()
	for _, rp := range reps {
		select {
		case <-rp.done:
		default:
			_ = rp.cmd.Process.Kill()
			<-rp.done
		}
	}
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	if r.tempDir {
		_ = os.RemoveAll(r.dir)
	}
}

func tailFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return "\n" + string(data)
}
