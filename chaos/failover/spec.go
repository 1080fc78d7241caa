package failover

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Strategies are the strategies a failover is measured for, named as
// package scenarios/strategy names them, in table order: lease.Advisory polled
// with TryAcquire (strategy.Advisory), lease.Advisory with Wait
// called through Acquire (strategy.AdvisoryWait), lease.Fenced polled
// (strategy.Fenced), and lease.Fenced with Wait called through Acquire
// (strategy.FencedWait).
var Strategies = []string{strategy.Advisory, strategy.AdvisoryWait, strategy.Fenced, strategy.FencedWait}

// Spec is one replica's lease, in a form that can be handed to a child
// process as JSON.
type Spec struct {
	// Strategy is one of Strategies; a -wait strategy is the lease with
	// Wait set, called through Acquire.
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

// Waits reports whether the strategy waits in Acquire.
func (s Spec) Waits() bool { return strings.HasSuffix(s.Strategy, "-wait") }

// AppName is the lease connection's application_name, by which a trial
// finds the leader's backend.
func (s Spec) AppName() string { return s.Name + "-" + s.Holder }

// CheckStrategy returns nil for a strategy of Strategies, else an error
// that lists them.
func CheckStrategy(name string) error {
	if slices.Contains(Strategies, name) {
		return nil
	}
	return fmt.Errorf("unknown strategy %q; valid: %s", name, strings.Join(Strategies, ", "))
}

// NewLease builds the lease s describes, logging to log (nil discards).
// The polled advisory lease accepts a transaction pool, as BenchmarkPoll
// in package lease measures #556 there; a waiting one is refused there.
func NewLease(ctx context.Context, s Spec, log *slog.Logger) (lease.Lease, error) {
	switch strings.TrimSuffix(s.Strategy, "-wait") {
	case strategy.Advisory:
		return lease.NewAdvisory(ctx, lease.AdvisoryConfig{
			DSN: s.DSN, Name: s.Name, Holder: s.Holder, Key2: s.Key, ApplicationName: s.AppName(),
			AllowTransactionPooling: !s.Waits(), Wait: s.Waits(), Logger: log,
		})
	case strategy.Fenced:
		return lease.NewFenced(ctx, lease.FencedConfig{
			DSN: s.DSN, Name: s.Name, Holder: s.Holder, ApplicationName: s.AppName(), TTL: s.TTL,
			Wait: s.Waits(), Logger: log,
		})
	}
	return nil, CheckStrategy(s.Strategy)
}

// Call is one call of a replica: Acquire for a waiting strategy,
// TryAcquire otherwise.
func (s Spec) Call(ctx context.Context, l lease.Lease) (lease.Result, error) {
	if s.Waits() {
		return l.(lease.Acquirer).Acquire(ctx)
	}
	return l.TryAcquire(ctx)
}
