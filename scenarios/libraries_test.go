package scenarios_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// buildReplica builds the replica program in testdata/replicas/<name> as
// its users build theirs, with go build in its own module (the library it
// judges is in that module's go.mod, not in doublerun's), and returns the
// binary's path.
func buildReplica(t *testing.T, name string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "testdata", "replicas", name))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = src
	// The program's own module, whatever workspace the tests run in.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build in %s: %s", src, out)
	return bin
}

// golang-migrate's own lock (the postgres driver's Lock, a session
// pg_advisory_lock) reproduces #556 through transaction pooling, where
// both replicas' lock calls share one backend, and is safe on the pinned
// endpoint: the library's column of the matrix in two cells
// (chaos/FINDINGS.md, golang-migrate).
func TestGolangMigrateReplica(t *testing.T) {
	t.Parallel()
	bin := buildReplica(t, "golang-migrate")
	for _, sc := range []Scenario{Issue556, Issue556Pinned} {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Duration = 4 * time.Second
			sc.Replica = &replica.Command{Command: []string{bin, "--mode", "lock"}}
			rep, err := runCommand(t, sc, RunOptions{})
			require.NoError(t, err)
			require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
			require.Equal(t, replica.ModeSQL, rep.Protocol.Mode)
			require.NotEmpty(t, rep.History.Intervals, "the driver's lock was never taken")
		})
	}
}

// River's elector, read from its river_leader row, elects one client on
// the pinned endpoint with the setting River documents for PgBouncer
// (PollOnly), and leads alone.
func TestRiverReplica(t *testing.T) {
	t.Parallel()
	bin := buildReplica(t, "river")
	sc := Issue556Pinned
	sc.Name = "river-poll-only-pinned"
	sc.Strategy = strategy.Fenced
	sc.Expect = ExpectSafe
	sc.Duration = 4 * time.Second
	sc.Replica = &replica.Command{Command: []string{bin, "--poll-only"}}
	rep, err := runCommand(t, sc, RunOptions{})
	require.NoError(t, err)
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	require.NotEmpty(t, rep.History.Intervals, "no River client was elected")
	leaders := map[string]bool{}
	for _, iv := range rep.History.Intervals {
		leaders[iv.Replica] = true
	}
	require.Len(t, leaders, 1, "with no fault one client leads the whole run")
}
