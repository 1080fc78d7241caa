package fault

import (
	"context"
	"time"
)

// ---------------------------------------------------------------------------
// SWITCHOVER

// Switchover is the planned failover: a fast shutdown of the primary,
// which rolls back open transactions and hands the standby every WAL
// record it wrote before it exits, then the promotion and the repoint,
// as a maintenance window or a Patroni switchover does. Nothing
// acknowledged is lost, in either mode; every session still ends.
var Switchover Fault = switchover{}

type switchover struct{}

func (switchover) Name() string           { return "SWITCHOVER" }
func (switchover) Timeout() time.Duration { return failoverTimeout }

// Available: a stack with a standby, in either mode.
func (switchover) Available(s Setting) bool { return s.Replication != "" }

func (switchover) Inject(ctx context.Context, t Target) error {
	l, err := strike(ctx, t)
	if err != nil {
		return err
	}
	return failOver(ctx, t, l.ID, "fast shutdown", t.Stack().ShutdownPrimary)
}
