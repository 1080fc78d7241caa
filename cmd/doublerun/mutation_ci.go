package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doublerun/doublerun/mutation"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// The gated packages, and those of them whose every mutant runs on every
// submission. None is cheap enough: scenarios/oracle ran whole every time
// while its tests were pure logic (1.3 s a mutant), but since they check
// its SQL functions on a server a mutant costs 8.1 s, its 186 mutants 25
// min, and like lease and worker it runs one shard a submission.
var (
	gatedPackages = []string{"lease", "worker", "scenarios/oracle"}
	wholePackages []string
)

// recordShards is how many shards a record written from scratch splits
// the gated packages' lines into: each submission's gate runs one. At 8
// a shard's gremlins took 8.5 to 13 min on the slower kind of
// two-core machine, and .ci/run took 1517 s at 2eb404b, past its 25
// minutes; at 16 the gate runs half as many mutants and guards, and 16
// submissions in a row cover them all.
const recordShards = 16

// checkShards refuses a record shard count outside 1 to 64, for every
// subcommand's --shards.
func checkShards(n int) error {
	if n < 1 || n > 64 {
		return usageError{fmt.Sprintf("--shards must be from 1 to 64, not %d", n)}
	}
	return nil
}

// gateEnv is what every mutant's and guard's go test gets beside the
// shared stack's variables: no cached results (a cached coverage run makes
// every gremlins mutant time out, gremlins#267), no vet (it judges the
// mutant's style, not the tests), and no DWARF, the bulk of a test
// binary's link time.
const gateGOFLAGS = "-count=1 -vet=off -ldflags=-w"

// gateTags leaves the docker provider out of the mutants' test binaries:
// they reach the shared stack through the external provider.
const gateTags = "doublerun_nodocker"

// mutationCI is `doublerun mutation ci`, the gate every submission
// passes: gremlins on the lines changed since the record's base, on one
// shard of the gated packages in turn and on every mutant of the whole
// packages, then the named guards that change touched and those of the
// shard (mutation.PickGuards).
func mutationCI(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mutation ci", mutationUsage, e)
	recordFile := fs.String("record", "testdata/mutation/record.json", "the last passing gate run's record, relative to the repository root unless given")
	eqFile := fs.String("equivalents", "testdata/mutation/equivalents.json", "listed equivalent mutants, relative to the repository root unless given")
	manifest := fs.String("manifest", mutation.DefaultManifests, "glob of guard manifests, relative to the repository root unless given")
	budget := fs.Duration("budget", 8*time.Minute, "bound on the estimated wall time of the mutants on changed lines outside the shard; a change that would take longer fails at once")
	shardFlag := fs.Int("shard", 0, "the shard to run, from 1 to the record's shard count; default: 1 + the number of commits in HEAD's history modulo that count")
	out := fs.String("out", "out/mutation-ci", "directory for gremlins' reports")
	packages := fs.String("packages", strings.Join(gatedPackages, ","), "the gated packages to run, comma-separated; fewer than all is for a local look, not a gate")
	guards := fs.Bool("guards", true, "run the named guards too: those of the shard and those whose file, package or manifest changed since the base")
	allGuards := fs.Bool("all-guards", false, "run every named guard, not only the shard's and the changed ones")
	write := fs.Bool("write-record", false, "after a passing run on a clean working tree, write the record: this commit as the base, the mutants this run measured, the others carried over")
	shards := fs.Int("shards", 0, "with --write-record: the shard count of the record it writes (a run of the old count's shard writes it); default: the record's own")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.isSet("shards") && !*write {
		return usageError{"--shards is the shard count of the record --write-record writes; give --write-record too"}
	}
	if fs.isSet("shards") {
		if err := checkShards(*shards); err != nil {
			return err
		}
	}
	root, err := repoRoot(fs, "mutation ci", fileFlag{"record", recordFile}, fileFlag{"equivalents", eqFile}, fileFlag{"manifest", manifest})
	if err != nil {
		return err
	}
	var pkgs []string
	for _, p := range strings.Split(*packages, ",") {
		p = strings.Trim(strings.TrimSpace(p), "./")
		if !slices.Contains(gatedPackages, p) {
			return usageError{fmt.Sprintf("--packages: %q is not a gated package; choose from %s", p, strings.Join(gatedPackages, ", "))}
		}
		pkgs = append(pkgs, p)
	}
	if *write && len(pkgs) < len(gatedPackages) {
		return usageError{"--write-record needs every gated package: a record's base covers all of them"}
	}
	rec, err := mutation.ReadRecord(*recordFile)
	if err != nil {
		return err
	}
	eq, err := mutation.ReadEquivalents(*eqFile)
	if err != nil {
		return err
	}
	eq, stale := eq.Locate(root)
	if len(stale) > 0 {
		for _, s := range stale[1:] {
			fmt.Fprintln(e.stdout, "FAIL "+s)
		}
		return errors.New(stale[0])
	}
	shard := *shardFlag - 1 // from 0 inside
	if !fs.isSet("shard") {
		n, err := commitCount(ctx, root)
		if err != nil {
			return err
		}
		shard = n % rec.Shards
	}
	if shard < 0 || shard >= rec.Shards {
		return usageError{fmt.Sprintf("--shard must be from 1 to %d (the record has %d shards), not %d", rec.Shards, rec.Shards, *shardFlag)}
	}
	var pick mutation.GuardPick
	if *guards {
		gs, err := mutation.LoadManifests(*manifest)
		if err != nil {
			return err
		}
		pick = mutation.GuardPick{Guards: gs, Changed: len(gs)}
		if !*allGuards {
			changed, err := mutation.ChangedFiles(ctx, root, rec.Base)
			if err != nil {
				return err
			}
			pick = mutation.PickGuards(gs, root, changed, shard, rec.Shards)
		}
		fmt.Fprintf(e.stderr, "mutation: %d of %d named guards: %d touched by the change since the base, %d of shard %d\n",
			len(pick.Guards), len(gs), pick.Changed, pick.Shard, shard+1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	begin := time.Now()
	g, err := newGateRun(ctx, e, root)
	if err != nil {
		return err
	}
	defer g.close()

	run, err := mutation.RunCI(ctx, mutation.CIOptions{
		Root: root, Gremlins: g.gremlins, Config: filepath.Join(root, ".gremlins.yaml"),
		Packages: pkgs, Whole: wholePackages, Record: rec, Equivalents: eq,
		Shard: shard, Budget: *budget, Env: g.env, Tags: gateTags, TimeoutCoefficient: gremlinsCoefficient(root),
		TempDir: g.tmp, OutDir: outDir,
		Logf: func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	failures := printCI(e, run, shard, rec.Shards)
	fmt.Fprintf(e.stdout, "gremlins: %s (estimated %s, of which the change outside the shard %s)\n", run.Elapsed.Round(time.Second), run.Estimate.Round(time.Second), run.Change.Round(time.Second))

	var guardFailed []string
	if *guards {
		gbegin := time.Now()
		results, err := runGuardsQuietly(ctx, e, pick.Guards, g)
		if err != nil {
			return err
		}
		for _, r := range results {
			if !r.Passed() {
				guardFailed = append(guardFailed, fmt.Sprintf("guard %s %s: %s", r.ID, r.Outcome, r.Detail))
			}
			if r.Rerun != "" {
				fmt.Fprintf(e.stdout, "RE-RUN guard %s %s\n", r.ID, r.Rerun)
			}
		}
		fmt.Fprintf(e.stdout, "named guards: %d of %d killed in %s\n", len(results)-len(guardFailed), len(results), time.Since(gbegin).Round(time.Second))
	}
	failures = append(failures, guardFailed...)
	fmt.Fprintf(e.stdout, "mutation ci: shard %d/%d, base %s, %s in all\n", shard+1, rec.Shards, rec.Base[:min(12, len(rec.Base))], time.Since(begin).Round(time.Second))
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(e.stdout, "FAIL "+f)
		}
		more := ""
		if len(failures) > 1 {
			more = fmt.Sprintf(" (and %d more above)", len(failures)-1)
		}
		return fmt.Errorf("gate failed: %s%s", failures[0], more)
	}
	if *write {
		return writeCIRecord(ctx, e, root, *recordFile, rec, run, *shards)
	}
	return nil
}

// printCI prints each package's part and changed lines (figures for
// reading; the gate compares mutants, never percentages), every timed-out
// mutant re-run alone with both runs' times, and returns the failures.
func printCI(e *env, run mutation.CIRun, shard, shards int) []string {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PACKAGE\tPART\tEFFICACY\tCOVERAGE\tKILLED\tLIVED\tNOT COVERED\tRE-RUN ALONE\tEXCUSED\tCHANGED LINES\tTHEIR MUTANTS")
	var failures []string
	for i, r := range run.Results {
		p := run.Packages[i]
		part := fmt.Sprintf("shard %d/%d", shard+1, shards)
		if p.Whole {
			part = "every mutant"
		}
		s := r.Part.Score
		fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%.2f%%\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Name, part, s.Efficacy(), s.Coverage(),
			s.Killed, s.Lived, s.NotCovered, len(p.Reruns), r.Part.Excused, p.Changed.Lines(), r.Changed.Score.Tested()+r.Changed.Score.NotCovered)
		failures = append(failures, r.Failures...)
	}
	tw.Flush()
	for _, p := range run.Packages {
		for _, rr := range p.Reruns {
			fmt.Fprintf(e.stdout, "RE-RUN %s\n", rr)
		}
	}
	return failures
}

// gremlinsCoefficient is .gremlins.yaml's timeout-coefficient (gremlins'
// default 3 when it sets none), for naming the bound a mutant timed out
// at.
func gremlinsCoefficient(root string) int {
	data, err := os.ReadFile(filepath.Join(root, ".gremlins.yaml"))
	if err != nil {
		return 3
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "timeout-coefficient:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
				return n
			}
		}
	}
	return 3
}

// writeCIRecord writes the record of a passing per-submission run
// (Record.After). Only a clean working tree is recorded: the base must be
// the code that passed.
func writeCIRecord(ctx context.Context, e *env, root, file string, rec mutation.Record, run mutation.CIRun, shards int) error {
	head, err := cleanHead(ctx, root)
	if err != nil {
		return err
	}
	next := rec.After(root, run, head, mutation.KindCI)
	if shards > 0 {
		// The record keeps every mutant by identity, not by shard, so
		// a new count is only a new split of the same lines (ShardOf).
		next.Shards = shards
	}
	if err := next.Write(file); err != nil {
		return fmt.Errorf("write the record: %w", err)
	}
	fmt.Fprintf(e.stdout, "record %s: base %s, %d shards; commit it to move the next gate's base here\n", file, head[:12], next.Shards)
	return nil
}

// gateRun is what a gate run shares: a temp dir (gremlins' copies of the
// module, the binaries), the gremlins binary, and one stack every mutant
// and guard reaches.
type gateRun struct {
	tmp, gremlins string
	env           []string
	stack         *stack.Stack
	close         func()
}

// newGateRun builds gremlins and starts the shared stack: the native
// provider first (servers as child processes on /dev/shm start in a
// second and answer fastest), else DOUBLERUN_PROVIDER's route. Its route
// line says which.
func newGateRun(ctx context.Context, e *env, root string) (*gateRun, error) {
	tmp, err := os.MkdirTemp("", "doublerun-mutation-")
	if err != nil {
		return nil, err
	}
	// The native provider's servers run as the postgres user and need to
	// reach their dirs under it.
	_ = os.Chmod(tmp, 0o755)
	g := &gateRun{tmp: tmp, gremlins: filepath.Join(tmp, "gremlins")}
	g.close = func() { os.RemoveAll(tmp) }
	build := exec.CommandContext(ctx, "go", "build", "-o", g.gremlins, "github.com/go-gremlins/gremlins/cmd/gremlins")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		g.close()
		return nil, fmt.Errorf("build gremlins: %v: %s", err, strings.TrimSpace(string(out)))
	}
	opts := stack.Options{Logger: e.log}
	if os.Getenv(stack.EnvProvider) == "" {
		opts.Provider = stack.ProviderNative
	}
	s, err := stack.Start(ctx, opts)
	if err != nil && opts.Provider == stack.ProviderNative {
		e.log.Info("the native provider cannot start; trying the others", "err", err)
		opts.Provider = ""
		s, err = stack.Start(ctx, opts)
	}
	if err != nil {
		g.close()
		return nil, fmt.Errorf("shared stack: %w", err)
	}
	g.stack = s
	g.close = func() {
		_ = s.Shutdown(ctx)
		os.RemoveAll(tmp)
	}
	g.env = append(s.Env(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" "+gateGOFLAGS))
	return g, nil
}

// runGuardsQuietly runs the named guards on the gate run's stack and
// prints a line only for a guard that is not killed.
func runGuardsQuietly(ctx context.Context, e *env, guards []mutation.Guard, g *gateRun) ([]mutation.GuardResult, error) {
	results, err := mutation.RunGuards(ctx, guards, mutation.GuardOptions{
		Env: g.env, Tags: gateTags, TempDir: g.tmp, Logger: e.log,
		Progress: func(i int, r mutation.GuardResult) {
			if r.Rerun != "" {
				fmt.Fprintf(e.stderr, "guard %s re-run: %s\n", r.ID, r.Rerun)
			}
			if !r.Passed() {
				fmt.Fprintf(e.stderr, "guard %s %s: %s\n", r.ID, r.Outcome, r.Detail)
				if r.Output != "" {
					fmt.Fprintf(e.stderr, "%s\n", indent(r.Output, "    | "))
				}
			}
		},
	})
	if errors.Is(err, context.Canceled) {
		return nil, errors.New("interrupted; nothing was left behind")
	}
	return results, err
}
