package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
)

const stackUsage = `Usage:
  doublerun stack up [--provider P] [--tx-pool-size N]
  doublerun stack check

up     starts Postgres, a session-pooling PgBouncer and a transaction-pooling
       PgBouncer, prints export lines for the external provider on stdout,
       and keeps them running until Ctrl-C, when it removes them again and
       exits 130:

         doublerun stack up > /tmp/stack.env &   # wait for the lines
         . /tmp/stack.env && make test           # tests reuse the stack

check  connects to the stack named by the DOUBLERUN_*_DSN variables and
       prints each endpoint's pool mode, pool size and PgBouncer version,
       and what lease.CheckEndpoint proves of it by behaviour (direct,
       pinned or transaction-pooled, with the evidence). It exits 1 when
       an endpoint is not what its variable says: Postgres behind a
       pooler, or a transaction DSN that reaches a session pool.

The provider comes from --provider or DOUBLERUN_PROVIDER (auto, docker,
native); see README.md for the other DOUBLERUN_* variables.
`

func stackCommand() command {
	return command{
		name:    "stack",
		summary: "start a test stack (up) or check a running one (check)",
		usage:   stackUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usageError{"missing subcommand: up or check"}
			}
			switch args[0] {
			case "up":
				return stackUp(ctx, e, args[1:])
			case "check":
				return stackCheck(ctx, e, args[1:])
			case "-h", "-help", "--help", "help":
				fmt.Fprint(e.stdout, stackUsage)
				return nil
			}
			return usageError{fmt.Sprintf("unknown subcommand %q: use up or check", args[0])}
		},
	}
}

func stackUp(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("stack up", stackUsage, e)
	provider := fs.String("provider", "", "auto, docker or native (default: $DOUBLERUN_PROVIDER, else auto)")
	var txPool poolSize
	fs.Var(&txPool, "tx-pool-size", fmt.Sprintf("default_pool_size of the transaction bouncer, 1 to %d (default: $DOUBLERUN_TRANSACTION_POOL_SIZE, else 1)", stack.MaxPoolSize))
	if err := parse(fs, args); err != nil {
		return err
	}
	switch stack.Provider(*provider) {
	case "", stack.ProviderAuto, stack.ProviderDocker, stack.ProviderNative:
	case stack.ProviderExternal:
		return usageError{"stack up starts servers; the external provider only connects to them (use stack check)"}
	default:
		return usageError{fmt.Sprintf("unknown provider %q; valid: auto, docker, native", *provider)}
	}
	opts, err := stack.Options{Provider: stack.Provider(*provider), TransactionPoolSize: int(txPool), Logger: e.log}.FromEnv()
	if err != nil {
		return err
	}
	if opts.Provider == stack.ProviderExternal {
		// Only DOUBLERUN_PROVIDER can have said so: the flag was checked.
		return envError{fmt.Sprintf("%s=external connects to servers someone else runs, and stack up starts them: unset %s (or set it to auto, docker or native) for stack up, or run stack check to look at the running stack", stack.EnvProvider, stack.EnvProvider)}
	}
	begin := time.Now()
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		e.log.Info("stopping stack")
		if err := s.Shutdown(ctx); err != nil {
			e.log.Error("stack cleanup", "err", err)
		}
	}()
	for _, line := range s.ExportLines() {
		fmt.Fprintln(e.stdout, line)
	}
	e.log.Info("stack up", "provider", s.Provider(), "ready_in", time.Since(begin).Round(time.Millisecond))
	<-ctx.Done()
	// The deferred Close runs before this reaches the terminal; the exit
	// is 130, as for every command Ctrl-C stops.
	return errors.New("interrupted; the stack is stopped and removed")
}

func stackCheck(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("stack check", stackUsage, e)
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{Provider: stack.ProviderExternal, Logger: e.log})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tPOOL MODE\tPOOL SIZE\tPGBOUNCER\tBEHAVIOUR")
	var problems []string
	for _, ep := range s.Endpoints() {
		// The lease's own check: what the admin console claims is one
		// thing, what two clients see is the proof.
		rep, err := checkEndpoint(ctx, ep)
		behaviour := rep.Kind.String()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s", ep.Name, oneLine(err)))
			behaviour = "error: " + oneLine(err)
		} else {
			if len(rep.Evidence) > 0 {
				behaviour += " (" + rep.Evidence[0] + ")"
			}
			if err := checkRole(ep, rep); err != nil {
				problems = append(problems, err.Error())
			}
		}
		mode, size, ver := string(ep.PoolMode), fmt.Sprint(ep.PoolSize), ep.Version
		if ep.Direct() {
			mode, size, ver = "direct", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ep.Name, mode, size, ver, behaviour)
	}
	tw.Flush()
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// checkEndpoint runs lease.CheckEndpoint on ep. A transaction pool busy
// with other clients can hand each of the check's clients the same
// backend every time and pass for pinned (see lease.CheckEndpoint), so the
// transaction endpoint, which must be proven, gets up to three tries.
func checkEndpoint(ctx context.Context, ep stack.Endpoint) (lease.EndpointReport, error) {
	for try := 1; ; try++ {
		rep, err := lease.CheckEndpoint(ctx, ep.DSN)
		if err != nil || ep.Name != stack.TransactionName || rep.Kind == lease.EndpointTransactionPooled || try == 3 {
			return rep, err
		}
	}
}

// checkRole says what is wrong when an endpoint of the stack is not what
// its variable claims, as its behaviour (rep, from lease.CheckEndpoint)
// and, for a bouncer, its admin console's pool_mode show: Postgres must
// answer its login itself, the session endpoint must be a pooler that
// keeps each client on a backend of its own, and the transaction endpoint
// must be proven to share backends between clients. Tests that reach a
// session pool where they expect a transaction pool (or the reverse)
// measure the wrong thing and pass; so stack check fails on it. A check
// that proves nothing either way (EndpointUnknown) is no contradiction.
func checkRole(ep stack.Endpoint, rep lease.EndpointReport) error {
	evidence := rep.Kind.String()
	if len(rep.Evidence) > 0 {
		evidence += ": " + rep.Evidence[0]
	}
	switch ep.Name {
	case stack.PostgresName:
		if rep.Kind == lease.EndpointPinned || rep.Kind == lease.EndpointTransactionPooled {
			return fmt.Errorf("%s (%s) reaches a pooler, not Postgres itself (%s); point it at Postgres", stack.EnvPostgresDSN, rep.Endpoint, evidence)
		}
	case stack.SessionName:
		if ep.PoolMode != pgbouncer.PoolSession {
			return fmt.Errorf("%s's bouncer has pool_mode=%s on its admin console (%s), not session; point %s and %s at the session-pooling bouncer", stack.EnvSessionDSN, ep.PoolMode, stack.EnvSessionAdminDSN, stack.EnvSessionDSN, stack.EnvSessionAdminDSN)
		}
		if rep.Kind == lease.EndpointDirect || rep.Kind == lease.EndpointTransactionPooled {
			return fmt.Errorf("%s (%s) is not session-pooled (%s); point it at the session-pooling bouncer", stack.EnvSessionDSN, rep.Endpoint, evidence)
		}
	case stack.TransactionName:
		// Guard: a transaction DSN whose bouncer pools sessions passed
		// stack check (TestStackCheckRoles/TransactionConsoleSaysSession).
		if ep.PoolMode != pgbouncer.PoolTransaction {
			return fmt.Errorf("%s's bouncer has pool_mode=%s on its admin console (%s), not transaction; point %s and %s at the transaction-pooling bouncer", stack.EnvTransactionDSN, ep.PoolMode, stack.EnvTransactionAdminDSN, stack.EnvTransactionDSN, stack.EnvTransactionAdminDSN)
		}
		// Guard: the admin console's word is not proof; two clients
		// sharing a backend are (TestStackCheckRoles/TransactionBehavesPinned).
		if rep.Kind != lease.EndpointTransactionPooled {
			return fmt.Errorf("%s (%s) is not proven transaction-pooled (%s); point it at the transaction-pooling bouncer", stack.EnvTransactionDSN, rep.Endpoint, evidence)
		}
	}
	return nil
}
