package mutation

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildGremlins builds the gremlins the module's go.mod names into the
// test's temp dir.
func buildGremlins(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gremlins")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/go-gremlins/gremlins/cmd/gremlins").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// A selection reaches gremlins as its diff: only the mutants on the
// selected lines run, every other one is SKIPPED, and an empty selection
// never reaches gremlins at all.
func TestUnleashRunsTheSelectedLinesOnly(t *testing.T) {
	t.Parallel()
	bin := buildGremlins(t)
	root, err := filepath.Abs(filepath.Join("testdata", "fixture"))
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "gremlins.yaml")
	// The fixture's Spin loop never ends when mutated; keep it out.
	require.NoError(t, os.WriteFile(config, []byte("unleash:\n  workers: 1\n  timeout-coefficient: 10\n  threshold:\n    efficacy: 0\n    mutant-coverage: 0\n"), 0o644))
	out := filepath.Join(t.TempDir(), "clamp.json")
	// Line 14 is `if n > hi {`: a boundary mutant the fixture's tests
	// miss (testdata/gremlins/clamp.json) and a negation they catch.
	rep, err := Unleash(t.Context(), UnleashOptions{
		Gremlins: bin, Root: root, Package: "clamp", Config: config, Output: out,
		Selection: Selection{"clamp.go": {14}},
		Env:       []string{"GOFLAGS=-count=1"},
	})
	require.NoError(t, err)
	ran := map[string]string{}
	skipped := 0
	for _, f := range rep.Files {
		for _, m := range f.Mutations {
			if m.Status == StatusSkipped {
				skipped++
				continue
			}
			require.Equal(t, "clamp.go", f.FileName)
			require.Equal(t, 14, m.Line, "%+v", m)
			ran[m.Type] = m.Status
		}
	}
	require.Equal(t, map[string]string{"CONDITIONALS_BOUNDARY": StatusLived, "CONDITIONALS_NEGATION": StatusKilled}, ran)
	require.Positive(t, skipped, "the other lines' mutants are listed, not run")

	_, err = Unleash(t.Context(), UnleashOptions{Gremlins: bin, Root: root, Package: "clamp", Config: config, Output: out, Selection: Selection{}})
	require.ErrorIs(t, err, ErrNothingSelected)
}

// TestFailureLinesNameTheFailedTest: when gremlins stops because the
// package's tests fail unmutated, the error names the failed test and its
// assertion, not only the package's last lines.
func TestFailureLinesNameTheFailedTest(t *testing.T) {
	out := `coverage: 96.6% of statements
--- FAIL: TestComplete (0.00s)
    --- FAIL: TestComplete/StalledWorkerDoesNotHoldOffTheNextLeader (1.85s)
        commit_test.go:138:
            	Error Trace:	commit_test.go:138
            	Error:      	Should not be: 2
            	Messages:   	nobody else holds the lease
FAIL
FAIL	github.com/doublerun/doublerun/worker	27.299s
ERROR: failed to gather coverage: impossible to executeCov
`
	got := failureLines(out, 2)
	require.Equal(t, "--- FAIL: TestComplete (0.00s) / --- FAIL: TestComplete/StalledWorkerDoesNotHoldOffTheNextLeader (1.85s) / "+
		"Error:      \tShould not be: 2 / Messages:   \tnobody else holds the lease / "+
		"FAIL\tgithub.com/doublerun/doublerun/worker\t27.299s / ERROR: failed to gather coverage: impossible to executeCov", got)
	require.Equal(t, "a / b", failureLines("a\nb\n", 5), "without a failure report, the last lines")
}
