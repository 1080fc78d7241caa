package report_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
)

// report.md gives the failover latency to a tenth of a millisecond and
// says where it is measured from.
// scenario is a chaos cell's scenario, as the matrix names them.
func scenario(strategy, fault string, expect scenarios.Expectation) scenarios.Scenario {
	return scenarios.Scenario{Name: strategy + "/transaction/" + fault, Strategy: strategy, Fault: fault, Expect: expect,
		Topology: scenarios.Topology{Kind: scenarios.Transaction, PoolSize: 1}}
}

func TestMarkdownSaysWhereFailoverIsMeasuredFrom(t *testing.T) {
	t.Parallel()
	d := oracle.Duration(3*time.Millisecond + 240*time.Microsecond)
	for _, tc := range []struct{ from, want string }{
		{oracle.FailoverFromInjection, "| failover latency | 3.2ms from the fault's injection |"},
		{oracle.FailoverFromFault, "| failover latency | 3.2ms from the fault event (before the fault waited for its moment) |"},
	} {
		r := &scenarios.Report{Scenario: scenario("advisory-wait", "KILL_LEADER", scenarios.ExpectSafe),
			Metrics: oracle.Metrics{FailoverLatency: &d, FailoverFrom: tc.from}}
		require.Contains(t, report.Markdown(r), tc.want)
	}
	r := &scenarios.Report{Scenario: scenario("advisory", "none", scenarios.ExpectSafe)}
	require.Contains(t, report.Markdown(r), "| failover latency | - |")
}

// report.md names the linearizability check and links its view beside
// the timeline, or says why the run was not checked; Write puts the view
// beside timeline.svg only when there is one.
func TestMarkdownNamesTheFenceCheck(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	h := oracle.History{
		TokenOps: []oracle.TokenOp{{Kind: oracle.TokenGrant, Replica: "r1", Token: 1, Call: ms(0), Return: ms(1)}},
		Writes:   []oracle.Write{{Replica: "r1", Token: 1, Call: ms(2), At: ms(3), Accepted: true, Fenced: true}},
	}
	r := &scenarios.Report{Scenario: scenario("fenced", "none", scenarios.ExpectSafe), History: h,
		Metrics: oracle.Metrics{Linearizability: &oracle.Linearizability{Linearizable: oracle.LinearizableYes, Operations: 2, CheckedIn: oracle.Duration(1500 * time.Microsecond)}}}
	md := report.Markdown(r)
	require.Contains(t, md, "| **fence** | linearizable: yes, 2 operations, checked in 1.5ms ([view](linearizability.html)) |")
	require.Contains(t, md, "Views: [timeline.svg](timeline.svg), [linearizability.html](linearizability.html)")
	out := t.TempDir()
	require.NoError(t, report.Write(out, r))
	view, err := os.ReadFile(filepath.Join(out, r.Scenario.Name, report.LinearizabilityView))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(view), "write(1) accepted"), "the view draws the write")

	r.Metrics.Linearizability = nil
	require.Contains(t, report.Markdown(r), "| **fence** | not checked for linearizability: the strategy's token table is unknown")
	require.NotContains(t, report.Markdown(r), "linearizability.html")
	r.History.Writes[0].Fenced = false
	require.Contains(t, report.Markdown(r), "| **fence** | not checked for linearizability: no fenced side-effect write |")
	out = t.TempDir()
	require.NoError(t, report.Write(out, r))
	_, err = os.Stat(filepath.Join(out, r.Scenario.Name, report.LinearizabilityView))
	require.ErrorIs(t, err, os.ErrNotExist)
}
