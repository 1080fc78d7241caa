package chaos

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// RunConfig configures RunSets. Zero fields take the defaults in their
// comments.
type RunConfig struct {
	// Sets are the version sets to run the cells on, one stack each, one
	// after another; default one stack of the stack's own choice
	// (DOUBLERUN_VERSIONS, else the newest).
	Sets []string
	// Shard and Shards say which slice of the cells runs on each set
	// (Shard); default 1/1, every cell.
	Shard, Shards int
	// Replicas, when not 0, is every cell's number of replicas instead of
	// its own (2).
	Replicas int
	// Replica, when set, runs every cell's replicas as this command
	// (scenarios.Scenario.Replica); the cell's strategy says what its
	// lease is like.
	Replica *replica.Command
	// OutDir receives each cell's report, and per set cells.json and
	// summary.md (under OutDir/<set> when Sets has several, and then the
	// summary of all in OutDir/summary.md); empty for no files.
	OutDir string
	// Logger receives the stacks' and the runs' logs; default discards.
	Logger *slog.Logger
	// Start starts the stack of a version set, with a standby in the
	// mode standby when it is not empty (the failover cells', Cell.Standby),
	// and returns it with its cleanup; default stack.Start.
	Start func(ctx context.Context, set string, standby stack.ReplicationMode) (*stack.Stack, func(), error)
	// OnSet, if set, sees each set's stack once it is up, before its
	// cells run.
	OnSet func(SetStart)
	// OnResult, if set, sees each cell's result as it comes.
	OnResult func(done, total int, r CellResult)
}

// SetStart is what RunConfig.OnSet is told of a version set's run.
type SetStart struct {
	// Asked is the set asked for; Stack's servers make up Stack.Versions().Set.
	Asked string
	Stack *stack.Stack
	// RanFor, when not empty, is the set asked for earlier whose stack
	// ran the same servers: a provider that runs its own binaries whatever
	// is asked (native) would run them twice, so this set is skipped.
	RanFor string
	// Cells is how many cells run on this set (its shard), of Total.
	Cells, Total int
	// Replicas is each cell's number of replicas.
	Replicas int
	// Dir is where the set's reports go; "" for none.
	Dir string
}

// RunSets runs cells on each version set of cfg, one stack per set, one
// after another: each cell placed on the set its stack's servers make up,
// expecting what Expect says there; only cfg's shard of them; one at a
// time (RunMatrix). It writes the reports, cells.json and summaries under
// cfg.OutDir and returns every result, as report.json holds it, with each
// set's wall time. Invalid cells are an error before any stack starts; a
// stack that cannot start, or a file that cannot be written, ends the run
// with an error. When ctx ends it stops after the cell it is in and
// returns what ran.
func RunSets(ctx context.Context, cells []Cell, cfg RunConfig) (SetResults, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(cells); err != nil {
		return SetResults{}, err
	}
	r := setsRun{cfg: cfg, cells: cells, several: len(cfg.Sets) > 1, ran: map[string]string{}, out: SetResults{Walls: map[string]time.Duration{}}}
	for _, asked := range cfg.Sets {
		if err := r.runOn(ctx, asked); err != nil {
			return r.out, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if cfg.OutDir != "" && r.several {
		path := filepath.Join(cfg.OutDir, "summary.md")
		if err := os.WriteFile(path, []byte(r.out.Summary()), 0o644); err != nil {
			return r.out, fmt.Errorf("write %s: %w", path, err)
		}
		if err := r.writeSummaryHTML(); err != nil {
			return r.out, err
		}
	}
	return r.out, nil
}

// withDefaults returns c with every zero field at its default.
func (c RunConfig) withDefaults() RunConfig {
	if len(c.Sets) == 0 {
		c.Sets = []string{""} // the stack's own choice
	}
	c.Shard, c.Shards = cmp.Or(c.Shard, 1), cmp.Or(c.Shards, 1)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Start == nil {
		log := c.Logger
		c.Start = func(ctx context.Context, set string, standby stack.ReplicationMode) (*stack.Stack, func(), error) {
			return startStack(ctx, set, standby, log)
		}
	}
	return c
}

// validate says what keeps cells from running as c asks, before any
// stack starts: a cell the table does not hold, or one whose scenario is
// not valid with c's replicas and command.
func (c RunConfig) validate(cells []Cell) error {
	_, err := table.place(cells, "", c.Replicas, c.Replica)
	return err
}

// setsRun is one RunSets in progress.
type setsRun struct {
	cfg     RunConfig // defaults applied
	cells   []Cell
	several bool
	// ran maps each version set that ran to the one asked for.
	ran map[string]string
	out SetResults
}

// runOn runs the shard of the cells on a stack of the version set asked,
// adding what it gave to r.out. The cells on a standby (the failover
// faults') run after the others, on a stack of their mode each: the first
// stack started says which servers the set runs.
func (r *setsRun) runOn(ctx context.Context, asked string) error {
	cfg := r.cfg
	modes := standbyModes(r.cells)
	s, closeStack, err := cfg.Start(ctx, asked, modes[0])
	if err != nil {
		return err
	}
	defer func() { closeStack() }()
	have := s.Versions().Set
	if earlier, done := r.ran[have]; done {
		if cfg.OnSet != nil {
			cfg.OnSet(SetStart{Asked: asked, Stack: s, RanFor: earlier})
		}
		return nil
	}
	r.ran[have] = asked
	scs, err := table.place(r.cells, have, cfg.Replicas, cfg.Replica)
	if err != nil {
		return err
	}
	index := Shard(scs, cfg.Shard, cfg.Shards)
	picked := make([]scenarios.Scenario, len(index))
	for k, i := range index {
		picked[k] = scs[i]
	}
	r.out.Planned += len(picked)
	dir := cfg.OutDir
	if dir != "" && r.several {
		dir = filepath.Join(cfg.OutDir, asked)
	}
	if cfg.OnSet != nil {
		replicas := cmp.Or(cfg.Replicas, scenarios.DefaultReplicas)
		cfg.OnSet(SetStart{Asked: asked, Stack: s, Cells: len(picked), Total: len(scs), Replicas: replicas, Dir: dir})
	}
	begin := time.Now()
	var results []CellResult
	var ran []int
	done := 0
	for k, mode := range modes {
		var group []scenarios.Scenario
		for j, sc := range picked {
			if sc.Standby == mode {
				group = append(group, sc)
				ran = append(ran, index[j])
			}
		}
		if len(group) == 0 || ctx.Err() != nil {
			continue
		}
		if k > 0 {
			// A stack of its own per mode: the one before is closed first,
			// so that two stacks never hold the machine at once.
			closeStack()
			closeStack = func() {}
			if s, closeStack, err = cfg.Start(ctx, asked, mode); err != nil {
				return err
			}
		}
		offset := done
		results = append(results, RunMatrix(ctx, group, scenarios.RunOptions{Stack: s, OutDir: dir, Logger: cfg.Logger}, func(d, _ int, c CellResult) {
			if cfg.OnResult != nil {
				cfg.OnResult(offset+d, len(picked), c)
			}
		})...)
		done = len(results)
	}
	wall := time.Since(begin)
	for i := range results {
		results[i].Versions = have
	}
	// As report.json holds them, so that this summary and a merge of
	// this directory agree to the character.
	results = Canonical(results)
	r.out.Results = append(r.out.Results, results...)
	r.out.Walls[have] += wall
	if dir == "" {
		return nil
	}
	shard := ShardResults{Versions: have, Shard: cfg.Shard, Shards: cfg.Shards, Total: len(scs), Wall: wall, Results: results, Index: ran[:len(results)]}
	if err := WriteCells(dir, shard); err != nil {
		return err
	}
	if err := WriteSummary(dir, results, wall); err != nil {
		return err
	}
	return writeSummaryHTML(dir, results, wall, beside)
}

// place returns the scenario of each cell on the version set set,
// expecting what t says there, with replicas replicas each when it is not
// 0. The error is the first cell's that is not valid.
func (t Table) place(cells []Cell, set string, replicas int, command *replica.Command) ([]scenarios.Scenario, error) {
	out := make([]scenarios.Scenario, len(cells))
	for i, c := range cells {
		c.Versions = set
		sc, err := t.scenario(c)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.Name(), err)
		}
		sc.Replica = command
		if replicas != 0 || command != nil {
			sc.Replicas = cmp.Or(replicas, sc.Replicas)
			if err := sc.Validate(); err != nil {
				return nil, fmt.Errorf("cell %s: %w", c.Name(), err)
			}
		}
		out[i] = sc
	}
	return out, nil
}

// standbyModes are the standby modes cells run on, one Postgres first,
// then sync, then async; one Postgres alone when there are no cells.
func standbyModes(cells []Cell) []stack.ReplicationMode {
	var out []stack.ReplicationMode
	for _, m := range []stack.ReplicationMode{"", stack.ReplicationSync, stack.ReplicationAsync} {
		if slices.ContainsFunc(cells, func(c Cell) bool { return c.Standby == m }) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		out = append(out, "")
	}
	return out
}

// startStack starts a stack of the version set set ("" for the stack's
// own choice), with a standby in mode standby when it is not empty, and
// returns its cleanup.
func startStack(ctx context.Context, set string, standby stack.ReplicationMode, log *slog.Logger) (*stack.Stack, func(), error) {
	s, err := stack.Start(ctx, stack.Options{Logger: log, Versions: set, Replication: standby})
	if err != nil {
		return nil, nil, err
	}
	return s, func() {
		if err := s.Shutdown(ctx); err != nil {
			log.Error("stack cleanup", "err", err)
		}
	}, nil
}
