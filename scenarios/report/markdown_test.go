package report_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
)

// report.md gives the failover latency to a tenth of a millisecond and
// says where it is measured from.
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
