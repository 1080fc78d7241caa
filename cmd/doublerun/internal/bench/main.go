// Package bench is `doublerun bench` (make bench): it measures the worker's throughput: jobs/s and jobs per
// CPU-second (the worker's process plus every Postgres process plus
// PgBouncer, read from /proc) for a grid of batch sizes, backlogs and
// topologies, each cell the median of several runs. `make bench` runs it.
//
// Each run gets a database of its own on a native stack (Postgres with
// fsync=off, PgBouncer in transaction pooling), a backlog of due no-op jobs
// inserted and vacuumed before the clock starts, a Fenced lease and one
// worker, and lasts until the backlog is done or the window has passed.
// Runs go round by round over the whole grid, so that a passing burst of
// load on the machine spreads over cells instead of spoiling one; every
// run prints the one-minute load average it started at.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// Options are the benchmark's grid and pace; Flags fills them in.
type Options struct {
	batches, backlogs []int
	topologies        []string
	runs              int
	window, poll      time.Duration
	poolSize          int
	history, explain  bool
	historyLimit      time.Duration
}

// Flags defines the benchmark's flags on fs and returns a function that,
// after fs is parsed, checks them and returns the options.
func Flags(fs *flag.FlagSet) func() (Options, error) {
	batches := fs.String("batches", "10,100,1000", "batch sizes (Config.BatchSize), comma-separated")
	backlogs := fs.String("backlogs", "10000,100000,1000000", "jobs waiting when a run starts, comma-separated")
	topologies := fs.String("topologies", "direct,transaction", "direct and/or transaction (PgBouncer transaction pooling)")
	var o Options
	fs.IntVar(&o.runs, "runs", 3, "runs per cell; the table shows their median")
	fs.DurationVar(&o.window, "window", 10*time.Second, "longest a run lasts when its backlog is not done sooner")
	fs.DurationVar(&o.poll, "poll", 100*time.Millisecond, "Config.PollInterval")
	fs.IntVar(&o.poolSize, "pool-size", 20, "default_pool_size of the transaction-pooling PgBouncer")
	fs.BoolVar(&o.history, "history", false, "instead of the grid: drain the largest backlog at the first batch size through the last topology and print each 10% segment")
	fs.DurationVar(&o.historyLimit, "history-limit", 10*time.Minute, "longest the -history drain lasts")
	fs.BoolVar(&o.explain, "explain", false, "instead of the grid: run the first cell for the window, then print the next claims' EXPLAIN (ANALYZE, BUFFERS)")
	return func() (Options, error) {
		var err error
		if o.batches, err = ints("batches", *batches); err != nil {
			return o, err
		}
		if o.backlogs, err = ints("backlogs", *backlogs); err != nil {
			return o, err
		}
		for t := range strings.SplitSeq(*topologies, ",") {
			switch strings.TrimSpace(t) {
			case "direct":
				o.topologies = append(o.topologies, stack.PostgresName)
			case "transaction":
				o.topologies = append(o.topologies, stack.TransactionName)
			default:
				return o, fmt.Errorf("--topologies: %q is neither direct nor transaction", t)
			}
		}
		switch {
		case o.runs < 1:
			return o, fmt.Errorf("--runs must be at least 1, got %d", o.runs)
		case o.window <= 0 || o.poll <= 0 || o.historyLimit <= 0:
			return o, errors.New("--window, --poll and --history-limit must be positive")
		case o.poolSize < 1:
			return o, fmt.Errorf("--pool-size must be at least 1, got %d", o.poolSize)
		case o.history && o.explain:
			return o, errors.New("--history and --explain are separate runs; pass one")
		}
		return o, nil
	}
}

func ints(name, list string) ([]int, error) {
	var out []int
	for s := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s: %q is not a positive whole number", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// Run runs the benchmark with o on a native stack of its own, printing
// progress on stderr and the tables on stdout.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }

	st, err := stack.Start(ctx, stack.Options{
		Provider:            stack.ProviderNative,
		TransactionPoolSize: o.poolSize,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return fmt.Errorf("start a native stack (the benchmark reads the servers' CPU time from /proc): %w", err)
	}
	defer func() { _ = st.Shutdown(ctx) }()
	b := &bench{stack: st, poll: o.poll, window: o.window, log: logf}
	if err := b.servers(ctx); err != nil {
		return err
	}
	cfg, err := st.Postgres().ConnConfig()
	if err != nil {
		return err
	}
	if b.admin, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return err
	}
	defer func() { _ = b.admin.Close(context.Background()) }()

	first := cell{Batch: o.batches[0], Backlog: slices.Max(o.backlogs), Topology: o.topologies[len(o.topologies)-1]}
	switch {
	case o.history:
		return b.history(ctx, stdout, first, first.Backlog/10, o.historyLimit)
	case o.explain:
		first.Topology = o.topologies[0]
		return b.explain(ctx, stdout, first, 3)
	}
	return b.grid(ctx, stdout, o)
}

// grid runs every cell o.runs times, round by round, and prints the table.
func (b *bench) grid(ctx context.Context, out io.Writer, o Options) error {
	var cells []cell
	for _, batch := range o.batches {
		for _, backlog := range o.backlogs {
			for _, topo := range o.topologies {
				cells = append(cells, cell{Batch: batch, Backlog: backlog, Topology: topo})
			}
		}
	}
	samples := map[cell][]sample{}
	for round := 1; round <= o.runs; round++ {
		for _, c := range cells {
			s, err := b.run(ctx, c)
			if err != nil && ctx.Err() == nil {
				b.log("  note: %s, run %d failed (%v); running it again", c, round, err)
				s, err = b.run(ctx, c)
			}
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", c, round, err)
			}
			samples[c] = append(samples[c], s)
			b.log("run %d/%d  %-45s %8d jobs in %6.2fs  %8.0f jobs/s  %8.0f jobs/CPU-s  cpu worker %5.2fs postgres %5.2fs pgbouncer %5.2fs  load %.2f",
				round, o.runs, c, s.Jobs, s.Elapsed.Seconds(), s.jobsPerSecond(), s.jobsPerCPUSecond(),
				s.CPU.Worker.Seconds(), s.CPU.Postgres.Seconds(), s.CPU.Bouncer.Seconds(), s.Load)
		}
	}

	fmt.Fprintf(out, "\nMedians of %d runs; poll interval %s, window %s, transaction pool size %d, Postgres fsync=off.\n",
		o.runs, o.poll, o.window, b.stackPoolSize())
	fmt.Fprintln(out, "Cells: jobs/s, then jobs per CPU-second (worker + Postgres + PgBouncer).")
	fmt.Fprintln(out)
	header := "| batch | backlog |"
	rule := "|---|---|"
	for _, t := range o.topologies {
		header += fmt.Sprintf(" %s jobs/s | %s jobs/CPU-s |", topologyLabel(t), topologyLabel(t))
		rule += "---|---|"
	}
	fmt.Fprintln(out, header)
	fmt.Fprintln(out, rule)
	for _, batch := range o.batches {
		for _, backlog := range o.backlogs {
			line := fmt.Sprintf("| %d | %d |", batch, backlog)
			for _, t := range o.topologies {
				ss := samples[cell{Batch: batch, Backlog: backlog, Topology: t}]
				line += fmt.Sprintf(" %.0f | %.0f |", median(ss, sample.jobsPerSecond), median(ss, sample.jobsPerCPUSecond))
			}
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

func (b *bench) stackPoolSize() int {
	ep, _ := b.stack.Endpoint(stack.TransactionName)
	return ep.PoolSize
}

// median of f over ss.
func median(ss []sample, f func(sample) float64) float64 {
	vs := make([]float64, len(ss))
	for i, s := range ss {
		vs[i] = f(s)
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}
