package scenarios_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Issue 32 through the runner, on a primary and its asynchronous standby:
// across a promotion that lost the last grant the plain fence's token
// goes back, and the epoch fence holds; both runs' reports recompute from
// their histories as doublerun check does (oracle.LoadFailover read them
// from the oracle's server and the promoted standby), and the second run
// rebuilt the standby the first run's failover took. reporttest's code of
// its own recomputes them too, and keeps them for make test's doublerun
// check.
func TestReproFailover(t *testing.T) {
	t.Parallel()
	s := stacktest.OwnHA(t, stack.ReplicationAsync)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	res, err := ReproFailover(ctx, RunOptions{Stack: s, OutDir: dir}, func(rep *Report) error {
		t.Log(report.Line(rep))
		if err := report.Write(dir, rep); err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(dir, rep.Scenario.Name, "report.json"))
		if err != nil {
			return err
		}
		r, err := report.Recompute(data)
		require.NoError(t, err)
		require.Empty(t, r.Diffs, "%s: figures that do not recompute from the history", rep.Scenario.Name)
		reporttest.Save(t, rep)
		return nil
	})
	require.NoError(t, err)
	require.True(t, res.Verdict().Pass, res.Verdict().Reason)

	plain, epoch := res.Plain.Metrics, res.Epoch.Metrics
	require.NotNil(t, plain.Loss)
	require.NotEmpty(t, plain.Loss.TokenRegressions, "the lost token was granted again")
	require.Equal(t, oracle.LinearizableNo, plain.Linearizability.Linearizable)
	require.NotNil(t, epoch.Loss)
	require.Empty(t, epoch.Loss.TokenRegressions)
	require.Zero(t, epoch.StaleWrites.Accepted)
	require.True(t, epoch.Linearizability.Holds())
	for _, rep := range []*Report{res.Plain, res.Epoch} {
		require.NotEmpty(t, rep.History.Acks, "%s: the replicas told the oracle of their writes", rep.Scenario.Name)
		require.NotEmpty(t, report.FailoverSteps(rep.History), rep.Scenario.Name)
	}
	r, ok := s.Replication()
	require.True(t, ok)
	require.Equal(t, stack.PrimaryName, r.Routed, "the second failover went back to pg1, on the standby rebuilt after the first")
}

// A scenario runs on the stack it asks for: one with a standby only on a
// stack that has one, in its mode.
func TestStandbyMustMatchTheStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := IssueFailoverEpoch
	_, err := Run(ctx, sc, RunOptions{Stack: stacktest.Shared(t)})
	require.ErrorContains(t, err, "needs a stack with a async standby, and this one has none")
	plain := Issue556Fenced
	ha := stacktest.OwnHA(t, stack.ReplicationSync)
	_, err = Run(ctx, plain, RunOptions{Stack: ha})
	require.ErrorContains(t, err, "asks for one Postgres, and the stack has a sync standby")
	_, err = Run(ctx, sc, RunOptions{Stack: ha})
	require.ErrorContains(t, err, "needs a async standby, and the stack's is sync")
}
