package scenarios

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// Fault is one entry of the chaos catalog, in the etcd robustness style.
// Faults live in package chaos, which registers them with RegisterFault;
// the runner injects a scenario's fault once a third of its measurement
// has passed.
type Fault interface {
	// Name is the fault's ACTION_TARGET name, such as KILL_LEADER.
	Name() string
	// Available reports whether the fault means something for sc (a
	// PgBouncer fault on the direct topology does not).
	Available(sc Scenario) bool
	// Inject applies the fault to t and recovers from it before it
	// returns: a frozen replica is resumed, a partition healed.
	Inject(ctx context.Context, t Target) error
}

// FaultTimeout is implemented by faults that need longer than the default
// minute to inject and recover.
type FaultTimeout interface {
	Timeout() time.Duration
}

// Target is what a fault acts on during a run.
type Target interface {
	// Scenario is the scenario being run, defaults applied.
	Scenario() Scenario
	// Stack is the stack the run uses.
	Stack() *stack.Stack
	// LeaseEndpoint and WorkEndpoint are the endpoints the topology gives,
	// pointed at the run's database (before the replicas' proxies).
	LeaseEndpoint() stack.Endpoint
	WorkEndpoint() stack.Endpoint
	// Leader returns the replica that most recently started leader work.
	Leader(ctx context.Context) (Replica, error)
	// Replicas lists the run's replicas.
	Replicas() []Replica
	// Proxies returns the toxiproxy proxies between replica and its
	// endpoints (one per distinct endpoint).
	Proxies(replica string) []*toxiproxy.Proxy
	// Event logs an event on the oracle's clock, such as the moment a
	// fault really took hold.
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

var faults = struct {
	sync.Mutex
	m map[string]Fault
}{m: map[string]Fault{}}

// NoFault is the name of the absent fault.
const NoFault = "none"

// RegisterFault adds f to the faults scenarios can name. Registering a name
// twice panics.
func RegisterFault(f Fault) {
	faults.Lock()
	defer faults.Unlock()
	if _, dup := faults.m[f.Name()]; dup || f.Name() == NoFault {
		panic(fmt.Sprintf("scenarios: fault %q registered twice", f.Name()))
	}
	faults.m[f.Name()] = f
}

func lookupFault(name string) (Fault, bool) {
	faults.Lock()
	defer faults.Unlock()
	f, ok := faults.m[name]
	return f, ok
}

// FaultNames lists "none" and every registered fault.
func FaultNames() []string {
	faults.Lock()
	defer faults.Unlock()
	names := []string{NoFault}
	for n := range faults.m {
		names = append(names, n)
	}
	slices.Sort(names[1:])
	return names
}
