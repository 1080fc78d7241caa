package chaos

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

func TestSummary(t *testing.T) {
	t.Parallel()
	cell := func(strategy, fault string, expect scenarios.Expectation, pass bool, dr time.Duration) Result {
		sc, err := Cell(strategy, scenarios.Transaction, fault)
		require.NoError(t, err)
		m := oracle.Metrics{DoubleRun: oracle.Window{Episodes: 2, Total: oracle.Duration(dr)}, Leaderless: oracle.Window{Total: oracle.Duration(time.Second)},
			StaleWrites: oracle.StaleWrites{Accepted: 0, Rejected: 3}}
		return Result{Scenario: sc, Report: &scenarios.Report{Scenario: sc, Metrics: m, Verdict: scenarios.Verdict{Expect: expect, Pass: pass, Reason: "because"}}}
	}
	none, err := Cell("advisory", scenarios.Transaction, "none")
	require.NoError(t, err)
	results := []Result{
		cell("fenced", "KILL_LEADER", scenarios.ExpectSafe, true, 0),
		cell("advisory", "KILL_LEADER", scenarios.ExpectReproduces, false, 0),
		{Scenario: none, Err: errors.New("no replica became leader\nlogs..."), Notes: []string{"session did not answer; started it again"}},
		cell("advisory", "FREEZE_LEADER", scenarios.ExpectReproduces, true, 1500*time.Millisecond),
	}
	out := Summary(results, 90*time.Second)
	require.Contains(t, out, "4 cells, 2 matched their expectation, 2 did not; wall time 1m30s.")
	rows := strings.Split(out, "\n")
	var table []string
	for _, r := range rows {
		if strings.HasPrefix(r, "| advisory") || strings.HasPrefix(r, "| fenced") {
			table = append(table, r)
		}
	}
	require.Equal(t, []string{
		"| advisory | none | transaction(pool=1) | - | - | - | reproduces | **ERROR** |",
		"| advisory | KILL_LEADER | transaction(pool=1) | 0s (2) | 1s | 0 / 3 | reproduces | **FAIL** |",
		"| advisory | FREEZE_LEADER | transaction(pool=1) | 1.5s (2) | 1s | 0 / 3 | reproduces | PASS |",
		"| fenced | KILL_LEADER | transaction(pool=1) | 0s (2) | 1s | 0 / 3 | safe | PASS |",
	}, table, "sorted by strategy, then fault in catalog order")
	require.Contains(t, out, "- `advisory/transaction/KILL_LEADER`: because")
	require.Contains(t, out, "- `advisory/transaction/none`: could not run as designed: no replica became leader\n")
	require.Contains(t, out, "- after `advisory/transaction/none`: session did not answer; started it again")
	require.Len(t, Failed(results), 2)
	require.Equal(t, "ERROR advisory/transaction/none                no replica became leader\n    note: session did not answer; started it again", results[2].Line())
}

func TestFlaked(t *testing.T) {
	t.Parallel()
	require.Equal(t, "boom", flaked(Result{Err: errors.New("boom\nmore")}))
	ok := &scenarios.Report{Replicas: []scenarios.ReplicaInfo{{ID: "r1", Exit: "exit 0"}, {ID: "r2", Exit: "signal: killed"}}}
	require.Empty(t, flaked(Result{Report: ok}), "a clean stop and the fault's own kill are not flakes")
	bad := &scenarios.Report{Replicas: []scenarios.ReplicaInfo{{ID: "r1", Exit: "exit 0"}, {ID: "r2", Exit: "exit status 1", Log: "r2.log"}}}
	require.Equal(t, "replica r2 failed (exit status 1; log r2.log)", flaked(Result{Report: bad}))
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
