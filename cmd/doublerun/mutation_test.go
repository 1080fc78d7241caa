package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/mutation/mutationtest"

	"github.com/doublerun/doublerun/mutation"
)

// The fixture module of package mutation: guards that are killed, survive,
// do not apply, do not build, and so on (see its guards/*.guards.json).
var (
	fixtureGuards = filepath.Join("..", "..", "mutation", "testdata", "fixture", "guards")
	clampReport   = filepath.Join("..", "..", "mutation", "testdata", "gremlins", "clamp.json")
	baselineFile  = filepath.Join("..", "..", "testdata", "mutation", "baseline.json")
)

// runMutation runs the mutation command in-process and returns what main
// would: its output and exit code.
func runMutation(ctx context.Context, t *testing.T, args ...string) (stdout, stderr string, code int, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c := mutationCommand()
	err = c.run(ctx, e, args)
	code = finish(ctx, &errb, c, err)
	return out.String(), errb.String(), code, err
}

// Until main's commands() lists mutationCommand, the CLI does not know
// the command; this test says so.
func TestMutationCommandIsRegistered(t *testing.T) {
	t.Parallel()
	require.Contains(t, commandNames(), "mutation")
	_, _, code := cli(t, nil, "mutation", "--help")
	require.Zero(t, code)
}

func TestMutationGuardsFixture(t *testing.T) {
	t.Parallel()

	t.Run("EveryOutcomeAndANonZeroExit", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, err := runMutation(t.Context(), t, "guards",
			"--manifest", filepath.Join(fixtureGuards, "outcomes.guards.json"))
		require.Equal(t, 1, code, "stdout: %s\nstderr: %s", stdout, stderr)
		require.EqualError(t, err, "6 of 7 guards not killed: fixture.floor-at-low (SURVIVED), fixture.snippet-missing (NOT_APPLIED), "+
			"fixture.snippet-ambiguous (NOT_APPLIED), fixture.does-not-compile (BUILD_FAILED), fixture.no-such-test (NO_TESTS_RAN), "+
			"fixture.test-already-fails (BASELINE_FAILED)")
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Regexp(t, `^GUARD\s+OUTCOME\s+DURATION\s+DETAIL$`, lines[0])
		require.Regexp(t, `^fixture.cap-at-high\s+KILLED\s+\S+s\s+failed: TestClampCapsAtHigh$`, lines[1])
		require.Regexp(t, `^fixture.floor-at-low\s+SURVIVED\s`, lines[2])
		require.Equal(t, "1 of 7 guards killed in", strings.Join(strings.Fields(lines[len(lines)-1])[:6], " "))
		// One progress line per guard on stderr, with go test's output
		// under each guard that was not killed.
		require.Len(t, regexp.MustCompile(`(?m)^\[\d/7\] fixture\.\S+ [A-Z_]+ `).FindAllString(stderr, -1), 7, stderr)
		require.Contains(t, stderr, "    | ok  \tdoublerun.test/fixture/clamp")
	})

	t.Run("OneKilledGuardPassesAsJSON", func(t *testing.T) {
		t.Parallel()
		stdout, _, code, err := runMutation(t.Context(), t, "guards", "--json",
			"--manifest", filepath.Join(fixtureGuards, "*.guards.json"), "--guard", `^fixture\.cap-at-high$`)
		require.NoError(t, err)
		require.Zero(t, code)
		var out struct {
			Passed bool
			Guards []mutation.GuardResult
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		require.True(t, out.Passed)
		require.Len(t, out.Guards, 1)
		require.Equal(t, mutation.Killed, out.Guards[0].Outcome)
		require.Positive(t, out.Guards[0].Seconds)
	})

	// A guard that timed out is re-run alone, and the output names it
	// with both runs' times.
	t.Run("ATimedOutGuardIsReRunAlone", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, err := runMutation(t.Context(), t, "guards", "--timeout", "8s",
			"--manifest", filepath.Join(fixtureGuards, "timeout.guards.json"))
		require.NoError(t, err, "stdout: %s\nstderr: %s", stdout, stderr)
		require.Zero(t, code)
		require.Regexp(t, `(?m)^RE-RUN guard fixture\.loop-step TIMED_OUT beside the others \(bound 8s, after \S+\); alone: KILLED by its own endless loop \(timed out again alone\) in \S+, bound \S+ \((the floor; )?3 × clean \S+( is less)?\)$`, stdout)
		require.Contains(t, stderr, "    re-run: TIMED_OUT beside the others")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			code int
			err  string
		}{
			{nil, 2, "missing subcommand: ci, full, guards, gate or record"},
			{[]string{"run"}, 2, `unknown subcommand "run": use ci, full, guards, gate or record`},
			{[]string{"guards", "--manifest", "nowhere/*.guards.json"}, 1, `no guard manifest matches "nowhere/*.guards.json"`},
			{[]string{"guards", "--parallel", "0"}, 2, "--parallel must be at least 1"},
			{[]string{"guards", "--manifest", filepath.Join(fixtureGuards, "*.json"), "--guard", "^nope$"}, 1, `no guard id in`},
			{[]string{"guards", "--guard", "("}, 2, `--guard "("`},
			{[]string{"record", "--shards", "0"}, 2, "--shards must be from 1 to 64, not 0"},
			{[]string{"ci", "--shards", "16"}, 2, "--shards is the shard count of the record --write-record writes; give --write-record too"},
			{[]string{"ci", "--write-record", "--shards", "65"}, 2, "--shards must be from 1 to 64, not 65"},
			{[]string{"record", "--at", "no-such-commit"}, 1, "--at: git rev-parse --verify no-such-commit^{commit}"},
			{[]string{"record", "--record", filepath.Join(t.TempDir(), "none.json")}, 2, "--at: no commit given and "},
		} {
			_, _, code, err := runMutation(t.Context(), t, tc.args...)
			require.Equal(t, tc.code, code, "%v: %v", tc.args, err)
			require.ErrorContains(t, err, tc.err, "%v", tc.args)
		}
	})
}

// With --share-stack the command starts one stack and every guard's go
// test reaches it through the external provider: the fixture's test passes
// unmutated only if it does.
func TestMutationGuardsShareOneStack(t *testing.T) {
	t.Parallel()
	stdout, stderr, code, err := runMutation(t.Context(), t, "guards", "--share-stack",
		"--manifest", filepath.Join(fixtureGuards, "sharedstack.guards.json"))
	require.NoError(t, err, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Zero(t, code)
	require.Regexp(t, `(?m)^fixture.shared-stack\s+KILLED\s`, stdout)
}

// Ctrl-C (the command's context ending) stops the running go test, test
// binary included, and removes every temporary file. Not parallel: it
// sets TMPDIR for the process.
func TestMutationGuardsInterruptLeavesNothingBehind(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	pidfile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("FIXTURE_PIDFILE", pidfile)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type ret struct {
		code int
		err  error
	}
	done := make(chan ret, 1)
	go func() {
		_, _, code, err := runMutation(ctx, t, "guards",
			"--manifest", filepath.Join(fixtureGuards, "block.guards.json"))
		done <- ret{code, err}
	}()
	pid := mutationtest.WaitForPID(t, pidfile)
	require.True(t, mutationtest.Alive(pid))
	cancel()
	select {
	case r := <-done:
		require.Equal(t, 130, r.code, "exit code of an interrupted command")
		require.EqualError(t, r.err, "interrupted after 0 of 1 guards; nothing was left behind")
	case <-time.After(time.Minute):
		t.Fatal("mutation guards did not return after its context ended")
	}
	require.False(t, mutationtest.Alive(pid), "test binary %d outlived the interrupt", pid)
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "left behind in TMPDIR")
}

func TestMutationGate(t *testing.T) {
	t.Parallel()
	// clamp.json: 6 killed, 6 lived, 2 not covered, 2 timed out; efficacy
	// 50%, mutant coverage 12/14.
	const coverage = "85.71428571428571"

	t.Run("PrintsFiguresAndMutants", func(t *testing.T) {
		t.Parallel()
		stdout, _, code, err := runMutation(t.Context(), t, "gate", "--baseline", "", "--report", clampReport)
		require.NoError(t, err)
		require.Zero(t, code)
		require.Regexp(t, `(?m)^clamp\s+50\.00%\s+85\.71%\s+6\s+6\s+2\s+2\s+0\s+20s\s+1\.5\s+-$`, stdout)
		require.Contains(t, stdout, "LIVED        clamp/clamp.go:14:CONDITIONALS_BOUNDARY\n")
		require.Contains(t, stdout, "NOT COVERED  clamp/clamp.go:55:ARITHMETIC_BASE\n")
		require.Equal(t, 6, strings.Count(stdout, "\nLIVED "))
		require.Equal(t, 2, strings.Count(stdout, "\nNOT COVERED "))
	})
	t.Run("EqualToThresholdPasses", func(t *testing.T) {
		t.Parallel()
		_, _, code, err := runMutation(t.Context(), t, "gate", "--baseline", "", "--report", "lease="+clampReport,
			"--min-efficacy", "50", "--min-coverage", coverage)
		require.NoError(t, err)
		require.Zero(t, code)
	})
	t.Run("BelowThresholdFails", func(t *testing.T) {
		t.Parallel()
		stdout, _, code, err := runMutation(t.Context(), t, "gate", "--baseline", "", "--report", "lease="+clampReport,
			"--report", "worker="+clampReport, "--min-efficacy", "75", "--min-coverage", "90")
		require.Equal(t, 1, code)
		require.EqualError(t, err, "gate failed: lease: efficacy 50.00% is below the threshold 75.00% (and 3 more above)")
		require.Regexp(t, `(?m)^total\s+50\.00%\s+85\.71%\s+12\s+12\s+4\s+4\s+0\s+41s\s+1\.5\s*$`, stdout, "two reports of 20.4 s and 14 test runs each")
		require.Contains(t, stdout, "FAIL worker: mutant coverage 85.71% is below the threshold 90.00%\n")
		require.Contains(t, stdout, "LIVED        worker/clamp.go:19:CONDITIONALS_BOUNDARY\n")
	})
	t.Run("RefusesAFileThatIsNotAReport", func(t *testing.T) {
		t.Parallel()
		empty := filepath.Join(t.TempDir(), "x.json")
		require.NoError(t, os.WriteFile(empty, []byte("{}"), 0o644))
		stdout, stderr, code := cli(t, nil, "mutation", "gate", "--baseline", "", "--report", "lease="+empty)
		require.Equal(t, 1, code)
		require.Empty(t, stdout)
		require.Equal(t, "doublerun mutation: "+empty+" is not a gremlins v0.6.0 report: it names no go_module; give the file `gremlins unleash --output` wrote\n", stderr)
	})
	t.Run("CommittedBaselineNeedsLeaseAndWorker", func(t *testing.T) {
		t.Parallel()
		_, _, code, err := runMutation(t.Context(), t, "gate", "--baseline", baselineFile, "--report", clampReport)
		require.Equal(t, 1, code)
		require.ErrorContains(t, err, "gate failed: lease: the baseline names it but no report covers it")
	})
	t.Run("WriteBaselineRaisesIt", func(t *testing.T) {
		t.Parallel()
		b := filepath.Join(t.TempDir(), "baseline.json")
		zero := `{"lease":{"efficacy":0,"coverage":0},"worker":{"efficacy":0,"coverage":0}}`
		require.NoError(t, os.WriteFile(b, []byte(zero), 0o644))
		stdout, _, code, err := runMutation(t.Context(), t, "gate", "--baseline", b, "--write-baseline",
			"--report", "lease="+clampReport, "--report", "worker="+clampReport)
		require.NoError(t, err)
		require.Zero(t, code)
		require.Contains(t, stdout, "raised to this run's figures")
		raised, err := mutation.ReadBaseline(b)
		require.NoError(t, err)
		require.Equal(t, mutation.Baseline{"lease": {Efficacy: 50, Coverage: 85.71}, "worker": {Efficacy: 50, Coverage: 85.71}}, raised)
		// The same run passes against the raised baseline.
		_, _, code, err = runMutation(t.Context(), t, "gate", "--baseline", b,
			"--report", "lease="+clampReport, "--report", "worker="+clampReport)
		require.NoError(t, err)
		require.Zero(t, code)
	})
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			code int
			err  string
		}{
			{[]string{"gate"}, 2, "missing --report"},
			{[]string{"gate", "--report", "=x.json"}, 2, `--report "=x.json": want NAME=FILE or FILE, not "=x.json"`},
			{[]string{"gate", "--report", clampReport, "--min-efficacy", "150"}, 2, "--min-efficacy must be a percentage from 0 to 100, not 150"},
			{[]string{"gate", "--report", clampReport, "--baseline", "", "--write-baseline"}, 2, "--write-baseline needs --baseline"},
			{[]string{"gate", "--report", "missing.json", "--baseline", ""}, 1, "gremlins report missing.json does not exist"},
		} {
			_, _, code, err := runMutation(t.Context(), t, tc.args...)
			require.Equal(t, tc.code, code, "%v: %v", tc.args, err)
			require.ErrorContains(t, err, tc.err, "%v", tc.args)
		}
	})
}

// The bound gremlins gave a mutant is named from .gremlins.yaml's
// coefficient, gremlins' default 3 when it sets none.
func TestGremlinsCoefficient(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5, gremlinsCoefficient(filepath.Join("..", "..")), "the committed .gremlins.yaml")
	dir := t.TempDir()
	require.Equal(t, 3, gremlinsCoefficient(dir), "no file")
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".gremlins.yaml"), []byte("unleash:\n  timeout-coefficient: 0\n"), 0o644))
	require.Equal(t, 3, gremlinsCoefficient(dir), "no positive coefficient")
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".gremlins.yaml"), []byte("unleash:\n  # a comment\n  timeout-coefficient: 7\n"), 0o644))
	require.Equal(t, 7, gremlinsCoefficient(dir))
}

// The mutation commands find the repository's files from any directory
// inside it, passing over the go.mod of a test fixture's own module, and
// outside it say where to run them.
func TestMutationFindsTheRepositoryRoot(t *testing.T) {
	t.Parallel()
	clamp, err := filepath.Abs(clampReport)
	require.NoError(t, err)
	fixture, err := filepath.Abs(filepath.Join("..", "..", "mutation", "testdata", "fixture"))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(fixture, "go.mod"), "the fixture is a module of its own")

	baseline, err := mutation.ReadBaseline(filepath.Join("..", "..", "testdata", "mutation", "baseline.json"))
	require.NoError(t, err)
	for _, dir := range []string{".", fixture} {
		cmd := cliCommand(t, nil, "mutation", "gate", "--report", "lease="+clamp)
		cmd.Dir = dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.Error(t, cmd.Run())
		require.Equal(t, 1, cmd.ProcessState.ExitCode())
		require.Equal(t, fmt.Sprintf("doublerun mutation: gate failed: lease: efficacy 50.00%% is below the baseline %.2f%% (and 3 more above)\n", baseline["lease"].Efficacy), stderr.String(),
			"the committed baseline was read from %s", dir)
	}

	outside := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mutation", "gate", "--report", "lease=" + clamp},
			"doublerun mutation: cannot find testdata/mutation/baseline.json: the working directory is not inside the doublerun repository; " +
				"run doublerun mutation gate from inside it, or pass --baseline FILE (or --baseline '' for none)\n"},
		{[]string{"mutation", "guards"},
			"doublerun mutation: cannot find testdata/mutation/*.guards.json: the working directory is not inside the doublerun repository; " +
				"run doublerun mutation guards from inside it, or pass --manifest GLOB\n"},
	} {
		cmd := cliCommand(t, nil, tc.args...)
		cmd.Dir = outside
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.Error(t, cmd.Run())
		require.Equal(t, 1, cmd.ProcessState.ExitCode())
		require.Equal(t, tc.want, stderr.String())
		require.Empty(t, stdout.String())
	}
	// --baseline '' outside the repository gates on the thresholds alone.
	cmd := cliCommand(t, nil, "mutation", "gate", "--baseline", "", "--report", "lease="+clamp)
	cmd.Dir = outside
	require.NoError(t, cmd.Run())
}
