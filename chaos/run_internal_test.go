package chaos

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
)

func TestFlaked(t *testing.T) {
	t.Parallel()
	require.Equal(t, "boom", flaked(CellResult{Err: errors.New("boom\nmore")}))
	ok := &scenarios.Report{Replicas: []scenarios.ReplicaInfo{{ID: "r1", Exit: "exit 0"}, {ID: "r2", Exit: "signal: killed"}}}
	require.Empty(t, flaked(CellResult{Report: ok}), "a clean stop and the fault's own kill are not flakes")
	bad := &scenarios.Report{Replicas: []scenarios.ReplicaInfo{{ID: "r1", Exit: "exit 0"}, {ID: "r2", Exit: "exit status 1", Log: "r2.log"}}}
	require.Equal(t, "replica r2 failed (exit status 1; log r2.log)", flaked(CellResult{Report: bad}))
}

func TestMissed(t *testing.T) {
	t.Parallel()
	cell := func(e scenarios.Expectation, pass bool) CellResult {
		return CellResult{Report: &scenarios.Report{Verdict: scenarios.Verdict{Expect: e, Pass: pass, Reason: "why"}}}
	}
	require.Equal(t, "why", missed(cell(scenarios.ExpectReproduces, false)), "a reproduction that did not show runs again")
	require.Equal(t, "why", missed(cell(scenarios.ExpectReproducesOrOrphans, false)))
	require.Empty(t, missed(cell(scenarios.ExpectReproduces, true)), "a reproduction that showed is done")
	require.Empty(t, missed(cell(scenarios.ExpectSafe, false)), "a safe cell that failed is a finding, never run again")
	require.Empty(t, missed(cell(scenarios.ExpectFenced, false)))
	require.Empty(t, missed(CellResult{Err: errors.New("boom")}), "a cell that could not run is flaked's")
}

func TestInconclusiveRunsAgain(t *testing.T) {
	t.Parallel()
	cell := func(e scenarios.Expectation, inconclusive bool) CellResult {
		return CellResult{Report: &scenarios.Report{Verdict: scenarios.Verdict{Expect: e, Inconclusive: inconclusive, Reason: "contention: why"}}}
	}
	require.Equal(t, "INCONCLUSIVE: contention: why", inconclusive(cell(scenarios.ExpectSafe, true)), "a run that could not have failed runs again")
	require.Empty(t, missed(cell(scenarios.ExpectReproduces, true)), "once, not as a missed reproduction too")
	require.Empty(t, inconclusive(cell(scenarios.ExpectSafe, false)), "a conclusive verdict is kept")
	require.Empty(t, inconclusive(CellResult{Err: errors.New("boom")}), "a cell that could not run is flaked's")
	require.False(t, Verdict([]CellResult{cell(scenarios.ExpectSafe, true)}).Pass, "still inconclusive, the matrix fails")
}
