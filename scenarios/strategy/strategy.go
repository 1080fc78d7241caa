// Package strategy names the lease implementations a scenario can run,
// says what each one is (the traits the fault catalog reads), and builds
// their leases: the registry that the runner (package scenarios), a
// replica process (package scenarios/replica), the chaos matrix and the
// failover trials (package chaos/failover) all build leases through. It
// imports only package lease, so that every one of them can import it.
//
// The built-in strategies are [Advisory], [AdvisoryUnguarded],
// [AdvisoryWait], [Fenced], [FencedWait] and [FencedEpoch]; a lease of
// the user's own joins them with [Register]. Replicas are this same binary started
// again, so a strategy is registered in main or TestMain, before
// reexec.Main (package scenarios/reexec).
package strategy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/lease"
)

// The built-in strategies' names.
const (
	// Advisory is lease.Advisory, the original session advisory
	// lock with its backend-PID guard.
	Advisory = "advisory"
	// AdvisoryUnguarded is lease.Advisory without the guard, to
	// show what the guard does.
	AdvisoryUnguarded = "advisory-unguarded"
	// AdvisoryWait is lease.Advisory with Wait: a follower waits
	// in pg_advisory_lock and leads the moment the server frees the lock.
	// It refuses a transaction-pooled lease endpoint.
	AdvisoryWait = "advisory-wait"
	// Fenced is lease.Fenced, the table lease with a TTL and a
	// fencing token.
	Fenced = "fenced"
	// FencedWait is lease.Fenced with Wait: on a direct endpoint
	// a release's NOTIFY wakes a waiting follower; through PgBouncer it
	// polls as Fenced does (lease.Fenced.Waits).
	FencedWait = "fenced-wait"
	// FencedEpoch is lease.Fenced with Epoch: every token carries the
	// server's timeline, so tokens keep rising across a promotion that
	// lost the last grants, and the fence refuses a term of an earlier
	// timeline (lease.FencedConfig.Epoch). Its token table is its own, so
	// a run's grants of both kinds never share a row.
	FencedEpoch = "fenced-epoch"
)

// LeaseConfig is what a strategy gets to build one replica's lease.
type LeaseConfig struct {
	// Replica identifies the replica; use it as the lease holder.
	Replica string
	// Name is the lease's name, the same for every replica of a run.
	Name string
	// DSN is the lease endpoint the topology gives (for pinned, the
	// session-pinned one).
	DSN string
	// TTL is the scenario's TTL for leases that have one.
	TTL time.Duration
	// PollInterval is the worker's poll interval; a lease that waits in
	// Acquire may wait about as long. 0 leaves a waiting lease's bound on
	// one wait at its own default (1s), as the failover trials do.
	PollInterval time.Duration
	// Logger goes to the replica's log file.
	Logger *slog.Logger
	// ApplicationName is the lease connection's application_name when the
	// lease runs as a replica command (DOUBLERUN_APPLICATION_NAME), so
	// that the runner sees its backends as the replica's; empty keeps the
	// lease's own.
	ApplicationName string
	// AdvisoryLock, when set, is the lock a built-in advisory lease takes
	// instead of its strategy's (Strategy.AdvisoryLock): for a caller that
	// runs leases of one strategy one after another, each with a lock of
	// its own, as the failover trials do. A scenario leaves it nil, so that
	// the runner watches the lock the strategy declares.
	AdvisoryLock *lease.AdvisoryLock
}

// Strategy builds the leases of one strategy and says what they are, so
// that the fault catalog knows which faults mean something for them.
type Strategy struct {
	// New builds one replica's lease. Required.
	New func(ctx context.Context, cfg LeaseConfig) (lease.Lease, error)
	// Setup, if set, runs once per run before any replica starts, on a
	// direct connection to the run's database (to create tables).
	Setup func(ctx context.Context, conn *pgx.Conn) error

	// ReportsBackendPID says the lease reports the Postgres backend that
	// holds it (a BackendPID() int32 method, as lease.LockHolder has); the
	// oracle then records it with each piece of work.
	ReportsBackendPID bool
	// AdvisoryLock is the session advisory lock that is the lease's
	// leadership; nil for a lease that holds none. The runner watches it
	// for the orphaned-lock window. A lease may instead declare its own by
	// implementing lease.LockHolder (AdvisoryLock and BackendPID): its
	// replicas then name the lock in their claims, and the runner watches
	// that one.
	AdvisoryLock *lease.AdvisoryLock
	// TokenTable is the table, on the run's database, in which the lease
	// keeps its fencing token: a row per lease name with a token column
	// that every grant raises (and a holder column naming the replica,
	// if it has one). Setup must create it. The runner has the server
	// record every grant and renewal in it (oracle.RecordTokens), which
	// the linearizability check of the fence needs; empty for a lease
	// whose tokens cannot be watched, whose runs are then not checked.
	TokenTable string
	// RefusesTransactionPooling says why the lease refuses a
	// transaction-pooled lease endpoint, the transaction topology's;
	// empty for a lease that takes any endpoint. A scenario of such a
	// strategy on that topology is invalid.
	RefusesTransactionPooling string
}

// waitRefusal is why lease.Advisory with Wait refuses a transaction-pooled
// endpoint.
const waitRefusal = "a waiting follower holds its server connection while it waits, so lease.Advisory with Wait refuses a transaction-pooled endpoint"

// The built-in strategies' token tables, named here so that the runner
// can watch them.
const (
	advisoryTokenTable = "doublerun_lease_tokens"
	fencedTable        = "doublerun_leases"
)

// advisory builds the built-in advisory strategies on lease.Advisory,
// whose lock is lease.DefaultAdvisoryLock. A waiting one waits for at most
// the poll interval, so a worker's cycle stays about as long as a polling
// one's.
func advisory(unguarded, wait bool) Strategy {
	lock := lease.DefaultAdvisoryLock
	s := Strategy{
		// The scenarios let the advisory lease run through transaction
		// pooling: measuring what happens there is their point. A waiting
		// one refuses it all the same.
		New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
			key := lock
			if c.AdvisoryLock != nil {
				key = *c.AdvisoryLock
			}
			return lease.NewAdvisory(ctx, lease.AdvisoryConfig{
				DSN: c.DSN, Name: c.Name, Holder: c.Replica, Logger: c.Logger, ApplicationName: c.ApplicationName,
				Key1: key.Key1, Key2: key.Key2, TokenTable: advisoryTokenTable,
				DisablePIDGuard: unguarded, AllowTransactionPooling: true,
				Wait: wait, WaitTimeout: c.PollInterval,
			})
		},
		// lease.NewAdvisory creates its token table; one built on the
		// runner's direct connection does it before any replica starts,
		// so the runner can watch the table from the first grant on (and
		// no two replicas race to create it).
		Setup: func(ctx context.Context, conn *pgx.Conn) error {
			l, err := lease.NewAdvisory(ctx, lease.AdvisoryConfig{DSN: conn.Config().ConnString(), Name: "doublerun-setup",
				Holder: "runner", TokenTable: advisoryTokenTable})
			if err != nil {
				return err
			}
			return l.Close(ctx)
		},
		ReportsBackendPID: true,
		AdvisoryLock:      &lock,
		TokenTable:        advisoryTokenTable,
	}
	// Caught by TestStrategyRefusalMatchesTheLease/advisory-wait.
	if wait {
		s.RefusesTransactionPooling = waitRefusal
	}
	return s
}

var strategies = struct {
	sync.Mutex
	m map[string]Strategy
}{m: map[string]Strategy{
	Advisory:          advisory(false, false),
	AdvisoryUnguarded: advisory(true, false),
	AdvisoryWait:      advisory(false, true),
	Fenced: {
		New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
			return lease.NewFenced(ctx, lease.FencedConfig{DSN: c.DSN, Name: c.Name, Holder: c.Replica, TTL: c.TTL, Logger: c.Logger, Table: fencedTable,
				ApplicationName: c.ApplicationName})
		},
		Setup:      func(ctx context.Context, conn *pgx.Conn) error { return lease.MigrateFenced(ctx, conn, fencedTable) },
		TokenTable: fencedTable,
	},
	FencedWait:  fencedWait(),
	FencedEpoch: fencedEpoch(),
}}

// fencedEpochTable is fenced-epoch's token table.
const fencedEpochTable = "doublerun_epoch_leases"

// fencedEpoch is lease.Fenced with Epoch.
func fencedEpoch() Strategy {
	return Strategy{
		New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
			return lease.NewFenced(ctx, lease.FencedConfig{DSN: c.DSN, Name: c.Name, Holder: c.Replica, TTL: c.TTL, Logger: c.Logger,
				Table: fencedEpochTable, Epoch: true, ApplicationName: c.ApplicationName})
		},
		Setup: func(ctx context.Context, conn *pgx.Conn) error {
			return lease.MigrateFenced(ctx, conn, fencedEpochTable)
		},
		TokenTable: fencedEpochTable,
	}
}

// fencedWait is lease.Fenced with Wait. A follower waits in Acquire for
// at most the poll interval, as advisory-wait's does.
func fencedWait() Strategy {
	return Strategy{
		New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
			return lease.NewFenced(ctx, lease.FencedConfig{DSN: c.DSN, Name: c.Name, Holder: c.Replica, TTL: c.TTL, Logger: c.Logger,
				Wait: true, WaitTimeout: c.PollInterval, ApplicationName: c.ApplicationName})
		},
		Setup: func(ctx context.Context, conn *pgx.Conn) error { return lease.MigrateFenced(ctx, conn, "") },
	}
}

// BuiltIn reports whether name is one of doublerun's own strategies, which
// every binary built from this module registers: its replicas need not be
// this binary (reexec.Executable), where a strategy a binary registers
// itself is known to that binary alone.
func BuiltIn(name string) bool {
	return slices.Contains([]string{Advisory, AdvisoryUnguarded, AdvisoryWait, Fenced, FencedWait, FencedEpoch}, name)
}

// Register makes a lease of the user's own available to scenarios
// under name. Replicas are this same binary started again, so register in
// main or TestMain before calling reexec.Main; registering a name twice
// panics.
func Register(name string, s Strategy) {
	strategies.Lock()
	defer strategies.Unlock()
	if _, dup := strategies.m[name]; dup {
		panic(fmt.Sprintf("strategy: %q registered twice", name))
	}
	if s.New == nil {
		panic(fmt.Sprintf("strategy: %q has no New", name))
	}
	strategies.m[name] = s
}

// Lookup is the strategy registered as name, and whether there is one.
func Lookup(name string) (Strategy, bool) {
	strategies.Lock()
	defer strategies.Unlock()
	s, ok := strategies.m[name]
	return s, ok
}

// Check returns nil for a registered strategy, and otherwise an error that
// lists the registered ones.
func Check(name string) error {
	if _, ok := Lookup(name); ok {
		return nil
	}
	return fmt.Errorf("unknown strategy %q; valid: %s", name, strings.Join(Names(), ", "))
}

// TokenTable is the token table of the strategy registered as name,
// empty for one that has none or is not registered in this binary: a
// report of a run of a strategy with one holds the grants the runner
// recorded there.
func TokenTable(name string) string {
	s, _ := Lookup(name)
	return s.TokenTable
}

// Names lists the registered strategies, sorted.
func Names() []string {
	strategies.Lock()
	defer strategies.Unlock()
	var names []string
	for n := range strategies.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
