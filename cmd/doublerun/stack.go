package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack"
)

const stackUsage = `Usage:
  doublerun stack up [--provider P] [--tx-pool-size N]
  doublerun stack check

up     starts Postgres, a session-pooling PgBouncer and a transaction-pooling
       PgBouncer, prints export lines for the external provider on stdout,
       and keeps them running until Ctrl-C, when it removes them again:

         doublerun stack up > /tmp/stack.env &   # wait for the lines
         . /tmp/stack.env && make test           # tests reuse the stack

check  connects to the stack named by the DOUBLERUN_*_DSN variables and
       prints each endpoint's pool mode, pool size and PgBouncer version,
       and what lease.CheckEndpoint proves of it by behaviour (direct,
       pinned or transaction-pooled, with the evidence).

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
	var poolSize positiveInt
	fs.Var(&poolSize, "tx-pool-size", "default_pool_size of the transaction bouncer, at least 1 (default: $DOUBLERUN_TRANSACTION_POOL_SIZE, else 1)")
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
	opts, err := stack.Options{Provider: stack.Provider(*provider), TransactionPoolSize: int(poolSize), Logger: e.log}.FromEnv()
	if err != nil {
		return err
	}
	begin := time.Now()
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		e.log.Info("stopping stack")
		if err := s.Close(cctx); err != nil {
			e.log.Error("stack cleanup", "err", err)
		}
	}()
	for _, line := range s.ExportLines() {
		fmt.Fprintln(e.stdout, line)
	}
	e.log.Info("stack up", "provider", s.Provider(), "ready_in", time.Since(begin).Round(time.Millisecond))
	<-ctx.Done()
	return nil
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
	var errs []error
	for _, ep := range s.Endpoints() {
		// The lease's own check: what the admin console claims is one
		// thing, what two clients see is the proof.
		rep, err := lease.CheckEndpoint(ctx, ep.DSN)
		behaviour := rep.Kind.String()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep.Name, err))
			behaviour = "error: " + oneLine(err)
		} else if len(rep.Evidence) > 0 {
			behaviour += " (" + rep.Evidence[0] + ")"
		}
		mode, size, ver := string(ep.PoolMode), fmt.Sprint(ep.PoolSize), ep.Version
		if ep.Direct() {
			mode, size, ver = "direct", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ep.Name, mode, size, ver, behaviour)
	}
	tw.Flush()
	return errors.Join(errs...)
}
