package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/doublerun/doublerun/mutation"
	"github.com/doublerun/doublerun/scenarios/stack"
)

const mutationUsage = `Usage:
  doublerun mutation ci     [--shard K] [--budget D] [--write-record [--shards N]] [--guards=false] [--all-guards]
                            [--packages LIST]
                            [--record FILE] [--equivalents FILE]
                            [--manifest GLOB] [--out DIR]
  doublerun mutation full   [--packages LIST] [--shard K/N] [--shards N]
                            [--write-record] [--record FILE] [--equivalents FILE] [--out DIR]
  doublerun mutation record [--at COMMIT] [--record FILE] [--shards N] [--out DIR]
  doublerun mutation guards [--manifest GLOB] [--guard REGEX] [--parallel N]
                            [--timeout D] [--share-stack] [--json]
  doublerun mutation gate   --report [NAME=]FILE [--report ...] [--merge]
                            [--baseline FILE] [--equivalents FILE]
                            [--min-efficacy X] [--min-coverage Y]
                            [--write-baseline] [--write-record]

ci      the gate of every submission (make mutation-ci): gremlins on every
        mutant of the lines changed since the base that
        testdata/mutation/record.json names and on one shard of the
        lines of lease, worker and scenarios/oracle in turn (1 + commits
        modulo shards), then the named guards whose file,
        package or manifest changed since the base and those of the
        shard (--all-guards for every one), all on one shared stack.
        Each mutant is compared with the record's (by file, line text
        and mutator): a mutant of a changed line must be KILLED (or not
        compile); a recorded covered mutant must not be NOT COVERED; a
        LIVED mutant fails unless testdata/mutation/equivalents.json
        lists it. Percentages are printed, never compared. A TIMED OUT
        mutant or guard is run again alone, bounded by three times its
        package's clean test time in the same run (5 s at least), and judged by that
        run; the output names each with both times. A change whose own
        mutants (on changed lines outside the shard) would take longer
        than --budget fails at once: run make mutation and commit its
        record.

full    gremlins on every mutant of the gated packages (make mutation), or
        of one shard of their lines (--shard K/N, a nightly job), on one
        shared stack, timed-out mutants re-run alone as in ci; unsharded,
        judges every mutant against the record as ci does, and
        --write-record writes the record on a pass.

record  the record of a commit (default: the record's base) from a
        gremlins dry run of each gated package in a worktree of it: every
        mutant RUNNABLE or NOT COVERED as that commit's go test -cover
        found it, the cost of a mutant kept from the old record. Minutes,
        where make mutation takes most of an hour.

guards  applies each named guard mutant of the manifests (see
        testdata/mutation/README.md) through go test -overlay, runs the
        guard's tests unmutated and then mutated, and fails unless every
        guard is KILLED. The working tree is never written; Ctrl-C stops
        every go test and removes every temporary file. Each go test starts
        its own stack (DOUBLERUN_PROVIDER), unless --share-stack: then the
        command starts one and passes it to every go test through the
        external provider; tests that add a PgBouncer of their own then
        run it as a local process, so a pgbouncer binary must be installed.

gate    reads gremlins JSON reports (gremlins unleash --output FILE), one
        per package (several per package with --merge: a nightly run's
        shards); NAME is the package directory ("lease"), by default
        FILE's base name without .json. It prints efficacy and mutant
        coverage per package and every LIVED and NOT COVERED mutant, and
        fails when a package is below --min-efficacy or --min-coverage or
        below its figures in the baseline, and, with --equivalents, on
        every LIVED mutant the file does not list (listed ones count in no
        score). A score equal to a threshold passes. A file that is not a
        whole gremlins v0.6.0 report is refused. --write-baseline raises
        the baseline to a passing run's figures, never lowering them;
        --write-record writes the record of a passing run.
`

func mutationCommand() command {
	return command{
		name:    "mutation",
		summary: "gate every submission (ci), run gremlins whole (full), record a commit's mutants (record), prove the guards' tests (guards), gate reports (gate)",
		usage:   mutationUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usageError{"missing subcommand: ci, full, guards, gate or record"}
			}
			switch args[0] {
			case "ci":
				return mutationCI(ctx, e, args[1:])
			case "full":
				return mutationFull(ctx, e, args[1:])
			case "guards":
				return mutationGuards(ctx, e, args[1:])
			case "gate":
				return mutationGate(ctx, e, args[1:])
			case "record":
				return mutationRecord(ctx, e, args[1:])
			case "-h", "-help", "--help", "help":
				fmt.Fprint(e.stdout, mutationUsage)
				return nil
			}
			return usageError{fmt.Sprintf("unknown subcommand %q: use ci, full, guards, gate or record", args[0])}
		},
	}
}

func mutationGuards(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mutation guards", mutationUsage, e)
	manifest := fs.String("manifest", mutation.DefaultManifests, "glob of guard manifests, relative to the repository root unless given")
	only := fs.String("guard", "", "run only the guards whose id matches this regular expression")
	parallel := fs.Int("parallel", mutation.DefaultParallel, "go test processes at once")
	timeout := fs.Duration("timeout", mutation.DefaultGuardTimeout, "bound on each go test run, compile included")
	share := fs.Bool("share-stack", false, "start one stack and pass it to every guard's tests (external provider); tests that add a PgBouncer need a local pgbouncer binary")
	asJSON := fs.Bool("json", false, "print the results as JSON on stdout")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *parallel < 1 {
		return usageError{fmt.Sprintf("--parallel must be at least 1, not %d", *parallel)}
	}
	if *timeout <= 0 {
		return usageError{fmt.Sprintf("--timeout must be positive, not %s", *timeout)}
	}
	if err := defaultInRepo(fs, "manifest", manifest, "mutation guards", "--manifest GLOB"); err != nil {
		return err
	}
	guards, err := selectGuards(*manifest, *only)
	if err != nil {
		return err
	}
	var extraEnv []string
	if *share && os.Getenv(stack.EnvProvider) != string(stack.ProviderExternal) {
		s, closeStack, err := startStack(ctx, e)
		if err != nil {
			return fmt.Errorf("shared stack: %w", err)
		}
		defer closeStack()
		extraEnv = s.Env()
		e.log.Info("shared stack up; every guard's tests use it", "provider", s.Provider())
	}

	var mu sync.Mutex
	done := 0
	begin := time.Now()
	results, err := mutation.RunGuards(ctx, guards, mutation.GuardOptions{
		Parallel: *parallel,
		Timeout:  *timeout,
		Env:      extraEnv,
		Logger:   e.log,
		Progress: func(i int, r mutation.GuardResult) {
			mu.Lock()
			defer mu.Unlock()
			done++
			fmt.Fprintf(e.stderr, "[%d/%d] %s %s %s: %s\n", done, len(guards), r.ID, r.Outcome, r.Duration.Round(100*time.Millisecond), r.Detail)
			if r.Rerun != "" {
				fmt.Fprintf(e.stderr, "    re-run: %s\n", r.Rerun)
			}
			if !r.Passed() && r.Output != "" {
				fmt.Fprintf(e.stderr, "%s\n", indent(r.Output, "    | "))
			}
		},
	})
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted after %d of %d guards; nothing was left behind", done, len(guards))
	}
	if err != nil {
		return err
	}
	return printGuards(e, results, time.Since(begin), *asJSON)
}

// selectGuards loads the manifests that glob matches and keeps the guards
// whose id matches the regular expression only (all of them when it is
// empty).
func selectGuards(glob, only string) ([]mutation.Guard, error) {
	var re *regexp.Regexp
	if only != "" {
		var err error
		if re, err = regexp.Compile(only); err != nil {
			return nil, usageError{fmt.Sprintf("--guard %q: %v", only, err)}
		}
	}
	guards, err := mutation.LoadManifests(glob)
	if err != nil || re == nil {
		return guards, err
	}
	var kept []mutation.Guard
	for _, g := range guards {
		if re.MatchString(g.ID) {
			kept = append(kept, g)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("no guard id in %s matches --guard %q", glob, only)
	}
	return kept, nil
}

// printGuards prints the results, as a table or as JSON, and fails unless
// every guard was killed.
func printGuards(e *env, results []mutation.GuardResult, took time.Duration, asJSON bool) error {
	var failed []string
	for _, r := range results {
		if !r.Passed() {
			failed = append(failed, fmt.Sprintf("%s (%s)", r.ID, r.Outcome))
		}
	}
	if asJSON {
		out := struct {
			Passed  bool                   `json:"passed"`
			Seconds float64                `json:"seconds"`
			Guards  []mutation.GuardResult `json:"guards"`
		}{len(failed) == 0, took.Seconds(), results}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GUARD\tOUTCOME\tDURATION\tDETAIL")
		for _, r := range results {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Outcome, r.Duration.Round(100*time.Millisecond), r.Detail)
		}
		tw.Flush()
		for _, r := range results {
			if r.Rerun != "" {
				fmt.Fprintf(e.stdout, "RE-RUN guard %s %s\n", r.ID, r.Rerun)
			}
		}
		fmt.Fprintf(e.stdout, "%d of %d guards killed in %s\n", len(results)-len(failed), len(results), took.Round(time.Second))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d guards not killed: %s", len(failed), len(results), strings.Join(failed, ", "))
	}
	return nil
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// reportFlags collects repeated --report [NAME=]FILE flags.
type reportFlags []reportFlag

type reportFlag struct{ name, file string }

func (r *reportFlags) String() string { return "" }

func (r *reportFlags) Set(v string) error {
	name, file, ok := strings.Cut(v, "=")
	if !ok {
		file = v
		name = strings.TrimSuffix(filepath.Base(v), ".json")
	}
	if name == "" || file == "" {
		return fmt.Errorf("want NAME=FILE or FILE, not %q", v)
	}
	*r = append(*r, reportFlag{name, file})
	return nil
}

func mutationGate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mutation gate", mutationUsage, e)
	var reports reportFlags
	fs.Var(&reports, "report", "gremlins JSON report of one package, as NAME=FILE or FILE (repeat per package)")
	merge := fs.Bool("merge", false, "join the reports of one package (a run's shards) instead of refusing a second one")
	baselineFile := fs.String("baseline", "testdata/mutation/baseline.json", "committed per-package floor, relative to the repository root unless given; empty for none")
	eqFile := fs.String("equivalents", "", "listed equivalent mutants (testdata/mutation/equivalents.json): they count in no score, and every other LIVED mutant fails")
	minEff := fs.Float64("min-efficacy", 0, "lowest passing test efficacy per package, in percent")
	minCov := fs.Float64("min-coverage", 0, "lowest passing mutant coverage per package, in percent")
	write := fs.Bool("write-baseline", false, "after a passing gate, raise the baseline file to this run's figures")
	writeRecord := fs.String("write-record", "", "after a passing gate on a clean working tree, write the record of this commit to this file (testdata/mutation/record.json), with --shards shards")
	shards := fs.Int("shards", recordShards, "shards of the record --write-record writes")
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(reports) == 0 {
		return usageError{"missing --report; pass one gremlins JSON report per package"}
	}
	if *write && *baselineFile == "" {
		return usageError{"--write-baseline needs --baseline"}
	}
	if *writeRecord != "" && *eqFile == "" {
		return usageError{"--write-record needs --equivalents: a record is written only by a strict gate"}
	}
	if err := checkShards(*shards); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		value float64
	}{{"min-efficacy", *minEff}, {"min-coverage", *minCov}} {
		if f.value < 0 || f.value > 100 {
			return usageError{fmt.Sprintf("--%s must be a percentage from 0 to 100, not %g", f.name, f.value)}
		}
	}
	if err := defaultInRepo(fs, "baseline", baselineFile, "mutation gate", "--baseline FILE (or --baseline '' for none)"); err != nil {
		return err
	}
	prs, err := readReports(reports, *merge)
	if err != nil {
		return err
	}
	opts := mutation.GateOptions{MinEfficacy: *minEff, MinCoverage: *minCov}
	if *baselineFile != "" {
		b, err := mutation.ReadBaseline(*baselineFile)
		if err != nil {
			return err
		}
		opts.Baseline = b
	}
	var root string
	if *eqFile != "" {
		if opts.Equivalents, err = mutation.ReadEquivalents(*eqFile); err != nil {
			return err
		}
		opts.Strict = true
		if root, err = moduleRoot(); err != nil {
			return err
		}
	}
	return gateReports(ctx, e, prs, gateRequest{opts: opts, root: root, baselineFile: *baselineFile,
		raiseBaseline: *write, recordFile: *writeRecord, shards: *shards})
}

// gateRequest says what to gate reports against and what to write on a
// pass.
type gateRequest struct {
	opts mutation.GateOptions
	// root is the module root, where a strict gate checks the listed
	// equivalents against the code.
	root          string
	baselineFile  string
	raiseBaseline bool
	// recordFile, if set, gets the record of this commit with shards
	// shards.
	recordFile string
	shards     int
}

// gateReports gates prs, prints the table and, on a pass, raises the
// baseline or writes the record as asked.
func gateReports(ctx context.Context, e *env, prs []mutation.PackageReport, req gateRequest) error {
	opts := req.opts
	var stale []string
	if opts.Strict {
		opts.Equivalents, stale = opts.Equivalents.Locate(req.root)
	}
	res := mutation.Gate(prs, opts)
	res.Failures = append(res.Failures, stale...)
	printGate(e, res, opts)
	if len(res.Failures) > 0 {
		more := ""
		if len(res.Failures) > 1 {
			more = fmt.Sprintf(" (and %d more above)", len(res.Failures)-1)
		}
		return fmt.Errorf("gate failed: %s%s", res.Failures[0], more)
	}
	if req.raiseBaseline {
		raised := opts.Baseline.Raise(res.Packages)
		if err := raised.Write(req.baselineFile); err != nil {
			return fmt.Errorf("write baseline: %w", err)
		}
		fmt.Fprintf(e.stdout, "baseline %s raised to this run's figures\n", req.baselineFile)
	}
	if req.recordFile != "" {
		head, err := cleanHead(ctx, req.root)
		if err != nil {
			return err
		}
		rec, err := mutation.RecordFrom(req.root, head, req.shards, prs, mutation.KindFull)
		if err != nil {
			return err
		}
		if err := rec.Write(req.recordFile); err != nil {
			return fmt.Errorf("write the record: %w", err)
		}
		fmt.Fprintf(e.stdout, "record %s: base %s, %d shards; commit it\n", req.recordFile, head[:12], req.shards)
	}
	return nil
}

// readReports reads the reports, one per package, or joins a package's
// several (a run's shards) when merge is set.
func readReports(reports reportFlags, merge bool) ([]mutation.PackageReport, error) {
	var prs []mutation.PackageReport
	index := map[string]int{}
	var parts [][]mutation.Report
	for _, r := range reports {
		rep, err := mutation.ReadReport(r.file)
		if err != nil {
			return nil, err
		}
		i, seen := index[r.name]
		if !seen || !merge {
			index[r.name] = len(prs)
			prs = append(prs, mutation.PackageReport{Name: r.name, Report: rep})
			parts = append(parts, []mutation.Report{rep})
			continue
		}
		parts[i] = append(parts[i], rep)
	}
	for i := range prs {
		if len(parts[i]) > 1 {
			m, err := mutation.MergeReports(parts[i])
			if err != nil {
				return nil, fmt.Errorf("merge the reports of %s: %w", prs[i].Name, err)
			}
			prs[i].Report = m
		}
	}
	return prs, nil
}

func printGate(e *env, res mutation.GateResult, opts mutation.GateOptions) {
	pct := func(x float64) string { return fmt.Sprintf("%.2f%%", x) }
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PACKAGE\tEFFICACY\tCOVERAGE\tKILLED\tLIVED\tNOT COVERED\tTIMED OUT\tNOT VIABLE\tWALL\tS/MUTANT\tBASELINE")
	row := func(name string, s mutation.Score, elapsed time.Duration, baseline string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\t%s\n", name, pct(s.Efficacy()), pct(s.Coverage()),
			s.Killed, s.Lived, s.NotCovered, s.TimedOut, s.NotViable, elapsed.Round(time.Second), s.PerMutant(elapsed).Seconds(), baseline)
	}
	for _, p := range res.Packages {
		baseline := "-"
		if b, ok := opts.Baseline[p.Name]; ok {
			baseline = pct(b.Efficacy) + " / " + pct(b.Coverage)
		}
		row(p.Name, p.Score, p.Elapsed, baseline)
	}
	if len(res.Packages) > 1 {
		row("total", res.Total, res.Elapsed, "")
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "thresholds: efficacy %s, mutant coverage %s (a score equal to a threshold passes)\n", pct(opts.MinEfficacy), pct(opts.MinCoverage))
	for _, p := range res.Packages {
		for _, l := range p.Lived {
			fmt.Fprintf(e.stdout, "LIVED        %s\n", l)
		}
		for _, l := range p.NotCovered {
			fmt.Fprintf(e.stdout, "NOT COVERED  %s\n", l)
		}
	}
	for _, f := range res.Failures {
		fmt.Fprintf(e.stdout, "FAIL %s\n", f)
	}
}
