package fault

import (
	"context"
	"time"
)

// ---------------------------------------------------------------------------
// PRIMARY_FAILOVER

// PrimaryFailover kills the primary outright (every process of it, or its
// container), promotes the standby with pg_promote() and repoints the
// stack's address, as RDS Multi-AZ, Patroni or CloudNativePG do when the
// primary's machine is lost. Every session ends at once, advisory locks
// with them (a standby has none), and in async mode whatever the standby
// had not received is lost with the primary (see failover.go).
var PrimaryFailover Fault = primaryFailover{}

type primaryFailover struct{}

func (primaryFailover) Name() string           { return "PRIMARY_FAILOVER" }
func (primaryFailover) Timeout() time.Duration { return failoverTimeout }

// Available: a stack with a standby, in either mode.
func (primaryFailover) Available(s Setting) bool { return s.Replication != "" }

func (primaryFailover) Inject(ctx context.Context, t Target) error {
	l, err := strike(ctx, t)
	if err != nil {
		return err
	}
	return failOver(ctx, t, l.ID, "SIGKILL", t.Stack().KillPrimary)
}
