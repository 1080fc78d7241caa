package fault

import (
	"context"
	"fmt"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// Fault is one entry of the catalog, in the etcd robustness style.
//
// A fault may also have
//
//	Timeout() time.Duration     when Inject needs longer than DefaultTimeout
//	Holds(Setting) time.Duration when it holds the leader in its grip for a
//	                             while after it strikes (see HeldFor)
type Fault interface {
	// Name is the fault's ACTION_TARGET name, such as KILL_LEADER.
	Name() string
	// Available reports whether the fault means something for a run in
	// setting s (a PgBouncer fault on the direct topology does not).
	Available(s Setting) bool
	// Inject applies the fault to t and recovers from it before it
	// returns: a frozen replica is resumed, a partition healed.
	Inject(ctx context.Context, t Target) error
}

// Setting is what a fault may know of the run it strikes, as data: the
// traits of the run's lease strategy, the shape of its topology and its
// timings. The runner fills it in from the scenario.
type Setting struct {
	// ReportsBackendPID says the strategy's lease reports the Postgres
	// backend that holds it, as lease.LockHolder's BackendPID does, so a
	// Replica's LeaseBackendPID can be set.
	ReportsBackendPID bool
	// AdvisoryLock is the session advisory lock that is the strategy's
	// leadership; nil when its lease holds none.
	AdvisoryLock *lease.AdvisoryLock
	// Pooled says the run's work goes through PgBouncer (every topology but
	// direct).
	Pooled bool
	// AppNames says the replicas' connections carry application_name
	// AppName(replica), as a replica command's do, so a fault can find
	// their backends in pg_stat_activity.
	AppNames bool
	// TTL is the lease's TTL, Work the length of one piece of leader work.
	TTL, Work time.Duration
	// Replication is the mode of the run's stack when it has a standby
	// to fail over to (stack.Options.Replication), empty when it has
	// none: the failover faults apply only then.
	Replication stack.ReplicationMode
}

// AppName is the application_name of a replica command's connections,
// by which pg_stat_activity shows its backends.
func AppName(replica string) string { return "doublerun-" + replica }

// Target is what a fault acts on during a run: the runner's side of it.
type Target interface {
	// Setting is the run's setting, defaults applied.
	Setting() Setting
	// Stack is the stack the run uses.
	Stack() *stack.Stack
	// Database is the name of the run's own database, to which every
	// endpoint points and every admin-console command is scoped.
	Database() string
	// Direct is Postgres itself, pointed at the run's database: no bouncer
	// and no proxy in between.
	Direct() stack.Endpoint
	// LeaseEndpoint and WorkEndpoint are the endpoints the topology gives,
	// pointed at the run's database (before the replicas' proxies).
	LeaseEndpoint() stack.Endpoint
	WorkEndpoint() stack.Endpoint
	// Leader returns the replica that most recently began leader work.
	Leader(ctx context.Context) (Replica, error)
	// Replicas lists the run's replicas.
	Replicas() []Replica
	// Proxies returns the toxiproxy proxies between replica and its
	// endpoints (one per distinct endpoint).
	Proxies(replica string) []*toxiproxy.Proxy
	// Event logs an event on the oracle's clock, such as the moment a
	// fault really took hold (kind oracle.EventChaos).
	Event(ctx context.Context, kind, replica, detail string) error
	// Killed records that replica was killed outright, so its unfinished
	// work ends there.
	Killed(ctx context.Context, replica string) error
}

// Replica is one replica process as a fault sees it.
type Replica struct {
	ID  string
	PID int
	// LeaseBackendPID is the Postgres backend that held the replica's lease
	// during its latest piece of work, when the strategy reports it.
	LeaseBackendPID int32
}

// All is the catalog, in the order the matrix and its tables list it. Each
// fault is an exported value on an unexported type, in the style of etcd's
// robustness failpoints, in the file of what it acts on: process.go,
// network.go, pgbouncer.go, postgres.go, and a file each for the
// failovers (failover.go).
var All = []Fault{
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
	PrimaryFailover,
	PrimaryFailoverLossy,
	Switchover,
}

// None is the name of the absent fault: a scenario with it runs
// undisturbed.
const None = "none"

// Names lists the catalog's names in the order of All.
func Names() []string {
	names := make([]string, len(All))
	for i, f := range All {
		names[i] = f.Name()
	}
	return names
}

// Lookup finds the fault of the catalog called name; it reports false for
// None and for a name the catalog does not have (CheckName tells which).
func Lookup(name string) (Fault, bool) {
	for _, f := range All {
		if f.Name() == name {
			return f, true
		}
	}
	return nil, false
}

// CheckName returns nil for None and for every name of the catalog, and
// otherwise an error that lists the valid names.
func CheckName(name string) error {
	if _, ok := Lookup(name); ok || name == None {
		return nil
	}
	return fmt.Errorf("unknown fault %q; valid: %s, %s", name, None, strings.Join(Names(), ", "))
}

// DefaultTimeout bounds a fault's Inject, recovery included, unless the
// fault has a Timeout method.
const DefaultTimeout = time.Minute

// TimeoutOf is how long the runner lets f inject and recover.
func TimeoutOf(f Fault) time.Duration {
	if t, ok := f.(interface{ Timeout() time.Duration }); ok {
		return t.Timeout()
	}
	return DefaultTimeout
}

// HeldFor is how long f holds the leader in its grip once it has struck,
// in a run of setting s: Hold(s) for the freeze, the partition, the delay
// and the pause, none for a fault that strikes and is done. A measurement
// must last that long after the fault, and then long enough for the
// failover to show.
func HeldFor(f Fault, s Setting) time.Duration {
	if h, ok := f.(interface{ Holds(Setting) time.Duration }); ok {
		return h.Holds(s)
	}
	return 0
}

// Hold is how long a holding fault lasts in a run of setting s: the TTL
// plus half of it (at least 500ms), so a lease with a TTL has certainly
// expired, and the matrix stays as fast as the TTL allows.
func Hold(s Setting) time.Duration { return s.TTL + max(s.TTL/2, 500*time.Millisecond) }
