package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/stack"
)

const listUsage = `Usage: doublerun list

Lists the built-in scenarios with their strategy, topology and expectation.
`

func listCommand() command {
	return command{
		name: "list", summary: "list the built-in scenarios", usage: listUsage,
		run: func(_ context.Context, e *env, args []string) error {
			fs := newFlagSet("list", listUsage, e)
			if err := parse(fs, args); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCENARIO\tSTRATEGY\tTOPOLOGY\tEXPECT\tDESCRIPTION")
			for _, s := range scenarios.All() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Strategy, s.Topology, s.Expect, s.Description)
			}
			return tw.Flush()
		},
	}
}

// runUsage names the default leader wait from the scenarios package, so
// the help cannot drift from it.
var runUsage = `Usage: doublerun run --scenario NAME|--file FILE [--out DIR] [--json] [--duration D] [--replicas N] [--versions SET] [--leader-wait D]

Starts a stack (DOUBLERUN_PROVIDER), runs the scenario's replicas as
separate processes, measures the double-run and leaderless windows through
the oracle, and judges them against the scenario's expectation. --versions
(or DOUBLERUN_VERSIONS) picks the servers' version set, default the newest;
the report names the exact versions. Prints one
line per scenario; --json prints the whole report instead. Exits 1 when the
verdict fails, 2 on a usage error, 130 on Ctrl-C (after removing what it
started). See ` + "`doublerun list`" + ` for the names.

--file runs a scenario written as data instead: a JSON object in the form
of the "scenario" object of a report.json (durations in nanoseconds, or
strings such as "5s"; fields left out take their defaults), so a user can
try a topology, timings and a fault without writing Go. Examples are in
testdata/scenarios. A bad file gets one line naming the field and the fix.

The measurement starts at the first piece of leader work a replica
reports; --leader-wait (default ` + scenarios.DefaultLeaderWait.String() + `) is how long the run waits for it
before it fails. Give a program that builds, migrates or warms up before
it contends longer.
`

func runCommand() command {
	return command{
		name: "run", summary: "run one scenario and judge it", usage: runUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			fs := newFlagSet("run", runUsage, e)
			name := fs.String("scenario", "", "a built-in scenario's name (this or --file)")
			file := fs.String("file", "", "a scenario written as JSON, like report.json's scenario object (this or --scenario)")
			out := fs.String("out", "reports", "directory for report.json, report.md, timeline.svg and replica logs; empty for none")
			asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
			duration := fs.Duration("duration", 0, "measure for this long instead of the scenario's default")
			replicas := fs.Int("replicas", 0, replicasHelp)
			versions := fs.String("versions", "", versionsHelp)
			leaderWait := fs.Duration("leader-wait", 0, "how long to wait for the first piece of leader work before failing (default "+scenarios.DefaultLeaderWait.String()+")")
			if err := parse(fs, args); err != nil {
				return err
			}
			if fs.isSet("leader-wait") && *leaderWait < time.Second {
				return usageError{fmt.Sprintf("--leader-wait %s is shorter than any replica takes to start; use 1s or more, or leave it out for %s", *leaderWait, scenarios.DefaultLeaderWait)}
			}
			set, err := oneVersionSet(*versions)
			if err != nil {
				return err
			}
			sc, err := scenarioOf(*name, *file)
			if err != nil {
				return err
			}
			flagOf := map[string]string{}
			if fs.isSet("duration") {
				if *duration == 0 {
					return usageError{fmt.Sprintf("--duration 0s is not a duration to measure; leave it out for the scenario's own (%s)", cmp.Or(sc.Duration, scenarios.DefaultDuration))}
				}
				sc.Duration, flagOf["duration"] = *duration, "duration"
			}
			if n, err := replicasOf(fs, *replicas); err != nil {
				return err
			} else if n != 0 {
				sc.Replicas, flagOf["replicas"] = n, "replicas"
			}
			if err := validate(sc, flagOf); err != nil {
				return err
			}
			if sc.Replica != nil {
				// Before the stack starts: one line, exit 2.
				if err := sc.Replica.Check(); err != nil {
					return envError{err.Error()}
				}
			}
			s, done, err := stackFor(ctx, e, set, *out, sc.Standby)
			if err != nil {
				return err
			}
			defer done()
			if !*asJSON {
				fmt.Fprintln(e.stdout, versionsLine(s))
			}
			rep, err := scenarios.Run(ctx, sc, scenarios.RunOptions{Stack: s, OutDir: *out, Logger: e.log, LeaderWait: *leaderWait})
			if err != nil {
				if ctx.Err() != nil {
					logs := ""
					if *out != "" {
						logs = fmt.Sprintf(" (replica logs: %s)", filepath.Join(*out, sc.Name, "replicas"))
					}
					return fmt.Errorf("interrupted before the verdict of %s; no report was written%s; the stack and replicas are gone", sc.Name, logs)
				}
				return err
			}
			if *out != "" {
				if err := report.Write(*out, rep); err != nil {
					return err
				}
			}
			if *asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(e.stdout, report.Line(rep))
				if p := rep.Protocol; p != nil && p.Mode == replica.ModeLog {
					fmt.Fprintf(e.stdout, "log mode: the times are the runner's receipt of %d matching lines (of %d); receipt lag median %s, max %s\n",
						p.Matched, p.Lines, time.Duration(p.ReceiptLagMedian).Round(time.Microsecond), time.Duration(p.ReceiptLagMax).Round(time.Microsecond))
				}
				if *out != "" {
					fmt.Fprintf(e.stdout, "report: %s/%s/report.md, timeline: %s/%s/timeline.svg\n", *out, sc.Name, *out, sc.Name)
				}
			}
			if err := rep.Verdict.Err(); err != nil && rep.Verdict.Inconclusive {
				return fmt.Errorf("scenario %s: %w", sc.Name, err)
			} else if err != nil {
				return fmt.Errorf("scenario %s: verdict failed: %w", sc.Name, err)
			}
			return nil
		},
	}
}

const reproUsage = `Usage: doublerun repro 556 [--out DIR] [--versions SET]
       doublerun repro failover [--out DIR] [--versions SET]

Reproduces issue #556 and checks its fixes:
  1. the advisory lease, 2 replicas, transaction pooling with a pool of one:
     both replicas leader on the same backend PID, double-run window > 0;
  2. the PID guard's effect: advisory-unguarded against advisory at pool
     sizes 2 to 4;
  3. the fixes: the pinned endpoint (double-run 0), the fenced lease
     (0 accepted stale writes), and one PgBouncer serving the database
     under a session-mode name for the lease and a transaction-mode name
     for the work (alias; double-run 0).
Prints "Successful reproduction" and exits 0 only if 1 reproduced and 3
held; otherwise prints "Failed to reproduce" and exits 1. --versions (or
DOUBLERUN_VERSIONS) picks the servers' version set; the reports name the
exact versions.

failover reproduces issue 32 on a stack with an asynchronous standby:
PRIMARY_FAILOVER_LOSSY (the standby detached, the leader frozen while
another is granted the lease on the primary alone, the primary killed, the
standby promoted) under
  1. the fenced lease: the token goes back (granted again or below one
     already acknowledged), or a stale write is accepted, or the history
     of grants and writes has no legal order;
  2. the epoch fence (strategy fenced-epoch): no accepted stale write, no
     token regression, a legal order.
Prints the failover's steps on the oracle's clock and the lost writes,
then "Successful reproduction" and exits 0 only if 1 broke and 2 held.
`

func reproCommand() command {
	return command{
		name: "repro", summary: "reproduce a known limitation (556, failover) and check its fixes", usage: reproUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usageError{"missing issue; known: 556, failover"}
			}
			if isHelp(args[0]) {
				fmt.Fprint(e.stdout, reproUsage)
				return nil
			}
			if args[0] == "failover" {
				return reproFailover(ctx, e, args[1:])
			}
			if args[0] != "556" {
				return usageError{fmt.Sprintf("unknown issue %q; known: 556, failover", args[0])}
			}
			fs := newFlagSet("repro 556", reproUsage, e)
			out := fs.String("out", "reports/repro-556", "directory for the reports; empty for none")
			versions := fs.String("versions", "", versionsHelp)
			if err := parse(fs, args[1:]); err != nil {
				return err
			}
			set, err := oneVersionSet(*versions)
			if err != nil {
				return err
			}
			s, done, err := stackFor(ctx, e, set, *out, "")
			if err != nil {
				return err
			}
			defer done()
			fmt.Fprintln(e.stdout, versionsLine(s))
			begin := time.Now()
			res, err := scenarios.Repro556(ctx, scenarios.RunOptions{Stack: s, OutDir: *out, Logger: e.log},
				func(rep *scenarios.Report) error {
					fmt.Fprintln(e.stdout, report.Line(rep))
					if *out == "" {
						return nil
					}
					return report.Write(*out, rep)
				})
			if err != nil {
				if ctx.Err() != nil {
					return errors.New("interrupted before the reproduction finished; the stack and replicas are gone")
				}
				fmt.Fprintln(e.stdout, "Failed to reproduce")
				return err
			}
			report.Repro556(e.stdout, res)
			fmt.Fprintf(e.stdout, "took %s; reports in %s\n", time.Since(begin).Round(time.Second), cmp.Or(*out, "no directory (--out is empty)"))
			if err := res.Verdict().Err(); err != nil {
				fmt.Fprintln(e.stdout, "Failed to reproduce")
				return fmt.Errorf("issue 556: %w", err)
			}
			fmt.Fprintln(e.stdout, "Successful reproduction")
			return nil
		},
	}
}

// checkEnv reads the stack's environment variables as the stack will, so
// that one it cannot take (a stack.EnvError, exit 2) stops the command
// before it creates anything. versions is the --versions flag, "" for
// DOUBLERUN_VERSIONS.
func checkEnv(versions string) error {
	_, err := stack.Options{Versions: versions}.FromEnv()
	return err
}

// startStack starts the stack the environment names and returns its
// cleanup.
func startStack(ctx context.Context, e *env) (*stack.Stack, func(), error) {
	return startStackOn(ctx, e, "", "")
}

// stackFor is how a command that runs on a stack of its own starts: it
// reads the environment the stack will read (a variable it cannot take
// stops the command before anything is made), makes the --out directory
// out ("" for none) and starts a stack of the version set set ("" for the
// stack's own choice), with a standby in mode standby ("" for none, see
// stack.Options.Replication). done shuts the stack down, then removes out again
// if it was made and is still empty; on an error nothing is left.
func stackFor(ctx context.Context, e *env, set, out string, standby stack.ReplicationMode) (s *stack.Stack, done func(), err error) {
	if err := checkEnv(set); err != nil {
		return nil, nil, err
	}
	dropEmptyOut, err := outDir("out", out)
	if err != nil {
		return nil, nil, err
	}
	s, closeStack, err := startStackOn(ctx, e, set, standby)
	if err != nil {
		dropEmptyOut()
		return nil, nil, err
	}
	return s, func() {
		closeStack()
		dropEmptyOut()
	}, nil
}

// scenarioOf is the built-in scenario called name, or the one written in
// file; exactly one of them must be given.
func scenarioOf(name, file string) (scenarios.Scenario, error) {
	switch {
	case name != "" && file != "":
		return scenarios.Scenario{}, usageError{"--scenario and --file both given; give one"}
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return scenarios.Scenario{}, usageError{fmt.Sprintf("--file: %v; give the path of a scenario JSON file, such as testdata/scenarios/alias-reconnect.json", err)}
		}
		sc, err := scenarios.ParseScenario(data, strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)))
		if err != nil {
			return scenarios.Scenario{}, usageError{fmt.Sprintf("%s: %v", file, err)}
		}
		return sc, nil
	case name == "":
		return scenarios.Scenario{}, usageError{"--scenario or --file is required; `doublerun list` shows the names, testdata/scenarios has files"}
	}
	sc, err := scenarios.Lookup(name)
	if err != nil {
		return scenarios.Scenario{}, usageError{err.Error()}
	}
	return sc, nil
}

// reproFailover is `doublerun repro failover`: the plain and the epoch
// fence across a lossy promotion, on a stack with an asynchronous standby.
func reproFailover(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("repro failover", reproUsage, e)
	out := fs.String("out", "reports/repro-failover", "directory for the reports; empty for none")
	versions := fs.String("versions", "", versionsHelp)
	if err := parse(fs, args); err != nil {
		return err
	}
	set, err := oneVersionSet(*versions)
	if err != nil {
		return err
	}
	s, done, err := stackFor(ctx, e, set, *out, stack.ReplicationAsync)
	if err != nil {
		return err
	}
	defer done()
	fmt.Fprintln(e.stdout, versionsLine(s))
	begin := time.Now()
	res, err := scenarios.ReproFailover(ctx, scenarios.RunOptions{Stack: s, OutDir: *out, Logger: e.log},
		func(rep *scenarios.Report) error {
			fmt.Fprintln(e.stdout, report.Line(rep))
			if *out == "" {
				return nil
			}
			return report.Write(*out, rep)
		})
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted before the reproduction finished; the stack and replicas are gone")
		}
		fmt.Fprintln(e.stdout, "Failed to reproduce")
		return err
	}
	report.ReproFailover(e.stdout, res)
	fmt.Fprintf(e.stdout, "took %s; reports in %s\n", time.Since(begin).Round(time.Second), cmp.Or(*out, "no directory (--out is empty)"))
	if err := res.Verdict().Err(); err != nil {
		fmt.Fprintln(e.stdout, "Failed to reproduce")
		return fmt.Errorf("issue 32: %w", err)
	}
	fmt.Fprintln(e.stdout, "Successful reproduction")
	return nil
}
