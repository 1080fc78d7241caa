package scenarios_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// debianPython is the interpreter that sees Debian's python3-psycopg; the
// python3 on PATH may be another (a pyenv) that does not.
const debianPython = "/usr/bin/python3"

// seedLease is the Python port of the seed's lease.
func seedLease(t *testing.T, args ...string) []string {
	t.Helper()
	path, err := filepath.Abs("../testdata/replicas/seed_lease.py")
	require.NoError(t, err)
	return append([]string{debianPython, path}, args...)
}

// needPsycopg installs python3-psycopg when it is missing, as the native
// provider installs its packages (stacktest.NeedPackage).
func needPsycopg(t *testing.T) {
	t.Helper()
	stacktest.NeedPackage(t, "python3-psycopg", func() error { return exec.Command(debianPython, "-c", "import psycopg").Run() })
}

// The seed's lease in Python: #556 through transaction pooling, as the
// built-in advisory lease, and safe through the pinned endpoint and the
// alias topology.
func TestSeedLeaseInPython(t *testing.T) {
	t.Parallel()
	needPsycopg(t)
	for _, sc := range []Scenario{Issue556, Issue556Pinned, Issue556Alias} {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Duration = 4 * time.Second
			sc.Replica = &replica.Command{Command: seedLease(t)}
			rep, err := runCommand(t, sc, RunOptions{})
			require.NoError(t, err)
			require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
			require.Equal(t, replica.ModeSQL, rep.Protocol.Mode)
			require.NotEmpty(t, rep.History.Intervals)
		})
	}
}

// A missing Python module is one line naming the package and the
// interpreter.
func TestSeedLeaseNamesAMissingModule(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	if exec.Command(python, "-c", "import psycopg").Run() == nil {
		t.Skipf("%s sees psycopg; this test needs an interpreter that does not", python)
	}
	cmd := exec.Command(python, seedLease(t)[1])
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	line := strings.TrimSpace(string(out))
	require.NotContains(t, line, "\n")
	require.Contains(t, line, "Python module psycopg not found by ")
	require.Contains(t, line, "install Debian's package python3-psycopg")
}

// Log mode: the seed's lease run as an unchanged program that only logs,
// judged from its output; the same verdicts as over SQL.
func TestLogModeJudgesAnUnchangedProgram(t *testing.T) {
	t.Parallel()
	needPsycopg(t)
	for _, sc := range []Scenario{Issue556, Issue556Pinned} {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Duration = 4 * time.Second
			sc.Replica = &replica.Command{Command: seedLease(t, "--log-only"), Log: &replica.LogPatterns{
				BecameLeader: `^became leader`, LostLeadership: `^lost leadership`,
				WorkStarted: `^sweep started$`, WorkEnded: `^sweep finished$`}}
			rep, err := runCommand(t, sc, RunOptions{})
			require.NoError(t, err)
			require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
			p := rep.Protocol
			require.Equal(t, replica.ModeLog, p.Mode)
			require.Contains(t, p.Note, "the runner's receipt")
			require.Positive(t, p.Matched)
			require.Positive(t, p.ReceiptLagMax)
			require.LessOrEqual(t, p.ReceiptLagMedian, p.ReceiptLagMax)
		})
	}
}
