package scenarios

// What a run prepares before any replica starts: a directory for their
// logs, the run's database, its lease and work endpoints by topology, and
// the oracle's tables there.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// prepare makes what the replicas need: a directory for their logs, the
// run's database with its endpoints, and the oracle there.
func (r *run) prepare(ctx context.Context) error {
	if err := r.logDir(); err != nil {
		return err
	}
	s := r.opts.Stack
	var err error
	if r.db, err = s.CreateDatabase(ctx, "run_"); err != nil {
		return err
	}
	if !r.opts.Keep {
		r.defer_(func() { _ = s.DropDatabase(context.Background(), r.db) })
	}
	r.direct = s.Postgres().WithDatabase(r.db)
	r.oracleEP = s.Oracle().WithDatabase(r.db)
	if err := r.checkStandby(ctx); err != nil {
		return err
	}
	if err := r.endpoints(ctx); err != nil {
		return err
	}
	if err := r.connectOracle(ctx); err != nil {
		return err
	}
	if rep, err := lease.CheckEndpoint(ctx, r.leaseEP.DSN); err == nil {
		r.leaseCheck = rep.String()
	} else {
		r.leaseCheck = "check failed: " + err.Error()
	}
	return nil
}

// logDir makes OutDir/<scenario>/replicas, or a temp dir when there is no
// OutDir.
func (r *run) logDir() error {
	if r.opts.OutDir != "" {
		r.dir = filepath.Join(r.opts.OutDir, r.sc.Name)
	} else {
		// With an owner file: a run killed outright leaves it to the
		// next stack's sweep.
		dir, err := stack.TempDir()
		if err != nil {
			return err
		}
		r.dir, r.tempDir = dir, true
	}
	return os.MkdirAll(filepath.Join(r.dir, "replicas"), 0o755)
}

// endpoints picks the lease and work endpoints for the topology, starting
// a transaction pool of the run's own when the stack's has another size.
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
	if r.sc.Topology.Kind == Alias {
		return r.aliasEndpoints(ctx)
	}
	tx := s.Transaction()
	if tx.PoolSize != r.sc.Topology.PoolSize {
		name := "run-" + strings.TrimPrefix(r.db, "run_")
		ep, err := s.AddPgBouncer(ctx, name, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: r.sc.Topology.PoolSize})
		if err != nil {
			return fmt.Errorf("start a transaction pool of %d: %w", r.sc.Topology.PoolSize, err)
		}
		r.defer_(func() { _ = s.RemovePgBouncer(context.Background(), name) })
		tx = ep
	}
	tx = tx.WithDatabase(r.db)
	r.workEP, r.leaseEP = tx, tx
	if r.sc.Topology.Kind == Pinned {
		r.leaseEP = s.Session().WithDatabase(r.db)
	}
	return nil
}

// aliasLeasePoolSize is the pool of the alias topology's lease name: a
// session-pooled server connection per connected lease client, and room
// for the endpoint checks of MaxReplicas replicas starting at once, as the
// stack's session bouncer has.
const aliasLeasePoolSize = 20

// aliasLeaseSuffix names the alias topology's lease database after the run's.
const aliasLeaseSuffix = "_lease"

// aliasEndpoints starts the run's own PgBouncer serving its database under
// two names: <db>_lease in session pooling for the lease, and <db> in
// transaction pooling, with the topology's pool size, for the work. Every
// PgBouncer fault acts on it: the ones scoped to a database (PAUSE, KILL,
// RECONNECT) on the work name, a restart on both names at once.
func (r *run) aliasEndpoints(ctx context.Context) error {
	s := r.opts.Stack
	leaseName := r.db + aliasLeaseSuffix
	cfg := pgbouncer.Config{
		PoolMode:        pgbouncer.PoolTransaction,
		DefaultPoolSize: r.sc.Topology.PoolSize,
		Databases: []pgbouncer.Database{
			{Name: leaseName, DBName: r.db, PoolSize: aliasLeasePoolSize, PoolMode: pgbouncer.PoolSession},
			{Name: r.db, PoolSize: r.sc.Topology.PoolSize, PoolMode: pgbouncer.PoolTransaction},
		},
	}
	name := "alias-" + strings.TrimPrefix(r.db, "run_")
	ep, err := s.AddPgBouncer(ctx, name, cfg)
	if err != nil {
		return fmt.Errorf("start a PgBouncer with a session-mode lease name and a transaction pool of %d: %w", r.sc.Topology.PoolSize, err)
	}
	r.defer_(func() { _ = s.RemovePgBouncer(context.Background(), name) })
	r.workEP = ep.WithDatabase(r.db)
	r.workEP.PoolMode, r.workEP.PoolSize = cfg.EffectivePoolMode(r.db, ""), r.sc.Topology.PoolSize
	r.leaseEP = ep.WithDatabase(leaseName)
	r.leaseEP.PoolMode, r.leaseEP.PoolSize = cfg.EffectivePoolMode(leaseName, ""), aliasLeasePoolSize
	return nil
}

// connectOracle opens the runner's direct pool to the run's database on
// the oracle's server and creates the oracle's tables there, and the
// strategy's where the lease is. On a stack with a standby those are two
// servers: the pair also gets the oracle's tables, for the side-effect
// writes and the token table's record, which a failover acts on.
func (r *run) connectOracle(ctx context.Context) error {
	var err error
	if r.conn, err = r.pool(ctx, r.oracleEP.DSN); err != nil {
		return err
	}
	r.pair = r.conn
	if r.sc.Standby != "" {
		if r.pair, err = r.pool(ctx, r.direct.DSN); err != nil {
			return err
		}
		if err := r.conn.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return oracle.Migrate(ctx, c.Conn()) }); err != nil {
			return err
		}
	}
	return r.pair.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if err := oracle.Migrate(ctx, c.Conn()); err != nil {
			return err
		}
		st, _ := strategy.Lookup(r.sc.Strategy)
		if st.Setup != nil {
			if err := st.Setup(ctx, c.Conn()); err != nil {
				return fmt.Errorf("strategy %s setup: %w", r.sc.Strategy, err)
			}
		}
		// Caught by TestReportFilesRoundTrip.
		if st.TokenTable != "" {
			return oracle.RecordTokens(ctx, c.Conn(), st.TokenTable)
		}
		return nil
	})
}

// pool opens a pool of the runner's to dsn, closed when the run ends.
func (r *run) pool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "doublerun-runner"
	p, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	r.defer_(p.Close)
	return p, nil
}

// checkStandby checks that the stack has the standby the scenario asks
// for, or none when it asks for none, and rebuilds the standby when an
// earlier run's failover left the pair without one.
func (r *run) checkStandby(ctx context.Context) error {
	s := r.opts.Stack
	// Your own cluster: the scenario's standby says what it is, and the
	// environment must say how to fail it over and where the oracle
	// lives. Caught by TestExternalFailoverNeedsAnOracle. The lossy
	// failover detaches doublerun's own standby, which an external
	// stack has none of: it gets the checks below, as on any stack
	// without one (TestStandbyMustMatchTheStack, on make test's shared
	// stack, which is an external one).
	if r.sc.Standby != "" && s.Provider() == stack.ProviderExternal && r.sc.Fault != fault.PrimaryFailoverLossy.Name() {
		return s.FailoverReady()
	}
	rep, ok := s.Replication()
	switch {
	case r.sc.Standby == "" && !ok:
		return nil
	case r.sc.Standby == "":
		return fmt.Errorf("scenario %s asks for one Postgres, and the stack has a %s standby; run it on a stack without (stack.Options.Replication empty)", r.sc.Name, rep.Mode)
	case !ok:
		return fmt.Errorf("scenario %s needs a stack with a %s standby, and this one has none; start it with stack.Options.Replication %q", r.sc.Name, r.sc.Standby, r.sc.Standby)
	case rep.Mode != r.sc.Standby:
		return fmt.Errorf("scenario %s needs a %s standby, and the stack's is %s; start one with stack.Options.Replication %q", r.sc.Name, r.sc.Standby, rep.Mode, r.sc.Standby)
	}
	for _, n := range rep.Nodes {
		if n.Role == stack.RoleStandby {
			return nil
		}
	}
	r.log.Info("rebuilding the standby an earlier failover took", "scenario", r.sc.Name)
	return s.RebuildStandby(ctx)
}
