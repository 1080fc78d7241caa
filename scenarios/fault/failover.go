package fault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// What the failover faults share: PRIMARY_FAILOVER
// (primary_failover.go), PRIMARY_FAILOVER_LOSSY
// (primary_failover_lossy.go) and SWITCHOVER (switchover.go) act on a
// stack with a standby (stack.Options.Replication, Setting.Replication)
// and differ in how the primary goes down and what the standby missed.
// Each then takes the same steps, logged on the oracle's clock as they
// happen, so a report gives each step's time:
//
//	injected  <how> of primary pg1       the instant the failover is measured from
//	chaos     primary pg1 down           the kill or the shutdown returned
//	chaos     pg2 promoted, timeline 2   pg_promote() returned
//	chaos     address leads to pg2       the stack's router was repointed
//	chaos     first statement on ...     through the run's work endpoint
//
// A failover cannot be undone: the pair is left with one server, the
// promoted standby, which the stack's address and its bouncers lead to.
// That is the fault's recovery: the service is back, on the new primary.

// failoverTimeout bounds a failover fault's Inject: a promotion, and a
// PgBouncer that refuses its pool for server_login_retry (15 s) after
// the logins that failed while the primary was down.
const failoverTimeout = 3 * time.Minute

// failOver takes the primary down with down (how names it), then promotes
// the standby, repoints the stack's address and waits for the first
// statement on the new primary through the run's work endpoint, logging
// each step. leader is the replica the fault struck at.
func failOver(ctx context.Context, t Target, leader, how string, down func(context.Context) error) error {
	s := t.Stack()
	if s.Provider() == stack.ProviderExternal {
		return externalFailOver(ctx, t, leader)
	}
	primary, standby, err := pair(s)
	if err != nil {
		return err
	}
	injected(ctx, t, leader, "%s of primary %s", how, primary)
	began := time.Now()
	if err := down(ctx); err != nil {
		return fmt.Errorf("%s primary %s: %w", how, primary, err)
	}
	event(ctx, t, "", "primary %s down, %s after the %s", primary, since(began), how)
	if err := s.Promote(ctx); err != nil {
		return fmt.Errorf("promote %s: %w", standby, err)
	}
	tl, err := s.Timeline(ctx, standby)
	if err != nil {
		return err
	}
	event(ctx, t, "", "%s promoted, timeline %d, %s after the %s", standby, tl, since(began), how)
	if err := s.Repoint(ctx); err != nil {
		return fmt.Errorf("repoint to %s: %w", standby, err)
	}
	event(ctx, t, "", "address leads to %s, %s after the %s", standby, since(began), how)
	ep := t.WorkEndpoint()
	at, err := s.WaitPrimary(ctx, ep.DSN)
	if err != nil {
		return fmt.Errorf("no statement through %s reached the new primary %s: %w", ep.Name, standby, err)
	}
	event(ctx, t, "", "first statement on the new primary through %s, %s after the %s", ep.Name, at.Sub(began).Round(time.Millisecond), how)
	return nil
}

// pair names the stack's primary and its standby, or says why the stack
// cannot fail over.
func pair(s *stack.Stack) (primary, standby string, err error) {
	r, ok := s.Replication()
	if !ok {
		return "", "", errors.New("a failover fault needs a stack with a standby (stack.Options.Replication)")
	}
	var roles []string
	for _, n := range r.Nodes {
		roles = append(roles, n.Name+" "+string(n.Role))
		switch n.Role {
		case stack.RolePrimary:
			primary = n.Name
		case stack.RoleStandby:
			standby = n.Name
		}
	}
	if primary == "" || standby == "" {
		return "", "", fmt.Errorf("the stack's pair has no primary and standby left (%s): it failed over already", strings.Join(roles, ", "))
	}
	return primary, standby, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
