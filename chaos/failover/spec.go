package failover

import (
	"context"
	"log/slog"
	"time"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Strategies are the strategies a failover is measured for unless
// Config.Strategies names others, in table order, named as the strategy
// registry (package scenarios/strategy) names them: lease.Advisory
// polled with TryAcquire (strategy.Advisory), lease.Advisory with Wait
// called through Acquire (strategy.AdvisoryWait), lease.Fenced polled
// (strategy.Fenced), and lease.Fenced with Wait called through Acquire
// (strategy.FencedWait).
var Strategies = []string{strategy.Advisory, strategy.AdvisoryWait, strategy.Fenced, strategy.FencedWait}

// Spec is one replica's lease, in a form that can be handed to a child
// process as JSON.
type Spec struct {
	// Strategy names a strategy of the registry (package
	// scenarios/strategy), whose New builds the lease.
	Strategy string `json:"strategy"`
	DSN      string `json:"dsn"`
	// Name is the lease's name, the same for every replica of a trial.
	Name   string `json:"name"`
	Holder string `json:"holder"`
	// Key is the advisory lock's second key, one per trial.
	Key int32 `json:"key"`
	// TTL is Fenced's; 0 for its default.
	TTL time.Duration `json:"ttl"`
	// Poll is a replica's pace: it starts its next call Poll after the
	// last one started, or at once when the call took longer, as a
	// waiting follower's does. A wait is bounded by the lease's default
	// WaitTimeout (1s).
	Poll time.Duration `json:"poll"`
}

// As returns s for the replica holder.
func (s Spec) As(holder string) Spec { s.Holder = holder; return s }

// AppName is the lease connection's application_name, by which a trial
// finds the leader's backend.
func (s Spec) AppName() string { return s.Name + "-" + s.Holder }

// lease builds the lease s describes through the strategy registry,
// logging to log (nil discards). An advisory lease locks a key of the
// trial's own (Key), so that no trial contends with what another left,
// and a waiting lease waits at most its own default bound (PollInterval
// left 0), not the poll.
func (s Spec) lease(ctx context.Context, log *slog.Logger) (lease.Lease, error) {
	st, ok := strategy.Lookup(s.Strategy)
	if !ok {
		return nil, strategy.Check(s.Strategy)
	}
	return st.New(ctx, strategy.LeaseConfig{
		Replica: s.Holder, Name: s.Name, DSN: s.DSN, TTL: s.TTL, Logger: log, ApplicationName: s.AppName(),
		AdvisoryLock: &lease.AdvisoryLock{Key1: lease.DefaultAdvisoryLock.Key1, Key2: s.Key},
	})
}

// call is one call of a replica: Acquire for a lease that has it (a
// waiting strategy's lease waits there; any other answers as TryAcquire
// does), TryAcquire otherwise.
func call(ctx context.Context, l lease.Lease) (lease.Result, error) {
	if a, ok := l.(lease.Acquirer); ok {
		return a.Acquire(ctx)
	}
	return l.TryAcquire(ctx)
}
