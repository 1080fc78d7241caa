package stack

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// KillPrimary kills the primary outright, as a crash of its machine
// would: SIGKILL to every process of the native server at once, or a
// kill of its container. It returns once the server is gone; the stack's
// address still leads to it (until Repoint), so clients that connect get
// no answer. The primary leaves the pair (RoleDown).
func (s *Stack) KillPrimary(ctx context.Context) error {
	n, err := s.withRole("kill primary", RolePrimary)
	if err != nil {
		return err
	}
	k, ok := n.node.(interface{ kill(context.Context) error })
	if !ok {
		return fmt.Errorf("kill primary: %w", ErrNotSupported)
	}
	if err := k.kill(ctx); err != nil {
		return fmt.Errorf("kill primary %s: %w", n.name, err)
	}
	s.setRole(n, RoleDown)
	return nil
}

// ShutdownPrimary stops the primary with a fast shutdown, as a planned
// switchover does: open transactions are rolled back, and the primary
// sends its standby every WAL record it wrote, its shutdown checkpoint
// included, before it exits. The primary leaves the pair (RoleDown).
func (s *Stack) ShutdownPrimary(ctx context.Context) error {
	n, err := s.withRole("shut down primary", RolePrimary)
	if err != nil {
		return err
	}
	if err := n.node.stop(ctx); err != nil {
		return fmt.Errorf("shut down primary %s: %w", n.name, err)
	}
	s.setRole(n, RoleDown)
	return nil
}

// Promote promotes the standby with pg_promote() and returns once it
// takes writes, on a new timeline. It does not check that the old primary
// is down: a real failover fences it first, and KillPrimary or
// ShutdownPrimary does that here. The stack's address still leads to the
// old primary until Repoint.
func (s *Stack) Promote(ctx context.Context) error {
	n, err := s.withRole("promote", RoleStandby)
	if err != nil {
		return err
	}
	var ok bool
	// wait_seconds bounds it on the server as well; the answer is false
	// when the promotion did not finish in that time.
	if err := queryOn(ctx, n.ep.DSN, "SELECT pg_promote(true, 60)", &ok); err != nil {
		return fmt.Errorf("promote %s: %w", n.name, err)
	}
	if !ok {
		return fmt.Errorf("promote %s: not promoted within 60s; see its log", n.name)
	}
	s.mu.Lock()
	for _, o := range s.ha.nodes {
		if o.role == RolePrimary {
			o.role = RoleDown
		}
	}
	n.role = RolePrimary
	s.pgNode = n.node
	s.mu.Unlock()
	return nil
}

// Repoint makes the stack's address lead to the primary, as an HA
// system's floating address or DNS name follows a promotion. Every
// connection through the address is closed: a client's next statement
// fails and its next connection reaches the new primary. It does nothing
// when the address already leads there.
func (s *Stack) Repoint(ctx context.Context) error {
	n, err := s.withRole("repoint", RolePrimary)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.ha.nodes) && s.ha.nodes[i] != n {
		i++
	}
	if i == s.ha.routed {
		return nil
	}
	if err := s.ha.router.repoint(hostPort(n.ep.DSN)); err != nil {
		return fmt.Errorf("repoint to %s: %w", n.name, err)
	}
	s.ha.routed = i
	return ctx.Err()
}

// PauseReplay pauses the standby's replay with pg_wal_replay_pause(): it
// still receives and keeps the primary's WAL, but its data stays where
// it was. A promotion replays what it received first, so a paused
// standby loses nothing at a failover (TestPausedReplayIsReplayedAtPromotion);
// DetachStandby is what loses commits.
func (s *Stack) PauseReplay(ctx context.Context) error {
	return s.onStandby(ctx, "pause replay", "SELECT pg_wal_replay_pause()")
}

// ResumeReplay undoes PauseReplay.
func (s *Stack) ResumeReplay(ctx context.Context) error {
	return s.onStandby(ctx, "resume replay", "SELECT pg_wal_replay_resume()")
}

// DetachStandby stops the standby's stream: it clears primary_conninfo,
// ends the primary's WAL sender, and returns once the standby has no WAL
// receiver and the primary no WAL sender. Commits acknowledged from then
// on are on the primary alone, and a failover loses them; in sync mode
// they wait for the standby, until AttachStandby.
//
// The WAL sender is ended because clearing primary_conninfo alone does
// not stop a paused standby: its startup process restarts the WAL
// receiver only where it waits for WAL, which a paused replay never
// reaches, so the receiver would stream on
// (TestKillInAsyncModeLosesWhatTheStandbyNeverReceived). A receiver
// that loses its sender is not restarted while replay is paused, nor at
// all once primary_conninfo is empty.
func (s *Stack) DetachStandby(ctx context.Context) error {
	n, err := s.withRole("detach standby", RoleStandby)
	if err != nil {
		return err
	}
	p, err := s.withRole("detach standby", RolePrimary)
	if err != nil {
		return err
	}
	if err := execOn(ctx, n.ep.DSN, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("detach standby %s: %w", n.name, err)
	}
	return pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var receivers, senders int
		// A receiver that connected again before the standby read its
		// new configuration is ended again.
		if err := queryOn(ctx, p.ep.DSN, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication", &senders); err != nil {
			return err
		}
		if err := queryOn(ctx, n.ep.DSN, "SELECT count(*) FROM pg_stat_wal_receiver", &receivers); err != nil {
			return err
		}
		if receivers+senders > 0 {
			return fmt.Errorf("detach standby %s: %d WAL receiver(s) and %d sender(s) still ran", n.name, receivers, senders)
		}
		return nil
	})
}

// AttachStandby undoes DetachStandby: the standby connects again and
// catches up.
func (s *Stack) AttachStandby(ctx context.Context) error {
	if s.ha == nil {
		return fmt.Errorf("attach standby: %w", errNoReplication)
	}
	return s.onStandby(ctx, "attach standby", "ALTER SYSTEM SET primary_conninfo = "+quoteLiteral(s.ha.conninfo), "SELECT pg_reload_conf()")
}

// CatchUp waits until the standby has replayed everything the primary
// had written when it was called.
func (s *Stack) CatchUp(ctx context.Context) error {
	p, err := s.withRole("catch up", RolePrimary)
	if err != nil {
		return err
	}
	n, err := s.withRole("catch up", RoleStandby)
	if err != nil {
		return err
	}
	var lsn string
	if err := queryOn(ctx, p.ep.DSN, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		return fmt.Errorf("catch up: %s: %w", p.name, err)
	}
	return pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var caught bool
		if err := queryOn(ctx, n.ep.DSN, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", &caught, lsn); err != nil {
			return err
		}
		if !caught {
			return fmt.Errorf("catch up: %s has not replayed up to %s", n.name, lsn)
		}
		return nil
	})
}

// RebuildStandby makes the pair whole again after a failover: the node
// that went down is removed and cloned afresh from the primary
// (pg_basebackup -R), and follows it as its standby in the stack's mode,
// so the stack can fail over again, onto the next timeline. The rebuilt
// node's direct endpoint is new (Replication reports it); the stack's
// address stays with the primary. A chaos matrix thus fails one stack
// over cell after cell rather than starting a pair for each.
func (s *Stack) RebuildStandby(ctx context.Context) error {
	down, err := s.withRole("rebuild standby", RoleDown)
	if err != nil {
		return err
	}
	primary, err := s.withRole("rebuild standby", RolePrimary)
	if err != nil {
		return err
	}
	if err := down.node.terminate(ctx); err != nil {
		return fmt.Errorf("rebuild standby: remove %s: %w", down.name, err)
	}
	spec := nodeSpec{name: down.name, user: s.user, password: s.password, database: s.database, primary: primary}
	n, host, port, err := s.ha.backend.startNode(ctx, spec)
	if n != nil {
		s.mu.Lock()
		down.node = n
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("rebuild standby %s: %w", down.name, err)
	}
	ep := Endpoint{Name: down.name, DSN: dsn(s.user, s.password, host, port, s.database)}
	if ep.PostgresVersion, err = waitReady(ctx, ep.DSN, n); err != nil {
		return fmt.Errorf("rebuild standby %s: %w", down.name, err)
	}
	s.mu.Lock()
	down.ep, down.role = ep, RoleStandby
	s.mu.Unlock()
	return s.ha.configure(ctx, primary, down)
}

// timelineSQL is a server's timeline: a primary's from the name of the
// WAL file it writes (its first 8 hex digits), a standby's from its last
// checkpoint, since a standby writes no WAL of its own.
const timelineSQL = `SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())::bigint
ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`

// Timeline is the timeline of the node called name, PrimaryName or
// StandbyName: 1 at the start, and one more on every promotion.
func (s *Stack) Timeline(ctx context.Context, name string) (int64, error) {
	if s.ha == nil {
		return 0, fmt.Errorf("timeline: %w", errNoReplication)
	}
	s.mu.Lock()
	var n *haNode
	for _, o := range s.ha.nodes {
		if o.name == name {
			n = o
		}
	}
	s.mu.Unlock()
	if n == nil {
		return 0, fmt.Errorf("timeline: no node called %q; use %s or %s", name, PrimaryName, StandbyName)
	}
	var tl int64
	if err := queryOn(ctx, n.ep.DSN, timelineSQL, &tl); err != nil {
		return 0, fmt.Errorf("timeline of %s: %w", name, err)
	}
	return tl, nil
}

// WaitPrimary waits until a statement through dsn runs on a server that
// takes writes, and returns the instant it answered: after a failover,
// the first successful statement on the new primary through that way in.
func (s *Stack) WaitPrimary(ctx context.Context, dsn string) (time.Time, error) {
	var at time.Time
	err := pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var recovering bool
		if err := queryOn(ctx, dsn, "SELECT pg_is_in_recovery()", &recovering); err != nil {
			return err
		}
		if recovering {
			return errors.New("the server is a standby")
		}
		at = time.Now()
		return nil
	})
	return at, err
}
