package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	if err := parse(fs, args); err != nil {
		return err
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
		return writeCIRecord(ctx, e, root, *recordFile, rec, run)
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
func writeCIRecord(ctx context.Context, e *env, root, file string, rec mutation.Record, run mutation.CIRun) error {
	head, err := cleanHead(ctx, root)
	if err != nil {
		return err
	}
	if err := rec.After(root, run, head, mutation.KindCI).Write(file); err != nil {
		return fmt.Errorf("write the record: %w", err)
	}
	fmt.Fprintf(e.stdout, "record %s: base %s; commit it to move the next gate's base here\n", file, head[:12])
	return nil
}

// cleanHead returns HEAD's commit, or an error when the working tree has
// changes: a record names the code that passed.
func cleanHead(ctx context.Context, root string) (string, error) {
	status, err := gitOutput(ctx, root, "status", "--porcelain")
	if err != nil {
		return "", err
	}
	if status != "" {
		return "", fmt.Errorf("not writing the record: the working tree has changes (%s); commit them and run again", strings.SplitN(status, "\n", 2)[0])
	}
	return gitOutput(ctx, root, "rev-parse", "HEAD")
}

// commitCount is the number of commits in HEAD's history; the
// per-submission gate takes shard commitCount mod n, so n consecutive
// submissions cover every shard.
func commitCount(ctx context.Context, root string) (int, error) {
	out, err := gitOutput(ctx, root, "rev-list", "--count", "HEAD")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// moduleRoot is the repository root, found from the working directory.
func moduleRoot() (string, error) {
	p, err := repoFile("go.mod")
	if err != nil {
		return "", fmt.Errorf("%v; run the mutation commands from inside it", err)
	}
	return filepath.Abs(filepath.Dir(p))
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

// mutationFull is `doublerun mutation full` (make mutation): gremlins on
// every mutant of the gated packages, or of one shard of their lines
// (--shard, a nightly job's slice), on one shared stack. Unsharded, it
// gates the reports (the baseline, and every LIVED mutant not listed as
// equivalent) and on a pass can write the record the per-submission gate
// starts from. A shard only writes its reports; `mutation gate --merge`
// joins the shards' and gates the whole.
func mutationFull(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mutation full", mutationUsage, e)
	packages := fs.String("packages", strings.Join(gatedPackages, ","), "the packages to mutate, comma-separated directories")
	shardFlag := fs.String("shard", "", "run only shard K of N of the packages' lines (K from 1), as K/N")
	shards := fs.Int("shards", 8, "how many shards the record splits each package's lines into")
	out := fs.String("out", "out/mutation", "directory for gremlins' reports")
	eqFile := fs.String("equivalents", "testdata/mutation/equivalents.json", "listed equivalent mutants, relative to the repository root unless given")
	recordFile := fs.String("record", "testdata/mutation/record.json", "where --write-record writes, relative to the repository root unless given")
	write := fs.Bool("write-record", false, "after a passing run on a clean working tree, write the record")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *shards < 1 || *shards > 64 {
		return usageError{fmt.Sprintf("--shards must be from 1 to 64, not %d", *shards)}
	}
	k, n := -1, 0
	if *shardFlag != "" {
		var err error
		if k, n, err = parseShard(*shardFlag); err != nil {
			return usageError{"--shard: " + err.Error()}
		}
		if *write {
			return usageError{"--write-record needs every shard; merge the shards' reports with mutation gate --merge --write-record"}
		}
	}
	root, err := repoRoot(fs, "mutation full", fileFlag{"record", recordFile}, fileFlag{"equivalents", eqFile})
	if err != nil {
		return err
	}
	var pkgs []string
	for _, p := range strings.Split(*packages, ",") {
		p = strings.Trim(strings.TrimSpace(p), "./")
		if st, err := os.Stat(filepath.Join(root, p)); p == "" || err != nil || !st.IsDir() {
			return usageError{fmt.Sprintf("--packages: %q is not a package directory of the repository, such as lease", p)}
		}
		pkgs = append(pkgs, p)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	g, err := newGateRun(ctx, e, root)
	if err != nil {
		return err
	}
	defer g.close()
	var prs []mutation.PackageReport
	var reruns [][]mutation.Rerun
	for _, p := range pkgs {
		var sel mutation.Selection
		if k >= 0 {
			if sel, err = mutation.ShardSelection(filepath.Join(root, p), k-1, n); err != nil {
				return err
			}
		}
		file := filepath.Join(outDir, strings.ReplaceAll(p, "/", "-")+".json")
		fmt.Fprintf(e.stderr, "mutation: gremlins on ./%s\n", p)
		start := time.Now()
		var log bytes.Buffer
		r, err := mutation.Unleash(ctx, mutation.UnleashOptions{Gremlins: g.gremlins, Root: root, Package: p,
			Config: filepath.Join(root, ".gremlins.yaml"), Selection: sel, Output: file, Env: g.env, TempDir: g.tmp, Log: &log})
		if errors.Is(err, mutation.ErrNothingSelected) {
			continue
		}
		if err != nil {
			return err
		}
		rr, err := mutation.RerunTimedOut(ctx, p, &r, mutation.GremlinsBound(log.String(), gremlinsCoefficient(root)),
			mutation.RerunOptions{Root: root, Tags: gateTags, Env: g.env, TempDir: g.tmp})
		if err != nil {
			return err
		}
		for _, x := range rr {
			fmt.Fprintf(e.stderr, "mutation: %s\n", x)
		}
		if len(rr) > 0 {
			// The report on disk is what a nightly merge reads: it gets
			// the re-runs' verdicts.
			if err := writeReport(file, r); err != nil {
				return err
			}
		}
		fmt.Fprintf(e.stderr, "mutation: ./%s done in %s; report %s\n", p, time.Since(start).Round(time.Second), file)
		prs = append(prs, mutation.PackageReport{Name: p, Report: r})
		reruns = append(reruns, rr)
	}
	if k >= 0 {
		fmt.Fprintf(e.stdout, "shard %d/%d: reports in %s; join every shard's with doublerun mutation gate --merge\n", k, n, outDir)
		return nil
	}
	eq, err := mutation.ReadEquivalents(*eqFile)
	if err != nil {
		return err
	}
	eq, stale := eq.Locate(root)
	// Every mutant is compared with the record's, as in the gate of a
	// submission; a first run, with no record, fails only on what lives.
	rec, err := mutation.ReadRecord(*recordFile)
	known := err == nil
	if !known {
		fmt.Fprintf(e.stderr, "mutation: no record to compare with (%v): every LIVED mutant fails, nothing else can\n", err)
		rec = mutation.Record{Shards: *shards}
	}
	var cps []mutation.CIPackage
	for i, pr := range prs {
		cp := mutation.CIPackage{Name: pr.Name, Whole: true, Report: pr.Report, Reruns: reruns[i]}
		if known {
			if cp.Changed, err = mutation.ChangedLines(ctx, root, rec.Base, pr.Name); err != nil {
				return err
			}
		}
		if cp.Mutants, err = mutation.Identify(root, pr.Name, pr.Report, mutation.KindFull); err != nil {
			return err
		}
		cps = append(cps, cp)
	}
	run := mutation.CIRun{Packages: cps, Results: mutation.JudgeCI(cps, rec, eq)}
	failures := printCI(e, run, 0, *shards)
	failures = append(failures, stale...)
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(e.stdout, "FAIL "+f)
		}
		return fmt.Errorf("gate failed: %s (%d in all)", failures[0], len(failures))
	}
	if !*write {
		return nil
	}
	head, err := cleanHead(ctx, root)
	if err != nil {
		return err
	}
	out2, err := mutation.RecordFrom(root, head, *shards, prs, mutation.KindFull)
	if err != nil {
		return err
	}
	if err := out2.Write(*recordFile); err != nil {
		return fmt.Errorf("write the record: %w", err)
	}
	fmt.Fprintf(e.stdout, "record %s: base %s, every mutant; commit it\n", *recordFile, head[:12])
	return nil
}

// writeReport writes a gremlins report back as JSON.
func writeReport(file string, r mutation.Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// parseShard reads K/N with 1 <= K <= N.
func parseShard(s string) (k, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	k, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 1 || k > n {
		return 0, 0, fmt.Errorf("want K/N with 1 <= K <= N, such as 2/8, not %q", s)
	}
	return k, n, nil
}
