package mutation

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CIPackage is one package's part of a per-submission gate run: which
// lines gremlins ran, and its report.
type CIPackage struct {
	// Name is the package directory relative to the module root.
	Name string
	// Whole says every line ran; Shard is then nil. Otherwise Shard is
	// the lines of the run's shard.
	Whole bool
	Shard Selection
	// Changed is the lines changed since the record's base.
	Changed Selection
	// Floor is what the shard's (or the whole package's) figures must
	// reach: the recorded shard figures, or the baseline.
	Floor Figures
	// FloorSource names Floor in a failure ("the baseline", "shard 3's
	// record").
	FloorSource string
	Report      Report
}

// CIResult is the verdict on one package of a per-submission run.
type CIResult struct {
	Name string
	// Part is the mutants of the shard (or the whole package), scored.
	Part PackageResult
	// Changed is the mutants on lines changed since the base, scored.
	Changed PackageResult
	// Failures says, one line each, why the package fails; empty when it
	// passes.
	Failures []string
}

// JudgeCI applies the per-submission rules to each package's report:
//
//   - a mutant on a changed line must be KILLED (or not compile); LIVED,
//     NOT COVERED and TIMED OUT fail, so new code comes with tests that
//     kill its mutants;
//   - in the shard (or the whole package) a LIVED mutant fails, which is
//     what catches a weakened test: deleting an assertion changes no
//     source line, and its mutant lives on when its shard comes round;
//   - the shard's figures must reach its floor.
//
// Listed equivalents are excused from all three.
func JudgeCI(pkgs []CIPackage, eq Equivalents) []CIResult {
	opts := GateOptions{Equivalents: eq, Strict: true}
	var out []CIResult
	for _, p := range pkgs {
		inPart := func(file string, m Mutation) bool { return p.Whole || p.Shard.Has(file, m.Line) }
		changed := func(file string, m Mutation) bool { return p.Changed.Has(file, m.Line) }
		r := CIResult{
			Name:    p.Name,
			Part:    scorePackage(p.Name, p.Report, opts, inPart),
			Changed: scorePackage(p.Name, p.Report, opts, func(file string, m Mutation) bool { return p.Changed != nil && changed(file, m) }),
		}
		failed := map[string]bool{}
		for _, f := range p.Report.Files {
			for _, m := range f.Mutations {
				file := filepath.ToSlash(filepath.Join(p.Name, f.FileName))
				if m.Status == StatusSkipped || eq.Has(file, m.Line, m.Column, m.Type) {
					continue
				}
				at := fmt.Sprintf("%s:%d:%s", file, m.Line, m.Type)
				switch {
				case p.Changed != nil && changed(f.FileName, m) && m.Status != StatusKilled && m.Status != StatusNotViable:
					r.Failures = append(r.Failures, fmt.Sprintf("%s %s on a changed line: %s", at, m.Status, changedFix(m.Status)))
					failed[at] = true
				case inPart(f.FileName, m) && m.Status == StatusLived && !failed[at]:
					r.Failures = append(r.Failures, livedFailures([]string{at})...)
				}
			}
		}
		r.Failures = append(r.Failures, checkFigures(p.Name, r.Part.Score, p.Floor, p.FloorSource)...)
		out = append(out, r)
	}
	return out
}

// changedFix says what to do about a mutant of a changed line that was not
// killed.
func changedFix(status string) string {
	switch status {
	case StatusNotCovered:
		return "no test runs that line; test it (a switch case's condition never counts as covered in gremlins v0.6.0: give it a named guard and list the mutant in testdata/mutation/equivalents.json)"
	case StatusTimedOut:
		return "the mutant makes a test wait past gremlins' timeout; bound that wait so the test fails instead"
	}
	return "no test fails without that code; write one that does, or list the mutant in testdata/mutation/equivalents.json with why"
}

// CIOptions configure RunCI.
type CIOptions struct {
	// Root is the module root, a git working tree.
	Root string
	// Gremlins is the gremlins binary; Config its configuration file.
	Gremlins, Config string
	// Packages are the gated packages; Whole those of them that run
	// every mutant every time (the others run one shard).
	Packages, Whole []string
	Record          Record
	Baseline        Baseline
	Equivalents     Equivalents
	// Shard is the shard this run takes, from 0 to Record.Shards-1 (shown
	// as 1 to Record.Shards).
	Shard int
	// Budget bounds the estimated wall time of the gremlins runs; a
	// change whose mutants would not fit fails at once.
	Budget time.Duration
	// Env is added to gremlins' environment (a shared stack, GOFLAGS).
	Env []string
	// TempDir is for gremlins' copies of the module; OutDir gets each
	// package's report.
	TempDir, OutDir string
	// Logf receives progress lines; may be nil.
	Logf func(format string, args ...any)
}

// CIRun is what RunCI did.
type CIRun struct {
	Packages []CIPackage
	Results  []CIResult
	// Estimate is the wall time RunCI expected of gremlins, and Elapsed
	// what it took. Change is the part of Estimate for the changed lines
	// outside the run's shard: what the budget bounds.
	Estimate, Elapsed, Change time.Duration
}

// checkBudget fails when the mutants of the change since base that the
// run's shard does not already hold would take longer than budget (0 for
// no bound). The shard and the whole packages are a fixed cost the record
// foresees; what grows with a change is its own lines' mutants, and a
// change too large for one run is gated by a full run instead.
func checkBudget(change, budget time.Duration, base string) error {
	if budget > 0 && change > budget {
		return fmt.Errorf("%w: the mutants of the change since %s would take about %s where the budget is %s; run make mutation and commit the record it writes",
			ErrOverBudget, short(base), change.Round(time.Second), budget)
	}
	return nil
}

// ErrOverBudget is wrapped by RunCI's error when the mutants to run would
// not fit the budget.
var ErrOverBudget = errors.New("over the gate's budget")

// RunCI runs the per-submission gate's gremlins part: for each package, the
// mutants on the lines changed since the record's base and those of the
// run's shard (or all of them, for a Whole package), in one gremlins run,
// then JudgeCI. It fails at once, before any mutant runs, when the base is
// not an ancestor of HEAD or when the mutants would take longer than the
// budget: then the record must be brought up to date by a full run.
func RunCI(ctx context.Context, o CIOptions) (CIRun, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rec := o.Record
	if err := isAncestor(ctx, o.Root, rec.Base); err != nil {
		return CIRun{}, err
	}
	if o.Shard < 0 || o.Shard >= rec.Shards {
		return CIRun{}, fmt.Errorf("shard %d: the record has %d shards (0 to %d)", o.Shard, rec.Shards, rec.Shards-1)
	}
	var run CIRun
	for _, name := range o.Packages {
		p := CIPackage{Name: name, Whole: slices.Contains(o.Whole, name)}
		changed, err := ChangedLines(ctx, o.Root, rec.Base, name)
		if err != nil {
			return CIRun{}, err
		}
		p.Changed = changed
		pr := rec.Packages[name]
		var estimate time.Duration
		if p.Whole {
			p.Floor, p.FloorSource = o.Baseline[name], "the baseline"
			estimate = rec.Estimate(name, pr.Mutants)
		} else {
			if len(pr.Shards) != rec.Shards {
				return CIRun{}, fmt.Errorf("the record has no shard figures for %s; run make mutation and commit the record it writes", name)
			}
			if p.Shard, err = ShardSelection(filepath.Join(o.Root, name), o.Shard, rec.Shards); err != nil {
				return CIRun{}, err
			}
			sf := pr.Shards[o.Shard]
			p.Floor, p.FloorSource = sf.Figures, fmt.Sprintf("shard %d/%d's record", o.Shard+1, rec.Shards)
			estimate = rec.Estimate(name, sf.Mutants)
			// The changed lines outside the shard are what the record
			// cannot foresee: count their mutants with a dry run.
			if extra := changed.Minus(p.Shard); extra.Lines() > 0 {
				n, err := countRunnable(ctx, o, name, extra)
				if err != nil {
					return CIRun{}, err
				}
				logf("mutation: ./%s: %d mutants on %d changed lines outside shard %d/%d", name, n, extra.Lines(), o.Shard+1, rec.Shards)
				run.Change += rec.Estimate(name, n)
			}
		}
		logf("mutation: ./%s: %s, %d lines changed since %s; about %s", name, partName(p, o.Shard, rec.Shards), changed.Lines(), short(rec.Base), estimate.Round(time.Second))
		run.Estimate += estimate
		run.Packages = append(run.Packages, p)
	}
	run.Estimate += run.Change
	if err := checkBudget(run.Change, o.Budget, rec.Base); err != nil {
		return run, err
	}
	begin := time.Now()
	for i, p := range run.Packages {
		sel := Selection(nil)
		if !p.Whole {
			sel = p.Shard.Union(p.Changed)
		}
		out := filepath.Join(o.OutDir, strings.ReplaceAll(p.Name, "/", "-")+".json")
		start := time.Now()
		r, err := Unleash(ctx, UnleashOptions{Gremlins: o.Gremlins, Root: o.Root, Package: p.Name, Config: o.Config,
			Selection: sel, Output: out, Env: o.Env, TempDir: o.TempDir})
		if errors.Is(err, ErrNothingSelected) {
			continue
		}
		if err != nil {
			return run, err
		}
		run.Packages[i].Report = r
		logf("mutation: ./%s done in %s", p.Name, time.Since(start).Round(time.Second))
	}
	run.Elapsed = time.Since(begin)
	run.Results = JudgeCI(run.Packages, o.Equivalents)
	return run, nil
}

func partName(p CIPackage, k, n int) string {
	if p.Whole {
		return "every mutant"
	}
	return fmt.Sprintf("shard %d/%d (%d lines)", k+1, n, p.Shard.Lines())
}

func short(commit string) string { return commit[:min(len(commit), 12)] }

// countRunnable counts the mutants of the selected lines that a test
// covers, with a gremlins dry run.
func countRunnable(ctx context.Context, o CIOptions, pkg string, sel Selection) (int, error) {
	r, err := Unleash(ctx, UnleashOptions{Gremlins: o.Gremlins, Root: o.Root, Package: pkg, Config: o.Config,
		Selection: sel, DryRun: true, Output: filepath.Join(o.OutDir, strings.ReplaceAll(pkg, "/", "-")+".dry-run.json"),
		Env: o.Env, TempDir: o.TempDir})
	if err != nil {
		return 0, err
	}
	return r.count().Runnable, nil
}

// isAncestor fails unless base is a commit that HEAD descends from.
func isAncestor(ctx context.Context, root, base string) error {
	cmd := exec.CommandContext(ctx, "git", "merge-base", "--is-ancestor", base, "HEAD")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("the record's base %s is not an ancestor of HEAD (%s); run make mutation and commit the record it writes",
			short(base), strings.TrimSpace(firstOf(string(out), err.Error())))
	}
	return nil
}

func firstOf(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}
