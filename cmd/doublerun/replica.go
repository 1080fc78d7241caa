package main

import (
	"context"
	"os"
	"strings"

	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

const replicaUsage = `Usage: doublerun replica --strategy NAME

Runs one replica of a built-in strategy's lease as a replica command does:
its settings from the protocol's DOUBLERUN_* variables, its leader work
reported through the doublerun.* SQL functions. A scenario whose replica
is this command measures the built-in lease through the same path as a
user's program in another language:

  "strategy": "advisory",
  "replica": {"command": ["doublerun", "replica", "--strategy", "advisory"]}

It is started by ` + "`doublerun run`" + ` and ` + "`doublerun chaos`" + `, not by hand; it stops on
SIGTERM or Ctrl-C. Exits 2 when a variable is missing.
`

func replicaCommand() command {
	return command{
		name: "replica", summary: "run a built-in lease as a replica command (started by run and chaos)", usage: replicaUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			fs := newFlagSet("replica", replicaUsage, e)
			name := fs.String("strategy", "", "the built-in strategy whose lease this replica runs: "+strings.Join(strategy.Names(), ", "))
			if err := parse(fs, args); err != nil {
				return err
			}
			if *name == "" {
				return usageError{"--strategy is required; one of " + strings.Join(strategy.Names(), ", ")}
			}
			if os.Getenv(replica.EnvReplicaID) == "" {
				return usageError{replica.EnvReplicaID + " is not set: this command is a replica that doublerun run and doublerun chaos start, with the DOUBLERUN_* variables set"}
			}
			return replica.RunAsCommand(ctx, *name, os.Getenv)
		},
	}
}
