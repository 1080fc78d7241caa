package mutation

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/mutation/mutationtest"
)

// The fixture module under testdata/fixture is a module of its own (the go
// tool ignores testdata directories), so these tests run real go test
// processes in it, with real overlays.
func fixtureGuards(t *testing.T, manifest string) []Guard {
	t.Helper()
	guards, err := LoadManifests(filepath.Join("testdata", "fixture", "guards", manifest))
	require.NoError(t, err)
	return guards
}

func TestRunGuardsOutcomes(t *testing.T) {
	t.Parallel()
	guards := fixtureGuards(t, "outcomes.guards.json")
	clamp := filepath.Join("testdata", "fixture", "clamp", "clamp.go")
	before, err := os.ReadFile(clamp)
	require.NoError(t, err)
	tmp := t.TempDir()

	var mu sync.Mutex
	var progressed []int
	results, err := RunGuards(t.Context(), guards, GuardOptions{
		TempDir: tmp,
		Env:     []string{"TMPDIR=" + tmp},
		Progress: func(i int, r GuardResult) {
			mu.Lock()
			defer mu.Unlock()
			progressed = append(progressed, i)
			require.Equal(t, guards[i].ID, r.ID)
		},
	})
	require.NoError(t, err)

	want := map[string]struct {
		outcome Outcome
		detail  string
	}{
		"fixture.cap-at-high":       {Killed, "failed: TestClampCapsAtHigh"},
		"fixture.floor-at-low":      {Survived, "tests passed"},
		"fixture.snippet-missing":   {NotApplied, "snippet not found in clamp/clamp.go"},
		"fixture.snippet-ambiguous": {NotApplied, "snippet occurs more than once in clamp/clamp.go"},
		// The compiler's message names the real file, not the overlay.
		"fixture.does-not-compile":   {BuildFailed, "build failed: clamp/clamp.go:14:9: undefined: undefinedName"},
		"fixture.no-such-test":       {NoTestsRan, "without the mutant, the run pattern matches no test"},
		"fixture.test-already-fails": {BaselineFailed, "without the mutant, failed: TestKnownBroken"},
	}
	require.Len(t, results, len(want))
	for _, r := range results {
		w, ok := want[r.ID]
		require.True(t, ok, r.ID)
		require.Equal(t, w.outcome, r.Outcome, "%s: %s\n%s", r.ID, r.Detail, r.Output)
		require.Contains(t, r.Detail, w.detail, r.ID)
		require.Equal(t, r.Outcome == Killed, r.Passed())
		require.Positive(t, r.Duration)
		if r.Outcome == Killed || r.Outcome == NotApplied {
			require.Empty(t, r.Output, r.ID)
		} else {
			require.NotEmpty(t, r.Output, "%s keeps go test's output for diagnosis", r.ID)
		}
	}
	require.Len(t, progressed, len(guards))

	after, err := os.ReadFile(clamp)
	require.NoError(t, err)
	require.Equal(t, before, after, "the working tree is never written")
	assertEmptyDir(t, tmp)
}

func TestRunGuardsTimesOut(t *testing.T) {
	t.Parallel()
	guards := fixtureGuards(t, "timeout.guards.json")
	// The bound must hold the unmutated run, go test's link and run of the
	// fixture: beside two CPU hogs, the mutation gate and the rest of make
	// test (load average 12 to 15) that took past a fixed 8s, and the
	// baseline failed. The bound is three times one clean run timed here,
	// at this moment's load, and never under 8s: the mutant spins until
	// it, so it is kept no longer than the load needs.
	clean := time.Now()
	warm := exec.Command("go", "test", "-count=1", "-vet=off", "-run", guards[0].Run, guards[0].Package)
	warm.Dir = guards[0].Root
	out, err := warm.CombinedOutput()
	require.NoError(t, err, "%s", out)
	took := time.Since(clean)
	bound := max(8*time.Second, (3 * took).Round(time.Second))
	t.Logf("a clean run took %s; the bound is %s", took.Round(100*time.Millisecond), bound)
	start := time.Now()
	var progressed []GuardResult
	results, err := RunGuards(t.Context(), guards, GuardOptions{Timeout: bound, KillGrace: time.Second,
		Progress: func(_ int, r GuardResult) { progressed = append(progressed, r) }})
	require.NoError(t, err)
	// It timed out beside the others, and again alone with three times
	// its tests' unmutated time: the mutant's own endless loop kills it.
	require.Equal(t, Killed, results[0].Outcome, "%s\n%s", results[0].Detail, results[0].Output)
	require.Contains(t, results[0].Rerun, fmt.Sprintf("TIMED_OUT beside the others (bound %s, after ", bound))
	require.Contains(t, results[0].Rerun, "alone: KILLED by its own endless loop (timed out again alone) in ")
	require.Regexp(t, `bound \S+ \((the floor; )?3 × clean `, results[0].Rerun)
	require.Equal(t, results, progressed, "progress reports the verdict after the re-run, once")
	// Two bounds and the kill grace; the first is 8 s on an idle machine,
	// the re-run's a few seconds.
	require.Less(t, time.Since(start), 90*time.Second+3*(bound-8*time.Second))
}

// Cancelling RunGuards while a test binary runs kills the whole process
// group and removes every temporary file.
func TestRunGuardsCancelLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	guards := fixtureGuards(t, "block.guards.json")
	tmp := t.TempDir()
	pidfile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type ret struct {
		results []GuardResult
		err     error
	}
	done := make(chan ret, 1)
	go func() {
		r, err := RunGuards(ctx, guards, GuardOptions{
			TempDir:   tmp,
			Env:       []string{"TMPDIR=" + tmp, "FIXTURE_PIDFILE=" + pidfile},
			KillGrace: 2 * time.Second,
		})
		done <- ret{r, err}
	}()
	pid := mutationtest.WaitForPID(t, pidfile)
	require.True(t, mutationtest.Alive(pid), "test binary %d is running", pid)
	cancel()
	cancelled := time.Now()
	select {
	case r := <-done:
		t.Logf("RunGuards returned %s after cancel", time.Since(cancelled))
		require.ErrorIs(t, r.err, context.Canceled)
		require.Empty(t, r.results[0].Outcome, "an interrupted guard has no verdict")
	case <-time.After(time.Minute):
		t.Fatal("RunGuards did not return after cancel")
	}
	require.False(t, mutationtest.Alive(pid), "test binary %d outlived the cancel", pid)
	assertEmptyDir(t, tmp)
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Empty(t, names, "left behind in %s", dir)
}
