package main

import (
	"context"

	"github.com/doublerun/doublerun/cmd/doublerun/internal/bench"
)

const benchUsage = `Usage: doublerun bench [--batches LIST] [--backlogs LIST] [--topologies LIST]
                       [--runs N] [--window D] [--poll D] [--pool-size N]
                       [--history [--history-limit D] | --explain]

Measures the worker's throughput (make bench): jobs/s and jobs per
CPU-second (the worker's process, every Postgres process and PgBouncer,
read from /proc) for each batch size, backlog and topology, the median of
--runs runs each, on a native stack of its own (Postgres with fsync=off).
About 10 minutes with the defaults; not part of make test.
`

func benchCommand() command {
	return command{
		name:    "bench",
		summary: "measure the worker's throughput (jobs/s, jobs per CPU-second) on a native stack",
		usage:   benchUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			fs := newFlagSet("bench", benchUsage, e)
			options := bench.Flags(fs.FlagSet)
			if err := parse(fs, args); err != nil {
				return err
			}
			o, err := options()
			if err != nil {
				return usageError{err.Error()}
			}
			return bench.Run(ctx, o, e.stdout, e.stderr)
		},
	}
}
