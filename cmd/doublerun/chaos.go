package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/replica"
)

const chaosUsage = `Usage: doublerun chaos [--fault NAME] [--strategy NAME] [--topology NAME] [--out DIR] [--replicas N]
                      [--versions SET,...|all] [--shard I/N] [--pool-sizes N,...] [--replica FILE] [--standby]
       doublerun chaos merge [--out DIR] DIR...

Runs the chaos matrix: every strategy (advisory, advisory-unguarded,
advisory-wait, fenced) against every fault of the catalog, and without a
fault, on the transaction topology (a PgBouncer transaction pool of one;
advisory-wait refuses it and runs on the others only). CHAOS_TOPOLOGIES, a
comma-separated list of direct, session, transaction, pinned and alias,
selects others; --topology overrides it. --fault, --strategy and --topology each
narrow the matrix; all three together run a single cell.

Prints one line per cell as it runs and, at the end, a Markdown table by
strategy and fault: the double-run window and its episodes, the leaderless
window, stale writes accepted / rejected, and the verdict against the
cell's expectation (the table in package chaos). Writes each cell's
report.json, report.md and timeline.svg under DIR/<strategy>/<topology>/<fault>
and the table to DIR/summary.md. Exits 1 if any cell did not match its
expectation, 2 on a usage error, 130 on Ctrl-C (after the summary of the
cells that ran).

--versions picks the version sets (Postgres and PgBouncer) to run on:
one stack per set, one after another, each set's reports under DIR/<set>
and the table of all under DIR/summary.md, led by the cells whose outcome
differs between the sets. CHAOS_VERSIONS, then DOUBLERUN_VERSIONS, give
it when the flag does not; the default is the newest set. Each cell
expects what the table in package chaos says for its set. The native
provider runs the host's binaries whatever set is named; reports name
the versions that ran, and a set those binaries already ran is skipped.

--shard I/N runs a deterministic slice of the cells, the same on every
machine, so that N runners share a matrix; each writes DIR/cells.json
beside the reports. ` + "`doublerun chaos merge DIR...`" + ` reads the cells.json
under the DIRs (every shard of every set) and prints, and with --out
writes, the summary an unsharded run would have written; its wall time
is the shards' total. It exits 1 if a cell did not match its expectation.

--pool-sizes runs each cell of a topology with a transaction pool
(transaction, pinned, alias) once per size, such as 1,2,4, named
strategy/topology-poolN/FAULT for sizes above 1; CHAOS_POOL_SIZES gives
it when the flag does not; the default is 1. Each such cell expects what
the table in package chaos says at its size.

--replica FILE runs every cell's replicas as a command of your own, in
any language: FILE holds a replica object as a scenario file's "replica"
field does ({"command": [...], "env": {...}, "log": {...}}), or a whole
scenario file with one. The cell's strategy says what the command's lease
is like (which faults apply, what the cell expects): give it with
--strategy, which --replica needs.

--standby adds the failover faults' cells (PRIMARY_FAILOVER and
SWITCHOVER on a synchronous standby, PRIMARY_FAILOVER_LOSSY on an
asynchronous one), with the fenced-epoch strategy beside the others;
CHAOS_STANDBY=1 gives it when the flag does not. They run after the
other cells, on a stack with a standby per mode, which each cell fails
over and the next rebuilds: slow (a minute or more a cell through
PgBouncer, which locks its logins out for server_login_retry after the
promotion). Without it the matrix has none of them. Their cells were
measured on direct and transaction: --standby --topology direct,transaction
--fault PRIMARY_FAILOVER_LOSSY runs that fault's.

--replicas runs every cell with N replicas instead of 2. The expectations
were measured with 2. A double-run needs two replicas, so --replicas 1 is
refused for a selection with a cell that expects one; narrow it (such as
--strategy fenced) to run one replica.
`

// envChaosTopologies selects the matrix's topologies.
const envChaosTopologies = "CHAOS_TOPOLOGIES"

// envChaosStandby adds the failover cells when --standby is not given.
const envChaosStandby = "CHAOS_STANDBY"

// chaosStandby is whether the failover cells run: --standby when given,
// else CHAOS_STANDBY (1 or true; 0, false or empty for no).
func chaosStandby(flag, flagSet bool, env string) (bool, error) {
	if flagSet {
		return flag, nil
	}
	switch strings.ToLower(strings.TrimSpace(env)) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, envError{fmt.Sprintf("%s: %q is not 1 or 0; set CHAOS_STANDBY=1 to add the failover cells", envChaosStandby, env)}
}

func chaosCommand() command {
	return command{
		name: "chaos", summary: "run the fault matrix and judge every cell", usage: chaosUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 && args[0] == "merge" {
				return chaosMerge(e, args[1:])
			}
			fs := newFlagSet("chaos", chaosUsage, e)
			faultName := fs.String("fault", "", "run only this fault (or none); see the list in the error for an unknown name")
			strategy := fs.String("strategy", "", "run only this strategy: "+strings.Join(chaos.Strategies, ", "))
			topology := fs.String("topology", "", "run only this topology (overrides "+envChaosTopologies+")")
			out := fs.String("out", "reports/chaos", "directory for the reports and summary.md; empty for none")
			replicas := fs.Int("replicas", 0, replicasHelp)
			versions := fs.String("versions", "", chaosVersionsHelp)
			shard := fs.String("shard", "", "run only slice i of n of the cells, such as 2/4 (doublerun chaos merge joins the slices)")
			poolSizes := fs.String("pool-sizes", "", chaosPoolSizesHelp)
			replicaFile := fs.String("replica", "", "a JSON file with the replica command every cell runs instead of the strategy's lease")
			standby := fs.Bool("standby", false, "add the failover faults' cells, each mode on a stack with a standby (or "+envChaosStandby+"=1)")
			if err := parse(fs, args); err != nil {
				return err
			}
			var command *replica.Command
			if *replicaFile != "" && *strategy == "" {
				return usageError{"--replica needs --strategy: the strategy whose column of the table the command is judged by, such as advisory for a session advisory lock"}
			}
			if *replicaFile != "" {
				data, err := os.ReadFile(*replicaFile)
				if err != nil {
					return usageError{fmt.Sprintf("--replica: %v; give a JSON file holding {\"command\": [...]}", err)}
				}
				if command, err = scenarios.ParseReplicaCommand(data); err != nil {
					return usageError{fmt.Sprintf("--replica %s: %v", *replicaFile, err)}
				}
				if err := command.Check(); err != nil {
					return envError{err.Error()}
				}
			}
			n, err := replicasOf(fs, *replicas)
			if err != nil {
				return err
			}
			shardI, shardN := 1, 1
			if fs.isSet("shard") {
				if shardI, shardN, err = chaos.ParseShard(*shard); err != nil {
					return usageError{"--shard: " + err.Error()}
				}
			}
			sets, err := chaosVersionSets(*versions, os.Getenv)
			if err != nil {
				return err
			}
			withStandby, err := chaosStandby(*standby, fs.isSet("standby"), os.Getenv(envChaosStandby))
			if err != nil {
				return err
			}
			cells, err := chaosCells(*faultName, *strategy, *topology, os.Getenv(envChaosTopologies), withStandby)
			if err != nil {
				return err
			}
			sizes, err := chaosPoolSizes(*poolSizes, fs.isSet("pool-sizes"), os.Getenv(envChaosPoolSizes))
			if err != nil {
				return err
			}
			cells = chaos.AtPoolSizes(cells, sizes)
			if err := validateCells(cells, n); err != nil {
				return err
			}
			if err := checkEnv(sets[0]); err != nil {
				return err
			}
			dropEmptyOut, err := outDir("out", *out)
			if err != nil {
				return err
			}
			defer dropEmptyOut()
			res, err := chaos.RunSets(ctx, cells, chaos.RunConfig{
				Sets: sets, Shard: shardI, Shards: shardN, Replicas: n, Replica: command, OutDir: *out, Logger: e.log,
				OnSet: func(s chaos.SetStart) { printSet(e, s, shardI, shardN) },
				OnResult: func(done, total int, r chaos.CellResult) {
					fmt.Fprintf(e.stdout, "[%d/%d] %s\n", done, total, r.Line())
				},
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout)
			fmt.Fprint(e.stdout, res.Summary())
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted after %d of %d cells; the table above covers those", len(res.Results), res.Planned)
			}
			if err := res.Verdict().Err(); err != nil {
				if *out == "" {
					return fmt.Errorf("%w; see the table above", err)
				}
				return fmt.Errorf("%w; see %s/summary.md", err, *out)
			}
			return nil
		},
	}
}

// printSet prints what a version set's run is about to do, or that it is
// skipped.
func printSet(e *env, s chaos.SetStart, shard, shards int) {
	have := s.Stack.Versions().Set
	if s.RanFor != "" {
		fmt.Fprintf(e.stdout, "chaos: %s: the %s provider runs %s, which already ran for %s; skipped\n", s.Asked, s.Stack.Provider(), have, s.RanFor)
		return
	}
	shardText := ""
	if shards > 1 {
		shardText = fmt.Sprintf(", shard %d/%d of %d", shard, shards, s.Total)
	}
	fmt.Fprintln(e.stdout, versionsLine(s.Stack))
	fmt.Fprintf(e.stdout, "chaos: %d cell(s)%s, %d replicas each, reports in %s\n", s.Cells, shardText, s.Replicas, orNone(s.Dir))
}

// validateCells checks every cell's scenario with the flags applied
// (validate; replicas, when not 0, is --replicas), and names the cells a
// complaint is about when it is not about all of them: --replicas 1 is
// too few only for the cells that expect a double-run.
func validateCells(cells []chaos.Cell, replicas int) error {
	flagOf := map[string]string{}
	if replicas != 0 {
		flagOf["replicas"] = "replicas"
	}
	var first error
	var firstCell string
	failed, same := 0, true
	for _, c := range cells {
		sc, err := c.Scenario()
		if err == nil {
			sc.Replicas = cmp.Or(replicas, sc.Replicas)
			err = validate(sc, flagOf)
		}
		if err == nil {
			continue
		}
		failed++
		if first == nil {
			first, firstCell = err, c.Name()
		} else if err.Error() != first.Error() {
			same = false
		}
	}
	switch {
	case first == nil:
		return nil
	case failed == len(cells) && same:
		return first
	case failed == 1:
		return usageError{fmt.Sprintf("cell %s: %v", firstCell, first)}
	}
	return usageError{fmt.Sprintf("cell %s and %d more of the %d selected: %v", firstCell, failed-1, len(cells), first)}
}

// chaosCells picks the cells the flags and CHAOS_TOPOLOGIES select. Each
// unknown name is a usage error that lists the valid ones.
func chaosCells(faultName, strategy, topology, envTopologies string, standby bool) ([]chaos.Cell, error) {
	strategies := chaos.Strategies
	if standby {
		strategies = chaos.StandbyStrategies
	}
	if strategy != "" && !slices.Contains(strategies, strategy) {
		if slices.Contains(chaos.StandbyStrategies, strategy) {
			return nil, usageError{fmt.Sprintf("strategy %s has cells only under the failover faults; add --standby", strategy)}
		}
		return nil, usageError{fmt.Sprintf("unknown strategy %q; valid: %s", strategy, strings.Join(strategies, ", "))}
	}
	if faultName != "" {
		if err := fault.CheckName(faultName); err != nil {
			return nil, usageError{err.Error()}
		}
	}
	topologies := []scenarios.TopologyKind{scenarios.Transaction}
	switch {
	case topology != "":
		ts, err := scenarios.ParseTopologies(topology)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		topologies = ts
	case strings.TrimSpace(envTopologies) != "":
		ts, err := scenarios.ParseTopologies(envTopologies)
		if err != nil {
			return nil, envError{fmt.Sprintf("%s: %v", envChaosTopologies, err)}
		}
		topologies = ts
	}
	all := chaos.Matrix(topologies...)
	if standby {
		all = append(all, chaos.StandbyMatrix(topologies...)...)
	} else if faultName != "" && slices.ContainsFunc(chaos.StandbyMatrix(), func(c chaos.Cell) bool { return c.Fault == faultName }) {
		return nil, usageError{fmt.Sprintf("fault %s fails the primary over: its cells need a stack with a standby; add --standby (or CHAOS_STANDBY=1)", faultName)}
	}
	var cells []chaos.Cell
	for _, c := range all {
		if (faultName == "" || c.Fault == faultName) && (strategy == "" || c.Strategy == strategy) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		for _, k := range topologies {
			if err := scenarios.CheckStrategyTopology(strategy, k); err != nil {
				return nil, usageError{err.Error()}
			}
		}
		if faultName != "" && strategy != "" && len(topologies) == 1 {
			// Why the one cell these flags name is none of the matrix's.
			_, err := chaos.Cell{Strategy: strategy, Topology: topologies[0], Fault: faultName}.Scenario()
			if err := flagged(err, map[string]string{"fault": "fault", "topology.kind": "topology"}); err != nil {
				return nil, err
			}
		}
		return nil, errors.New("no cell of the matrix matches these flags")
	}
	return cells, nil
}
