package mutation

import (
	"bytes"
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
// lines gremlins ran, its report and its mutants by identity.
type CIPackage struct {
	// Name is the package directory relative to the module root.
	Name string
	// Whole says every line ran; Shard is then nil. Otherwise Shard is
	// the lines of the run's shard.
	Whole bool
	Shard Selection
	// Changed is the lines changed since the record's base.
	Changed Selection
	// Report is gremlins' report, with each timed-out mutant's status
	// replaced by what its re-run alone measured (Reruns).
	Report Report
	// Mutants are the report's mutants by identity (Identify), statuses
	// as in Report.
	Mutants []RecordedMutant
	// Reruns are the timed-out mutants the gate ran again alone.
	Reruns []Rerun
}

// CIResult is the verdict on one package of a per-submission run.
type CIResult struct {
	Name string
	// Part is the mutants of the shard (or the whole package), scored.
	Part PackageResult
	// Changed is the mutants on lines changed since the base, scored.
	Changed PackageResult
	// Mutants are the mutants the run measured (CIPackage.Mutants), for
	// the next record.
	Mutants []RecordedMutant
	// Failures says, one line each, why the package fails; empty when it
	// passes.
	Failures []string
}

// JudgeCI compares each package's mutants with the record's, one by one
// (by identity: file, line text, mutator), and fails a package only when
//
//   - a mutant on a changed line is not KILLED (NOT VIABLE, a mutant that
//     does not compile, is fine), so new code comes with tests that kill
//     its mutants;
//   - a mutant the record has covered (KILLED, LIVED, NOT VIABLE, or
//     RUNNABLE in a dry run) is now NOT COVERED: a test that ran it no
//     longer does;
//   - a mutant LIVED: one the record has KILLED is a test that stopped
//     catching it (a deleted assertion changes no source line, and is
//     caught so when its shard comes round), one the record lacks is new
//     code no test constrains;
//   - a mutant is still TIMED OUT, which only happens when its re-run
//     alone could not be made: a gate passes nothing it did not judge.
//
// Listed equivalents are excused from all of them. Percentages are
// recomputed for the printout and never compared: whether a mutant times
// out depends on the machine's load, and moved both sides of a ratio.
func JudgeCI(pkgs []CIPackage, rec Record, eq Equivalents) []CIResult {
	opts := GateOptions{Equivalents: eq, Strict: true}
	var out []CIResult
	for _, p := range pkgs {
		inPart := func(file string, m Mutation) bool { return p.Whole || p.Shard.Has(file, m.Line) }
		changed := func(file string, line int) bool { return p.Changed != nil && p.Changed.Has(file, line) }
		r := CIResult{
			Name:    p.Name,
			Part:    scorePackage(p.Name, p.Report, opts, inPart),
			Changed: scorePackage(p.Name, p.Report, opts, func(file string, m Mutation) bool { return changed(file, m.Line) }),
			Mutants: p.Mutants,
		}
		recorded := rec.Packages[p.Name].Mutants
		byKey := keyed(recorded)
		for k, i := range keyed(p.Mutants) {
			m := p.Mutants[i]
			if eq.Has(m.File, m.Line, m.Column, m.Mutator) {
				continue
			}
			at := fmt.Sprintf("%s:%d:%d:%s", m.File, m.Line, m.Column, m.Mutator)
			was, known := RecordedMutant{}, false
			if j, ok := byKey[k]; ok {
				was, known = recorded[j], true
			}
			if f := judgeMutant(m, was, known, changed(strings.TrimPrefix(m.File, p.Name+"/"), m.Line), rec.Base); f != "" {
				r.Failures = append(r.Failures, at+" "+f)
			}
		}
		slices.Sort(r.Failures)
		out = append(out, r)
	}
	return out
}

// judgeMutant is the verdict on one mutant, m, given the record's entry
// for it (known false when the record has none) and whether its line
// changed since the base: "" when it passes, else what is wrong and what
// to do.
func judgeMutant(m, was RecordedMutant, known, changedLine bool, base string) string {
	if changedLine {
		if m.Status == StatusKilled || m.Status == StatusNotViable {
			return ""
		}
		return m.Status + " on a changed line: " + changedFix(m.Status)
	}
	switch m.Status {
	case StatusTimedOut:
		return "TIMED OUT and not re-run alone: the gate cannot judge it; run the gate again"
	case StatusLived:
		if !known {
			return "LIVED, a mutant the record does not have: " + changedFix(StatusLived)
		}
		return fmt.Sprintf("LIVED, where the record (%s run at %s) has it %s%s: a test that caught it no longer does; restore what the test checked, or list the mutant in testdata/mutation/equivalents.json with why",
			was.Run, short(base), was.Status, killedBy(was))
	case StatusNotCovered:
		if known && covered(was.Status) {
			return fmt.Sprintf("NOT COVERED, where the record (%s run at %s) has it %s%s: no test runs that line any more; test it again",
				was.Run, short(base), was.Status, killedBy(was))
		}
	}
	return ""
}

func killedBy(m RecordedMutant) string {
	if m.KilledBy == "" {
		return ""
	}
	return " by " + m.KilledBy
}

// changedFix says what to do about a mutant of a changed line that was not
// killed.
func changedFix(status string) string {
	switch status {
	case StatusNotCovered:
		return "no test runs that line; test it (a switch case's condition never counts as covered in gremlins v0.6.0: give it a named guard and list the mutant in testdata/mutation/equivalents.json)"
	case StatusTimedOut:
		return "the mutant was not re-run alone, so the gate cannot judge it; run the gate again"
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
	Equivalents     Equivalents
	// Shard is the shard this run takes, from 0 to Record.Shards-1 (shown
	// as 1 to Record.Shards).
	Shard int
	// Budget bounds the estimated wall time of the gremlins runs; a
	// change whose mutants would not fit fails at once.
	Budget time.Duration
	// Env is added to gremlins' environment (a shared stack, GOFLAGS),
	// and to the re-runs of timed-out mutants.
	Env []string
	// Tags are the build tags gremlins' configuration gives go test, for
	// the re-runs; TimeoutCoefficient is its timeout-coefficient, for
	// naming the bound a mutant timed out at.
	Tags               string
	TimeoutCoefficient int
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
		if _, ok := rec.Packages[name]; !ok {
			return CIRun{}, fmt.Errorf("the record has no mutants of %s; run doublerun mutation record (or make mutation) and commit the record it writes", name)
		}
		var estimate time.Duration
		if p.Whole {
			n := 0
			for k := range rec.Shards {
				n += rec.ShardMutants(name, k)
			}
			estimate = rec.Estimate(name, n)
		} else {
			if p.Shard, err = ShardSelection(filepath.Join(o.Root, name), o.Shard, rec.Shards); err != nil {
				return CIRun{}, err
			}
			estimate = rec.Estimate(name, rec.ShardMutants(name, o.Shard))
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
		var log bytes.Buffer
		r, err := Unleash(ctx, UnleashOptions{Gremlins: o.Gremlins, Root: o.Root, Package: p.Name, Config: o.Config,
			Selection: sel, Output: out, Env: o.Env, TempDir: o.TempDir, Log: &log})
		if errors.Is(err, ErrNothingSelected) {
			continue
		}
		if err != nil {
			return run, err
		}
		logf("mutation: ./%s done in %s", p.Name, time.Since(start).Round(time.Second))
		reruns, err := RerunTimedOut(ctx, p.Name, &r, GremlinsBound(log.String(), o.TimeoutCoefficient),
			RerunOptions{Root: o.Root, Tags: o.Tags, Env: o.Env, TempDir: o.TempDir})
		if err != nil {
			return run, err
		}
		for _, rr := range reruns {
			logf("mutation: %s", rr)
		}
		ms, err := Identify(o.Root, p.Name, r, KindCI)
		if err != nil {
			return run, err
		}
		run.Packages[i].Report, run.Packages[i].Mutants, run.Packages[i].Reruns = r, ms, reruns
	}
	run.Elapsed = time.Since(begin)
	run.Results = JudgeCI(run.Packages, rec, o.Equivalents)
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
