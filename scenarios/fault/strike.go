package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// What every fault shares: the moment it strikes at, how long it holds,
// and how it recovers.

// holdingTimeout bounds a holding fault's Inject. DefaultTimeout is too
// short for a TTL above 40s.
const holdingTimeout = 10 * time.Minute

// recoverTimeout bounds each recovery step, which runs even when the
// injection's context has ended: a fault must never be left in place.
const recoverTimeout = 30 * time.Second

func recoverCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recoverTimeout)
}

// hold waits d, the length of a holding fault, or until ctx ends. It
// refuses at once a hold that cannot end before ctx's deadline.
func hold(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return fmt.Errorf("hold of %s does not fit in the fault's timeout (%s left)", d, time.Until(dl).Round(time.Millisecond))
	}
	return wait.Sleep(ctx, d)
}

// holding is embedded by the faults that hold the leader for Hold.
type holding struct{}

func (holding) Timeout() time.Duration        { return holdingTimeout }
func (holding) Holds(s Setting) time.Duration { return Hold(s) }

func event(ctx context.Context, t Target, replica, format string, args ...any) {
	// An event that cannot be logged leaves the timeline poorer, nothing
	// worse; the runner's own fault and healed events carry the verdict.
	_ = t.Event(ctx, oracle.EventChaos, replica, fmt.Sprintf(format, args...))
}

// injected marks the instant a fault acts on the leader (kind
// oracle.EventInjected), just before it acts, so the failover latency is
// measured from there rather than from the runner's fault event, which
// came before the strike wait. It is logged before the act, never after:
// the figure may include one round trip to the oracle, but a new leader
// can never seem to come before the fault.
func injected(ctx context.Context, t Target, replica, format string, args ...any) {
	_ = t.Event(ctx, oracle.EventInjected, replica, fmt.Sprintf(format, args...))
}

func leader(ctx context.Context, t Target) (Replica, error) {
	l, err := t.Leader(ctx)
	if err != nil {
		return l, fmt.Errorf("find the leader: %w", err)
	}
	return l, nil
}

// strikeFresh is how recently a piece of work began at strike's moment.
func strikeFresh(t Target) time.Duration { return max(t.Setting().Work/4, 10*time.Millisecond) }

// strikeWait bounds how long a fault waits for its moment.
const strikeWait = 5 * time.Second

// strike waits for the moment every fault strikes at: just after the
// leader began a piece of work (within a quarter of Setting.Work), which
// the oracle shows. A lease learns that it lost its backend, its bouncer
// or its connection only at its next poll, so this is the moment at which
// a fault can do the most harm; striking at a random moment instead made
// the same cell show a double-run in some runs and none in others. It
// returns the leader as of that moment. A leader that begins no piece
// within strikeWait is struck anyway, and the event says so.
func strike(ctx context.Context, t Target) (Replica, error) {
	l, err := leader(ctx, t)
	if err != nil {
		return l, err
	}
	conn, err := oracleConn(ctx, t)
	if err != nil {
		return l, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	fresh := strikeFresh(t)
	deadline := time.Now().Add(strikeWait)
	for {
		begun, err := oracle.WorkBegun(ctx, conn, l.ID, fresh)
		if err != nil {
			return l, err
		}
		if begun {
			break
		}
		if time.Now().After(deadline) {
			event(ctx, t, l.ID, "struck without waiting: %s began no piece of work within %s", l.ID, strikeWait)
			break
		}
		if err := wait.Sleep(ctx, 5*time.Millisecond); err != nil {
			return l, err
		}
	}
	// The latest piece may hold the lease on another backend than the one
	// before it.
	if now, err := t.Leader(ctx); err == nil && now.ID == l.ID {
		l = now
	}
	return l, nil
}

// processLeader is the leader, for faults that signal its process.
func processLeader(ctx context.Context, t Target) (Replica, error) {
	l, err := leader(ctx, t)
	if err == nil && l.PID <= 0 {
		err = fmt.Errorf("leader %s has no process", l.ID)
	}
	return l, err
}

// oracleConn connects to the run's database where the oracle's tables
// are, bypassing every bouncer and proxy: Postgres itself, or on a stack
// with a standby the third server no failover touches (stack.Oracle).
func oracleConn(ctx context.Context, t Target) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(t.Stack().Oracle().WithDatabase(t.Database()).DSN)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams["application_name"] = "doublerun-chaos"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the oracle's server: %w", err)
	}
	return conn, nil
}
