package fault

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// Faults that act on PgBouncer: through its admin console, scoped to the
// run's own database, or on its process.

// withAdmin connects to the admin console of the work endpoint's bouncer
// and passes the run's database name, to which each command is scoped so a
// fault never touches another run's pools.
func withAdmin(ctx context.Context, t Target, f func(a *pgbouncer.Admin, db string) error) error {
	ep := t.WorkEndpoint()
	if _, err := strike(ctx, t); err != nil {
		return err
	}
	if ep.AdminDSN == "" {
		return fmt.Errorf("work endpoint %s has no admin console (is the topology direct?)", ep.Name)
	}
	a, err := pgbouncer.ConnectAdmin(ctx, ep.AdminDSN)
	if err != nil {
		return err
	}
	defer a.Close(context.WithoutCancel(ctx))
	return f(a, t.Database())
}

// PgBouncerPause sends PAUSE for the run's database to the work
// endpoint's PgBouncer, holds, then sends RESUME.
var PgBouncerPause Fault = pgbouncerPause{}

type pgbouncerPause struct{ holding }

func (pgbouncerPause) Name() string             { return "PGBOUNCER_PAUSE" }
func (pgbouncerPause) Available(s Setting) bool { return s.Pooled }

// Inject pauses the database for Hold. PAUSE returns only once every server
// connection of the database is released; in session pooling a client that
// stays connected (the advisory lease does) never releases its server, so
// PAUSE would wait forever. The pause is therefore sent on one console
// connection and RESUME on another once Hold has passed, whether or not
// PAUSE had completed; the events say which.
func (pgbouncerPause) Inject(ctx context.Context, t Target) error {
	ep := t.WorkEndpoint()
	return withAdmin(ctx, t, func(resumer *pgbouncer.Admin, db string) error {
		pauser, err := pgbouncer.ConnectAdmin(ctx, ep.AdminDSN)
		if err != nil {
			return err
		}
		defer pauser.Close(context.WithoutCancel(ctx))
		d := Hold(t.Setting())
		begin := time.Now()
		pctx, cancelPause := context.WithCancel(ctx)
		defer cancelPause()
		ch := make(chan error, 1)
		go func() { ch <- pauser.Pause(pctx, db) }()
		paused := ch
		event(ctx, t, "", "PAUSE %s on %s, for %s", db, ep.Name, d)
		herr := func() error {
			timer := time.NewTimer(d)
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-timer.C:
					return nil
				case err := <-paused:
					paused = nil // a nil channel is never ready again
					if err != nil {
						return fmt.Errorf("pause: %w", err)
					}
					event(ctx, t, "", "PAUSE %s took hold after %s", db, time.Since(begin).Round(time.Millisecond))
				}
			}
		}()
		if paused != nil {
			event(ctx, t, "", "PAUSE %s still waiting for server connections to be released after %s", db, d)
		}
		rctx, cancel := recoverCtx(ctx)
		defer cancel()
		if err := resumer.Resume(rctx, db); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if paused != nil {
			// PgBouncer never answers a PAUSE that RESUME overtook; give
			// up on it, which closes that console connection.
			cancelPause()
			<-paused
		}
		event(rctx, t, "", "RESUME %s", db)
		return herr
	})
}

// PgBouncerKill sends KILL for the run's database to the work endpoint's
// PgBouncer (every client and server connection of that database
// dropped at once), then RESUME, which KILL requires.
var PgBouncerKill Fault = pgbouncerKill{}

type pgbouncerKill struct{}

func (pgbouncerKill) Name() string             { return "PGBOUNCER_KILL" }
func (pgbouncerKill) Available(s Setting) bool { return s.Pooled }

func (pgbouncerKill) Inject(ctx context.Context, t Target) error {
	return withAdmin(ctx, t, func(a *pgbouncer.Admin, db string) error {
		kerr := a.Kill(ctx, db)
		if kerr == nil {
			event(ctx, t, "", "KILL %s on %s", db, t.WorkEndpoint().Name)
		}
		// KILL leaves the database paused: new clients wait until RESUME.
		rctx, cancel := recoverCtx(ctx)
		defer cancel()
		if err := a.Resume(rctx, db); err != nil {
			return errors.Join(kerr, fmt.Errorf("resume after kill: %w", err))
		}
		return kerr
	})
}

// PgBouncerReconnect sends RECONNECT for the run's database to the work
// endpoint's PgBouncer: each server connection is closed once released,
// so the next transaction gets a fresh backend.
var PgBouncerReconnect Fault = pgbouncerReconnect{}

type pgbouncerReconnect struct{}

func (pgbouncerReconnect) Name() string             { return "PGBOUNCER_RECONNECT" }
func (pgbouncerReconnect) Available(s Setting) bool { return s.Pooled }

// Inject needs no recovery: RECONNECT only marks the server connections of
// the database to be closed when released.
func (pgbouncerReconnect) Inject(ctx context.Context, t Target) error {
	return withAdmin(ctx, t, func(a *pgbouncer.Admin, db string) error {
		if err := a.Reconnect(ctx, db); err != nil {
			return err
		}
		event(ctx, t, "", "RECONNECT %s on %s", db, t.WorkEndpoint().Name)
		return nil
	})
}

// PgBouncerRestart stops and starts the PgBouncer process of the
// topology. On pinned the lease and work bouncers are stopped together
// and started together, as one PgBouncer serving both pools would be.
var PgBouncerRestart Fault = pgbouncerRestart{}

type pgbouncerRestart struct{}

func (pgbouncerRestart) Name() string             { return "PGBOUNCER_RESTART" }
func (pgbouncerRestart) Available(s Setting) bool { return s.Pooled }
func (pgbouncerRestart) Timeout() time.Duration   { return 3 * time.Minute }

// Bouncers names the PgBouncers PGBOUNCER_RESTART restarts for t: the work
// endpoint's, and on pinned the lease endpoint's as well. The usual pinned
// deployment is one PgBouncer with two databases, a session-pooled one for
// the lease and a transaction-pooled one for the work (see lease's
// "Pinned configuration"); restarting it drops both.
func Bouncers(t Target) []string {
	var names []string
	for _, ep := range []stack.Endpoint{t.LeaseEndpoint(), t.WorkEndpoint()} {
		if !ep.Direct() && !slices.Contains(names, ep.Name) {
			names = append(names, ep.Name)
		}
	}
	return names
}

func (pgbouncerRestart) Inject(ctx context.Context, t Target) error {
	names := Bouncers(t)
	if len(names) == 0 {
		return errors.New("the topology uses no PgBouncer")
	}
	if _, err := strike(ctx, t); err != nil {
		return err
	}
	s := t.Stack()
	var serr error
	for _, n := range names {
		if err := s.StopPgBouncer(ctx, n); err != nil {
			serr = errors.Join(serr, fmt.Errorf("stop pgbouncer %s: %w", n, err))
		}
	}
	if serr == nil {
		event(ctx, t, "", "stopped pgbouncer %s", strings.Join(names, ", "))
	}
	rctx, cancel := recoverCtx(ctx)
	defer cancel()
	for _, n := range names {
		if err := s.StartPgBouncer(rctx, n); err != nil {
			return errors.Join(serr, fmt.Errorf("start pgbouncer %s: %w", n, err))
		}
	}
	event(rctx, t, "", "started pgbouncer %s", strings.Join(names, ", "))
	return serr
}
