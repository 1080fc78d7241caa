package mutation

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"time"
)

// DefaultRerunFactor is how many times its package's clean test time a
// timed-out mutant gets when it runs again alone.
const DefaultRerunFactor = 3

// MinRerunBound is the least time a re-run alone gets, whatever its
// package's clean time: for a package whose tests take milliseconds,
// three times that is less than a test binary's start-up jitter. Measured
// on the mutation fixture (20 clean runs beside a make test, load 5): 4 to
// 12 ms, so a 3x bound of 15 ms timed out a mutant that its tests miss and
// called it KILLED. Five seconds is hundreds of times that spread, and
// still ends a mutant whose loop never does.
const MinRerunBound = 5 * time.Second

// RerunOptions configure RerunTimedOut. Zero values take the defaults.
type RerunOptions struct {
	// Root is the module root; the mutant reaches go test through an
	// overlay, so the tree is never written.
	Root string
	// Go is the go command; default "go".
	Go string
	// Tags are go test's build tags, as gremlins' run had them.
	Tags string
	// Env is added to go test's environment, as gremlins' run had it (a
	// shared stack, GOFLAGS).
	Env []string
	// Factor times the package's clean test time bounds each re-run;
	// default DefaultRerunFactor.
	Factor float64
	// TempDir holds the mutated files; default os.TempDir().
	TempDir string
	// KillGrace is the time between SIGTERM and SIGKILL for a run that
	// reached its bound; default DefaultKillGrace.
	KillGrace time.Duration
}

// Rerun is a timed-out mutant run again alone, and what that run found.
type Rerun struct {
	// File is relative to the module root.
	File         string
	Line, Column int
	Mutator      string
	// Status is the verdict of the run alone: KILLED (a test failed, or
	// the mutant hung its tests again: EndlessLoop), LIVED, or NOT VIABLE
	// (it did not build).
	Status      string
	EndlessLoop bool
	// Detail says which tests failed, or why the run ended.
	Detail string
	// First is the bound gremlins gave the mutant (its coverage run's
	// time times its timeout coefficient); 0 when its log did not say.
	First time.Duration
	// Clean is the package's unmutated test time in the same gate run,
	// Bound the re-run's bound (Factor × Clean, at least MinRerunBound),
	// Took what the re-run took;
	// each is the test binary's run, compile excluded.
	Clean, Bound, Took time.Duration
	Factor             float64
}

// String names the mutant and both runs, for the gate's output.
func (r Rerun) String() string {
	first := "gremlins' bound unknown"
	if r.First > 0 {
		first = "gremlins' bound " + r.First.Round(100*time.Millisecond).String()
	}
	verdict := r.Status
	if r.EndlessLoop {
		verdict = "KILLED by its own endless loop (timed out again alone)"
	}
	return fmt.Sprintf("%s:%d:%d:%s TIMED OUT in gremlins' run (%s); alone: %s in %s, %s: %s",
		r.File, r.Line, r.Column, r.Mutator, first, verdict, r.Took.Round(100*time.Millisecond),
		boundText(r.Bound, r.Clean, r.Factor), r.Detail)
}

// gremlinsCoverageTime is the line gremlins v0.6.0 logs after its
// coverage run ("done in 12.3s").
var gremlinsCoverageTime = regexp.MustCompile(`(?m)done in (\S+)\s*$`)

// GremlinsBound reads, from gremlins' log, the bound it gave each mutant:
// its coverage run's time times coefficient. 0 when the log does not say.
func GremlinsBound(log string, coefficient int) time.Duration {
	m := gremlinsCoverageTime.FindStringSubmatch(log)
	if m == nil {
		return 0
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return 0
	}
	return d * time.Duration(coefficient)
}

// rerunBound is a re-run alone's bound: factor times clean, its tests'
// unmutated time, and at least MinRerunBound. Caught by TestRerunBound.
func rerunBound(clean time.Duration, factor float64) time.Duration {
	return max(time.Duration(float64(clean)*factor), MinRerunBound)
}

// boundText says how a re-run's bound came about, for the gate's output.
func boundText(bound, clean time.Duration, factor float64) string {
	s := fmt.Sprintf("%g × clean %s", factor, clean.Round(100*time.Millisecond))
	if bound > time.Duration(float64(clean)*factor) {
		s = "the floor; " + s + " is less"
	}
	return "bound " + bound.Round(100*time.Millisecond).String() + " (" + s + ")"
}

// RerunTimedOut runs every TIMED OUT mutant of the report of package pkg
// (a directory relative to o.Root) again, one at a time, after the
// package's tests ran once unmutated with the same flags to measure their
// clean time; each mutant gets Factor times that. It replaces each such
// mutant's status in r with the re-run's verdict and returns the re-runs.
// A timeout is not a verdict: it depends on the machine's load as much as
// on the mutant, so a mutant that merely ran slow beside other work is
// judged by its tests, and one that hangs again alone, with three times
// the time its package's tests need, is killed by its own endless loop.
// first is gremlins' bound for the output (GremlinsBound).
func RerunTimedOut(ctx context.Context, pkg string, r *Report, first time.Duration, o RerunOptions) ([]Rerun, error) {
	var todo []*Mutation
	var files []string
	for fi := range r.Files {
		for mi := range r.Files[fi].Mutations {
			if m := &r.Files[fi].Mutations[mi]; m.Status == StatusTimedOut {
				todo = append(todo, m)
				files = append(files, r.Files[fi].FileName)
			}
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	o.Go = cmp.Or(o.Go, "go")
	o.Factor = cmp.Or(o.Factor, DefaultRerunFactor)
	o.KillGrace = cmp.Or(o.KillGrace, DefaultKillGrace)
	dir, err := os.MkdirTemp(o.TempDir, "doublerun-rerun-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	env := append(append(mutantEnviron(), "GOTMPDIR="+dir), o.Env...)

	res, err := goTestPackage(ctx, o, env, dir, pkg, "", 0)
	if err != nil {
		return nil, err
	}
	if !res.built || res.code != 0 {
		return nil, fmt.Errorf("./%s: its tests fail unmutated, so no timed-out mutant can be judged: %s", pkg, lastLines(string(res.output), 5))
	}
	clean := res.took
	bound := rerunBound(clean, o.Factor)
	var reruns []Rerun
	for i, m := range todo {
		rr := Rerun{File: path.Join(pkg, filepath.ToSlash(files[i])), Line: m.Line, Column: m.Column, Mutator: m.Type,
			First: first, Clean: clean, Bound: bound, Factor: o.Factor}
		if err := rerunOne(ctx, o, env, dir, pkg, files[i], i, &rr); err != nil {
			return reruns, err
		}
		m.Status = rr.Status
		reruns = append(reruns, rr)
	}
	r.recount()
	return reruns, nil
}

// rerunOne applies rr's mutant through an overlay and runs its package's
// tests once, bounded by rr.Bound.
func rerunOne(ctx context.Context, o RerunOptions, env []string, dir, pkg, file string, i int, rr *Rerun) error {
	src := filepath.Join(o.Root, pkg, file)
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	mutant, err := ApplyMutant(data, rr.Line, rr.Column, rr.Mutator)
	if err != nil {
		return fmt.Errorf("re-run %s:%d:%d:%s: %w; is the tree the one gremlins mutated?", rr.File, rr.Line, rr.Column, rr.Mutator, err)
	}
	mut := filepath.Join(dir, fmt.Sprintf("mutant-%d.go", i))
	if err := os.WriteFile(mut, mutant, 0o600); err != nil {
		return err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	ov, err := json.Marshal(map[string]map[string]string{"Replace": {abs: mut}})
	if err != nil {
		return err
	}
	ovFile := filepath.Join(dir, fmt.Sprintf("overlay-%d.json", i))
	if err := os.WriteFile(ovFile, ov, 0o600); err != nil {
		return err
	}
	res, err := goTestPackage(ctx, o, env, dir, pkg, ovFile, rr.Bound)
	if err != nil {
		return err
	}
	rr.Took = res.took
	if !res.built {
		rr.Status, rr.Detail = StatusNotViable, "build failed: "+firstError(bytes.ReplaceAll(res.output, []byte(mut), []byte(src)))
		return nil
	}
	rr.Status, rr.EndlessLoop, rr.Detail = rerunVerdict(res.output, res.code, res.timedOut, rr.Bound)
	return nil
}

// rerunVerdict classifies a re-run alone from its go test -v output, exit
// code and whether it reached its bound.
func rerunVerdict(out []byte, code int, timedOut bool, bound time.Duration) (status string, endless bool, detail string) {
	if timedOut {
		return StatusKilled, true, fmt.Sprintf("still running after %s", bound.Round(100*time.Millisecond))
	}
	o, d := Classify(out, code)
	switch o {
	case Survived, NoTestsRan:
		return StatusLived, false, "every test passed"
	case BuildFailed:
		return StatusNotViable, false, d
	case TimedOut:
		return StatusKilled, true, d
	}
	return StatusKilled, false, d
}

// buildTimeout bounds compiling one test binary: the build is not what a
// re-run times.
const buildTimeout = 10 * time.Minute

// goTestPackage builds the package's test binary (with the overlay, if
// one is given), as gremlins builds it (the tags and environment it had),
// and runs it once in the package's directory as go test does, with
// -test.failfast as gremlins passes it and -test.v for the names of
// failing tests. bound, if not 0, ends the run: it times the tests only,
// never the compile, so that a mutant's build, which the clean run may
// have found in the build cache, cannot count against it. A build that
// fails is reported with built false.
func goTestPackage(ctx context.Context, o RerunOptions, env []string, dir, pkg, overlay string, bound time.Duration) (res testRun, err error) {
	bin := filepath.Join(dir, "pkg.test")
	args := []string{"test", "-c", "-o", bin}
	if o.Tags != "" {
		args = append(args, "-tags", o.Tags)
	}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(args, "./"+pkg)
	bctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	build := exec.CommandContext(bctx, o.Go, args...)
	build.Dir = o.Root
	build.Env = env
	out, berr := build.CombinedOutput()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if berr != nil {
		res.output = out
		return res, nil
	}
	res.built = true
	defer os.Remove(bin)
	targs := []string{"-test.failfast", "-test.v"}
	// took is timed from the moment the bound starts: a run that hit its
	// bound took at least the bound. With the clock started after the
	// command's set-up, a loaded machine reported an endless run as
	// 4.998 s of a 5 s bound.
	start := time.Now()
	run := ctx
	if bound > 0 {
		// The binary's own -test.timeout comes later, so the bound is
		// ours.
		targs = append(targs, "-test.timeout", (bound + 30*time.Second).String())
		var cancel context.CancelFunc
		run, cancel = context.WithDeadline(ctx, start.Add(bound))
		defer cancel()
	}
	cmd := exec.CommandContext(run, bin, targs...)
	cmd.Dir = filepath.Join(o.Root, pkg)
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	sweep := killGroup(cmd, o.KillGrace)
	cmd.WaitDelay = o.KillGrace + 5*time.Second
	err = cmd.Run()
	res.took = time.Since(start)
	sweep()
	res.output = buf.Bytes()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if errors.Is(run.Err(), context.DeadlineExceeded) {
		res.timedOut = true
		return res, nil
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.Exited():
		res.code = exitErr.ExitCode()
	case errors.As(err, &exitErr):
		// Killed by a signal it did not handle: a crash, not a pass.
		res.code = -1
	default:
		return res, fmt.Errorf("run the tests of ./%s: %v", pkg, err)
	}
	return res, nil
}

// testRun is one run of a package's test binary.
type testRun struct {
	built, timedOut bool
	code            int
	output          []byte
	took            time.Duration
}

// recount sets the report's counts and figures from its mutants, as
// gremlins computes them.
func (r *Report) recount() {
	s := r.count()
	r.MutantsKilled, r.MutantsLived, r.MutantsNotCovered, r.MutantsNotViable = s.Killed, s.Lived, s.NotCovered, s.NotViable
	r.MutantsTotal = s.Killed + s.Lived + s.NotViable
	r.TestEfficacy, r.MutationsCoverage = s.Efficacy(), s.Coverage()
}
