package mutation

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Defaults for GuardOptions.
const (
	DefaultParallel     = 2
	DefaultGuardTimeout = 5 * time.Minute
	// DefaultKillGrace is how long a cancelled go test gets, after SIGTERM
	// to its process group, to let TestMain close its stack before SIGKILL.
	DefaultKillGrace = 15 * time.Second
)

// GuardOptions configure RunGuards. Zero values take the defaults.
type GuardOptions struct {
	// Parallel is how many go test processes run at once; default 2.
	Parallel int
	// Timeout bounds each go test run (the unmutated baseline and the
	// mutant each get one), compile time included; default 5m. go test's
	// own -timeout is set a little lower so that a hung test prints its
	// goroutines before the runner kills it.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when a run is
	// cancelled or times out; default 15s.
	KillGrace time.Duration
	// Env is added to the environment of every go test, after the
	// runner's own, for example a shared stack's DOUBLERUN_* variables.
	Env []string
	// TempDir is where the runner makes its one temporary directory;
	// default os.TempDir().
	TempDir string
	// Go is the go command; default "go".
	Go string
	// Tags are go test's build tags, such as doublerun_nodocker for test
	// binaries that reach a shared stack and need no docker provider.
	Tags string
	// RerunFactor times the unmutated run's time of its tests bounds the
	// re-run alone of a guard that timed out; default DefaultRerunFactor.
	RerunFactor float64
	// Progress, if set, is called as each guard finishes, with its index
	// in the guards slice. Calls come from several goroutines at once.
	Progress func(i int, r GuardResult)
	// Logger receives debug logs of every go test command; default
	// discards.
	Logger *slog.Logger
}

// withDefaults returns o with every zero field at its default.
func (o GuardOptions) withDefaults() GuardOptions {
	o.Parallel = cmp.Or(o.Parallel, DefaultParallel)
	o.Timeout = cmp.Or(o.Timeout, DefaultGuardTimeout)
	o.KillGrace = cmp.Or(o.KillGrace, DefaultKillGrace)
	o.Go = cmp.Or(o.Go, "go")
	o.RerunFactor = cmp.Or(o.RerunFactor, DefaultRerunFactor)
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	return o
}

// validate says what keeps o, defaults applied, from running guards.
func (o GuardOptions) validate() error {
	if o.Parallel < 1 {
		return fmt.Errorf("parallel must be at least 1, not %d", o.Parallel)
	}
	return nil
}

// GuardResult is the verdict on one guard.
type GuardResult struct {
	// ID and Manifest name the guard and the file it came from.
	ID       string `json:"id"`
	Manifest string `json:"manifest"`
	// Outcome is the verdict; empty if the run was cancelled first.
	Outcome Outcome `json:"outcome"`
	// Detail says why: the failing tests, the compiler's first error.
	Detail string `json:"detail"`
	// Duration is the guard's wall time, including any wait for the
	// unmutated run it shares with other guards.
	Duration time.Duration `json:"-"`
	// Seconds is Duration in seconds, for JSON.
	Seconds float64 `json:"seconds"`
	// Output is the last lines of the go test run behind a verdict other
	// than Killed, for diagnosis.
	Output string `json:"output,omitempty"`
	// Rerun, for a guard that timed out beside the others, says what its
	// re-run alone found, with both runs' times.
	Rerun string `json:"rerun,omitempty"`
}

// Passed reports whether the guard passes the gate.
func (r GuardResult) Passed() bool { return r.Outcome == Killed }

// RunGuards judges every guard and returns one result per guard, in the
// order of guards. Each guard's tests run first without the mutant (the
// baseline, shared by guards with the same package and run pattern), then
// with it, through `go test -overlay` so that the working tree is never
// written. All temporary files live in one directory that is removed
// before RunGuards returns.
//
// When ctx is cancelled, running go test process groups get SIGTERM and,
// after KillGrace, SIGKILL; RunGuards waits for them, removes its files and
// returns the results it has with ctx's error. Guards that did not finish
// have an empty Outcome.
func RunGuards(ctx context.Context, guards []Guard, opts GuardOptions) ([]GuardResult, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp(opts.TempDir, "doublerun-guards-")
	if err != nil {
		return nil, fmt.Errorf("guard runner: %w", err)
	}
	defer os.RemoveAll(dir)
	gotmp := filepath.Join(dir, "gotmp")
	if err := os.Mkdir(gotmp, 0o700); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, dir: dir, baselines: map[string]*baseline{}}
	// go test's build directories go under dir too, so a killed go
	// command cannot leave them behind.
	r.env = append(append(os.Environ(), "GOTMPDIR="+gotmp), opts.Env...)

	results := make([]GuardResult, len(guards))
	sem := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	for i, g := range guards {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			res := r.judge(ctx, i, g)
			if ctx.Err() != nil {
				// A verdict reached while being killed is no verdict.
				return
			}
			results[i] = res
			if opts.Progress != nil && res.Outcome != TimedOut {
				opts.Progress(i, res)
			}
		})
	}
	wg.Wait()
	// A timeout is not a verdict: it depends on the machine's load. Each
	// guard that timed out runs again alone, one at a time, bounded by
	// RerunFactor times its tests' unmutated run, and is judged by that.
	for i, res := range results {
		if res.Outcome != TimedOut || ctx.Err() != nil {
			continue
		}
		results[i] = r.rerun(ctx, i, guards[i], res)
		if ctx.Err() != nil {
			results[i] = GuardResult{}
			break
		}
		if opts.Progress != nil {
			opts.Progress(i, results[i])
		}
	}
	return results, ctx.Err()
}

// rerun runs a guard that timed out again alone, with its mutant's
// overlay, bounded by RerunFactor times its tests' unmutated run (rerunBound), and
// returns its verdict: KILLED (a test failed, or the mutant hung them
// again: its own endless loop), SURVIVED, or what else that run found.
func (r *runner) rerun(ctx context.Context, i int, g Guard, first GuardResult) GuardResult {
	b := r.baseline(ctx, g)
	bound := rerunBound(b.took, r.opts.RerunFactor)
	ov := filepath.Join(r.dir, fmt.Sprintf("guard-%d", i), "overlay.json")
	start := time.Now()
	o, detail, out := r.goTest(ctx, g, ov, bound)
	took := time.Since(start)
	res := first
	verdict := string(o)
	if o == TimedOut {
		o, verdict = Killed, "KILLED by its own endless loop (timed out again alone)"
	}
	res.Outcome, res.Detail = o, detail
	res.Rerun = fmt.Sprintf("TIMED_OUT beside the others (bound %s, after %s); alone: %s in %s, %s",
		r.opts.Timeout, first.Duration.Round(100*time.Millisecond), verdict, took.Round(100*time.Millisecond),
		boundText(bound, b.took, r.opts.RerunFactor))
	res.Duration += took
	res.Seconds = res.Duration.Seconds()
	res.Output = ""
	if o != Killed && len(out) > 0 {
		res.Output = tail(out, 40)
	}
	return res
}

type runner struct {
	opts GuardOptions
	dir  string
	env  []string

	mu        sync.Mutex
	baselines map[string]*baseline
}

// baseline is one unmutated run, shared by guards with the same module,
// package and run pattern.
type baseline struct {
	done    chan struct{}
	took    time.Duration
	outcome Outcome
	detail  string
	output  []byte
}

func (r *runner) judge(ctx context.Context, i int, g Guard) GuardResult {
	start := time.Now()
	res := GuardResult{ID: g.ID, Manifest: g.Manifest}
	finish := func(o Outcome, detail string, output []byte) GuardResult {
		res.Outcome, res.Detail, res.Duration = o, detail, time.Since(start)
		res.Seconds = res.Duration.Seconds()
		if o != Killed && len(output) > 0 {
			res.Output = tail(output, 40)
		}
		return res
	}

	src, err := os.ReadFile(g.Path())
	if err != nil {
		return finish(NotApplied, fmt.Sprintf("cannot read %s: %v", g.File, err), nil)
	}
	mutant, err := g.Apply(src)
	if err != nil {
		return finish(NotApplied, err.Error(), nil)
	}

	b := r.baseline(ctx, g)
	switch b.outcome {
	case Survived:
	case NoTestsRan, Errored:
		return finish(b.outcome, "without the mutant, "+b.detail, b.output)
	default:
		return finish(BaselineFailed, "without the mutant, "+b.detail, b.output)
	}

	gdir := filepath.Join(r.dir, fmt.Sprintf("guard-%d", i))
	if err := os.Mkdir(gdir, 0o700); err != nil {
		return finish(Errored, err.Error(), nil)
	}
	mutPath := filepath.Join(gdir, filepath.Base(g.File))
	if err := os.WriteFile(mutPath, mutant, 0o600); err != nil {
		return finish(Errored, err.Error(), nil)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {g.Path(): mutPath}})
	if err != nil {
		return finish(Errored, err.Error(), nil)
	}
	ovPath := filepath.Join(gdir, "overlay.json")
	if err := os.WriteFile(ovPath, overlay, 0o600); err != nil {
		return finish(Errored, err.Error(), nil)
	}
	o, detail, out := r.goTest(ctx, g, ovPath, r.opts.Timeout)
	// Compiler errors name the overlay file; name the real one instead.
	detail = strings.ReplaceAll(detail, mutPath, g.File)
	return finish(o, detail, bytes.ReplaceAll(out, []byte(mutPath), []byte(g.File)))
}

// baseline runs g's tests unmutated once per (root, package, run) and
// returns that run's verdict to every guard that shares it.
func (r *runner) baseline(ctx context.Context, g Guard) *baseline {
	key := g.Root + "\x00" + g.Package + "\x00" + g.Run
	r.mu.Lock()
	b, ok := r.baselines[key]
	if !ok {
		b = &baseline{done: make(chan struct{})}
		r.baselines[key] = b
	}
	r.mu.Unlock()
	if ok {
		select {
		case <-b.done:
		case <-ctx.Done():
			return &baseline{outcome: Errored, detail: ctx.Err().Error()}
		}
		return b
	}
	start := time.Now()
	b.outcome, b.detail, b.output = r.goTest(ctx, g, "", r.opts.Timeout)
	b.took = time.Since(start)
	close(b.done)
	return b
}

// goTest runs g's tests, with the overlay file if one is given, bounded by
// timeout, and classifies the run.
func (r *runner) goTest(ctx context.Context, g Guard, overlay string, timeout time.Duration) (Outcome, string, []byte) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-vet=off", "-timeout", testTimeout(timeout).String()}
	if r.opts.Tags != "" {
		args = append(args, "-tags", r.opts.Tags)
	}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(args, "-run", g.Run, "-v", g.Package)

	cmd := exec.CommandContext(ctx, r.opts.Go, args...)
	cmd.Dir = g.Root
	cmd.Env = r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	sweep := killGroup(cmd, r.opts.KillGrace)
	// Wait returns even if a grandchild keeps the output pipe open.
	cmd.WaitDelay = r.opts.KillGrace + 5*time.Second

	r.opts.Logger.Debug("go test", "guard", g.ID, "dir", g.Root, "args", args)
	err := cmd.Run()
	sweep()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return TimedOut, fmt.Sprintf("killed after its bound of %s", timeout.Round(100*time.Millisecond)), out.Bytes()
	}
	var exitErr *exec.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.Exited():
		code = exitErr.ExitCode()
	default:
		return Errored, fmt.Sprintf("%s test: %v", r.opts.Go, err), out.Bytes()
	}
	o, detail := Classify(out.Bytes(), code)
	return o, detail, out.Bytes()
}

// testTimeout is go test's -timeout for a guard timeout of d: a little
// shorter, so that go test reports a hang itself, with the goroutines,
// before the runner kills it.
func testTimeout(d time.Duration) time.Duration {
	return d - min(d/10, 30*time.Second)
}
