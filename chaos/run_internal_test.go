package chaos

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/report"
)

func TestFlaked(t *testing.T) {
	t.Parallel()
	require.Equal(t, "boom", flaked(report.Cell{Err: errors.New("boom\nmore")}))
	ok := &scenarios.Report{Replicas: []scenarios.ReplicaInfo{{ID: "r1", Exit: "exit 0"}, {ID: "r2", Exit: "signal: killed"}}}
	require.Empty(t, flaked(report.Cell{Report: ok}), "a clean stop and the fault's own kill are not flakes")
	bad := &scenarios.Report{Replicas: []scenarios.ReplicaInfo{{ID: "r1", Exit: "exit 0"}, {ID: "r2", Exit: "exit status 1", Log: "r2.log"}}}
	require.Equal(t, "replica r2 failed (exit status 1; log r2.log)", flaked(report.Cell{Report: bad}))
}

func TestMissed(t *testing.T) {
	t.Parallel()
	cell := func(e scenarios.Expectation, pass bool) report.Cell {
		return report.Cell{Report: &scenarios.Report{Verdict: scenarios.Verdict{Expect: e, Pass: pass, Reason: "why"}}}
	}
	require.Equal(t, "why", missed(cell(scenarios.ExpectReproduces, false)), "a reproduction that did not show runs again")
	require.Equal(t, "why", missed(cell(scenarios.ExpectReproducesOrOrphans, false)))
	require.Empty(t, missed(cell(scenarios.ExpectReproduces, true)), "a reproduction that showed is done")
	require.Empty(t, missed(cell(scenarios.ExpectSafe, false)), "a safe cell that failed is a finding, never run again")
	require.Empty(t, missed(cell(scenarios.ExpectFenced, false)))
	require.Empty(t, missed(report.Cell{Err: errors.New("boom")}), "a cell that could not run is flaked's")
}

func TestCellDurationHoldsTheFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault string
		want  time.Duration
	}{
		{"none", 5 * time.Second},
		{"KILL_LEADER", 5 * time.Second},
		{"FREEZE_LEADER", 9 * time.Second},
		{"PGBOUNCER_PAUSE", 9 * time.Second},
	} {
		sc, err := Cell("fenced", scenarios.Transaction, tc.fault)
		require.NoError(t, err)
		require.Equal(t, tc.want, sc.Duration, tc.fault)
	}
	require.Equal(t, 3*time.Second, fault.Hold(scenarios.Scenario{}.FaultSetting()), "TTL 2s + 1s")
	require.Equal(t, 45*time.Second, fault.Hold(scenarios.Scenario{TTL: 30 * time.Second}.FaultSetting()))
}
