package mutation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// UnleashOptions say how to run gremlins on one package.
type UnleashOptions struct {
	// Gremlins is the gremlins v0.6.0 binary.
	Gremlins string
	// Root is the module root; Package the package directory relative to
	// it ("lease").
	Root, Package string
	// Config is gremlins' configuration file (.gremlins.yaml).
	Config string
	// Selection, if not nil, limits the run to the mutants on those lines;
	// an empty one runs nothing (see Selection).
	Selection Selection
	// DryRun lists the mutants without running them: RUNNABLE where a
	// test covers them.
	DryRun bool
	// Output is where the JSON report goes.
	Output string
	// Env is added to gremlins' environment, which its go test runs
	// inherit (a shared stack's variables, GOFLAGS).
	Env []string
	// TempDir holds gremlins' copies of the module and the selection;
	// default os.TempDir().
	TempDir string
	// Log, if set, receives gremlins' output.
	Log *bytes.Buffer
}

// ErrNothingSelected is Unleash's answer to an empty selection: gremlins
// is not run, since it would take an empty diff for every mutant.
var ErrNothingSelected = errors.New("no line selected")

// Unleash runs `gremlins unleash` on one package and returns its report.
//
// A selection reaches gremlins v0.6.0 the only way it takes one, as the
// output of `git diff --merge-base REF` (its --diff flag): Unleash puts a
// `git` first on gremlins' PATH that answers exactly that call with
// Selection.Diff and hands every other call to the real git. Keying the
// lines by package-relative names also avoids gremlins' mismatch between
// the repository-relative names of a real diff and the package-relative
// names of its mutants, which made `--diff` match nothing.
func Unleash(ctx context.Context, o UnleashOptions) (Report, error) {
	if o.Selection != nil && o.Selection.Lines() == 0 {
		return Report{}, ErrNothingSelected
	}
	dir, err := os.MkdirTemp(o.TempDir, "doublerun-unleash-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(dir)
	pkgDir := filepath.Join(o.Root, o.Package)
	args := []string{"unleash", "--config", o.Config, "--output", o.Output}
	if o.DryRun {
		args = append(args, "--dry-run")
	}
	env := append(mutantEnviron(), "TMPDIR="+dir)
	if o.Selection != nil {
		diff, err := o.Selection.Diff(pkgDir)
		if err != nil {
			return Report{}, err
		}
		shim, err := writeGitShim(dir, diff)
		if err != nil {
			return Report{}, err
		}
		args = append(args, "--diff", "doublerun-selection")
		env = append(env, "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	args = append(args, pkgDir)
	_ = os.Remove(o.Output) // never read a report an earlier run left
	cmd := exec.CommandContext(ctx, o.Gremlins, args...)
	cmd.Dir = o.Root
	cmd.Env = append(env, o.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// gremlins handles SIGINT itself (and removes its copies), but a
	// second one panics it (send on closed channel) and leaves its copies
	// behind. So it runs in a process group of its own, out of reach of
	// the terminal's Ctrl-C, and gets exactly one SIGINT: when ctx ends,
	// or when this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err = cmd.Start(); err == nil {
		reapCtx, stopReaping := context.WithCancel(ctx)
		go reapOrphans(reapCtx, cmd.Process.Pid, time.Second)
		err = cmd.Wait()
		stopReaping()
	}
	if o.Log != nil {
		o.Log.Write(out.Bytes())
	}
	if ctx.Err() != nil {
		return Report{}, ctx.Err()
	}
	if err != nil {
		return Report{}, fmt.Errorf("gremlins on ./%s: %v: %s", o.Package, err, failureLines(out.String(), 5))
	}
	r, err := readReport(o.Output, readOptions{allowEmpty: true, dryRun: o.DryRun})
	if err != nil {
		return Report{}, fmt.Errorf("gremlins on ./%s: %w", o.Package, err)
	}
	return r, nil
}

// writeGitShim writes dir/bin/git, which prints diff for `git diff
// --merge-base ...` and runs the real git for anything else, and returns
// dir/bin.
func writeGitShim(dir string, diff []byte) (string, error) {
	realGit, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("git is not on PATH: %w", err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return "", err
	}
	sel := filepath.Join(dir, "selection.diff")
	if err := os.WriteFile(sel, diff, 0o644); err != nil {
		return "", err
	}
	script := fmt.Sprintf("#!/bin/sh\n# doublerun: gremlins reads its selection of lines as a git diff.\n"+
		"if [ \"$1\" = diff ] && [ \"$2\" = --merge-base ]; then exec cat %s; fi\nexec %s \"$@\"\n",
		shellQuote(sel), shellQuote(realGit))
	return bin, os.WriteFile(filepath.Join(bin, "git"), []byte(script), 0o755)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// failureLines says why gremlins failed from its output: the lines of go
// test's failure report (each failed test, its assertions' errors and
// messages, and any panic), so that a test failing in the unmutated run is
// named, followed by the last n lines. gremlins prints go test's output
// of that run whole, and its last lines alone name only the package.
// Caught by TestFailureLinesNameTheFailedTest.
func failureLines(s string, n int) string {
	var why []string
	for _, l := range strings.Split(s, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "Messages:") || strings.HasPrefix(t, "panic:") {
			why = append(why, t)
		}
	}
	if last := lastLines(s, n); last != "" {
		why = append(why, last)
	}
	return strings.Join(why, " / ")
}

// lastLines returns the last n non-empty lines of s, joined by " / ".
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
