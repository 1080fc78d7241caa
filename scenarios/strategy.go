package scenarios

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/lease"
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
	// Logger goes to the replica's log file.
	Logger *slog.Logger
}

// Strategy builds the leases of one strategy.
type Strategy struct {
	// New builds one replica's lease. Required.
	New func(ctx context.Context, cfg LeaseConfig) (lease.Lease, error)
	// Setup, if set, runs once per run before any replica starts, on a
	// direct connection to the run's database (to create tables).
	Setup func(ctx context.Context, conn *pgx.Conn) error
}

var strategies = struct {
	sync.Mutex
	m map[string]Strategy
}{m: map[string]Strategy{
	"advisory": {New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
		return lease.NewAdvisory(ctx, advisoryConfig(c, false))
	}},
	"advisory-unguarded": {New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
		return lease.NewAdvisory(ctx, advisoryConfig(c, true))
	}},
	"fenced": {
		New: func(ctx context.Context, c LeaseConfig) (lease.Lease, error) {
			return lease.NewFenced(ctx, lease.FencedConfig{DSN: c.DSN, Name: c.Name, Holder: c.Replica, TTL: c.TTL, Logger: c.Logger})
		},
		Setup: func(ctx context.Context, conn *pgx.Conn) error { return lease.MigrateFenced(ctx, conn, "") },
	},
}}

// advisoryConfig lets the advisory lease run through transaction pooling:
// measuring what happens there is the point of the scenarios.
func advisoryConfig(c LeaseConfig, unguarded bool) lease.AdvisoryConfig {
	return lease.AdvisoryConfig{
		DSN: c.DSN, Name: c.Name, Holder: c.Replica, Logger: c.Logger,
		DisablePIDGuard: unguarded, AllowTransactionPooling: true,
	}
}

// RegisterStrategy makes a lease of the user's own available to scenarios
// under name. Replicas are this same binary started again, so register in
// main or TestMain before calling MaybeRunReplica; registering a name twice
// panics.
func RegisterStrategy(name string, s Strategy) {
	strategies.Lock()
	defer strategies.Unlock()
	if _, dup := strategies.m[name]; dup {
		panic(fmt.Sprintf("scenarios: strategy %q registered twice", name))
	}
	if s.New == nil {
		panic(fmt.Sprintf("scenarios: strategy %q has no New", name))
	}
	strategies.m[name] = s
}

func lookupStrategy(name string) (Strategy, bool) {
	strategies.Lock()
	defer strategies.Unlock()
	s, ok := strategies.m[name]
	return s, ok
}

// StrategyNames lists the registered strategies.
func StrategyNames() []string {
	strategies.Lock()
	defer strategies.Unlock()
	var names []string
	for n := range strategies.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
