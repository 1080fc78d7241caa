package chaos_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// scenario is a chaos cell's scenario, as the matrix names them.
func scenario(strategy, fault string, expect scenarios.Expectation) scenarios.Scenario {
	return scenarios.Scenario{Name: strategy + "/transaction/" + fault, Strategy: strategy, Fault: fault, Expect: expect,
		Topology: scenarios.Topology{Kind: scenarios.Transaction, PoolSize: 1}}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	cell := func(strategy, fault string, expect scenarios.Expectation, pass bool, dr time.Duration) chaos.CellResult {
		sc := scenario(strategy, fault, expect)
		m := oracle.Metrics{DoubleRun: oracle.Window{Episodes: 2, Total: oracle.Duration(dr)}, Leaderless: oracle.Window{Total: oracle.Duration(time.Second)},
			StaleWrites: oracle.StaleWrites{Accepted: 0, Rejected: 3}}
		return chaos.CellResult{Scenario: sc, Report: &scenarios.Report{Scenario: sc, Metrics: m, Verdict: scenarios.Verdict{Expect: expect, Pass: pass, Reason: "because"}}}
	}
	cells := []chaos.CellResult{
		cell("fenced", "KILL_LEADER", scenarios.ExpectSafe, true, 0),
		cell("advisory", "KILL_LEADER", scenarios.ExpectReproduces, false, 0),
		{Scenario: scenario("advisory", "none", scenarios.ExpectReproduces), Err: errors.New("no replica became leader\nlogs..."),
			Notes: []string{"session did not answer; started it again"}},
		cell("advisory", "FREEZE_LEADER", scenarios.ExpectReproduces, true, 1500*time.Millisecond),
	}
	out := chaos.Summary(cells, 90*time.Second)
	require.Contains(t, out, "4 cells, 2 matched their expectation, 2 did not; wall time 1m30s.")
	var table []string
	for _, r := range strings.Split(out, "\n") {
		if strings.HasPrefix(r, "| advisory") || strings.HasPrefix(r, "| fenced") {
			table = append(table, r)
		}
	}
	require.Equal(t, []string{
		"| advisory | none | transaction(pool=1) | - | - | - | - | reproduces | **ERROR** |",
		"| advisory | KILL_LEADER | transaction(pool=1) | 0s (2) | 1s | 0s (0) | 0 / 3 | reproduces | **FAIL** |",
		"| advisory | FREEZE_LEADER | transaction(pool=1) | 1.5s (2) | 1s | 0s (0) | 0 / 3 | reproduces | PASS |",
		"| fenced | KILL_LEADER | transaction(pool=1) | 0s (2) | 1s | 0s (0) | 0 / 3 | safe | PASS |",
	}, table, "sorted by strategy, then fault in catalog order")
	require.Contains(t, out, "- `advisory/transaction/KILL_LEADER`: because")
	require.Contains(t, out, "- `advisory/transaction/none`: could not run as designed: no replica became leader\n")
	require.Contains(t, out, "- after `advisory/transaction/none`: session did not answer; started it again")
	require.Len(t, chaos.Failed(cells), 2)
	require.Equal(t, "ERROR advisory/transaction/none                no replica became leader\n    note: session did not answer; started it again", cells[2].Line())
}

// One verdict type serves a run, a cell and a whole matrix; its Err is what
// the CLI returns.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	pass := chaos.CellResult{Scenario: scenario("fenced", "none", scenarios.ExpectSafe),
		Report: &scenarios.Report{Verdict: scenarios.Verdict{Expect: scenarios.ExpectSafe, Pass: true, Reason: "clean"}}}
	fail := chaos.CellResult{Scenario: scenario("advisory", "none", scenarios.ExpectSafe),
		Report: &scenarios.Report{Verdict: scenarios.Verdict{Expect: scenarios.ExpectSafe, Reason: "two leaders"}}}
	broken := chaos.CellResult{Scenario: scenario("advisory", "KILL_LEADER", scenarios.ExpectSafe), Report: pass.Report, Err: errors.New("replica r2 failed\nlog")}

	require.NoError(t, pass.Verdict().Err())
	require.EqualError(t, fail.Verdict().Err(), "two leaders")
	require.Equal(t, scenarios.Verdict{Expect: scenarios.ExpectSafe, Reason: "could not run as designed: replica r2 failed"}, broken.Verdict(),
		"a cell that ran but flaked does not pass on its report's verdict")

	require.NoError(t, chaos.Verdict([]chaos.CellResult{pass, pass}).Err())
	require.EqualError(t, chaos.Verdict([]chaos.CellResult{pass, fail, broken}).Err(),
		"2 of 3 cells did not match their expectation: advisory/transaction/none, advisory/transaction/KILL_LEADER")
}

// A matrix counts its inconclusive cells, and marks each in the table.
func TestSummaryCountsInconclusiveCells(t *testing.T) {
	t.Parallel()
	sc := scenario("fenced", "KILL_LEADER", scenarios.ExpectSafe)
	v := scenarios.Verdict{Expect: scenarios.ExpectSafe, Inconclusive: true, Reason: "contention: only 1 replica ran"}
	out := chaos.Summary([]chaos.CellResult{{Scenario: sc, Report: &scenarios.Report{Scenario: sc, Verdict: v}}}, time.Minute)
	require.Contains(t, out, "1 cells, 0 matched their expectation, 1 did not (1 of them INCONCLUSIVE: their runs could not have failed); wall time 1m0s.")
	require.Contains(t, out, "| safe | **INCONCLUSIVE** |")
	require.Contains(t, out, "contention: only 1 replica ran")
}
