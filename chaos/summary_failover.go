package chaos

import (
	"fmt"
	"strings"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
)

// faultLabel is a cell's fault as the summary names it: with the mode of
// the standby a failover fault ran on, such as "PRIMARY_FAILOVER (sync
// standby)".
func faultLabel(sc scenarios.Scenario) string {
	if sc.Standby == "" {
		return sc.Fault
	}
	return fmt.Sprintf("%s (%s standby)", sc.Fault, sc.Standby)
}

// failoverSummary is the table of what the cells on a standby lost, in
// cells' order: token regressions, acknowledged writes lost of those
// acknowledged, porcupine's verdict on the fence, and the failover's
// steps on the oracle's clock; empty when no cell ran on one.
func failoverSummary(cells []CellResult) string {
	var b strings.Builder
	for _, c := range cells {
		sc := c.Scenario
		if sc.Standby == "" || c.Report == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n## Failover cells\n\n")
			b.WriteString("| strategy | fault | topology | token regressions | lost acknowledged writes | linearizable | steps |\n")
			b.WriteString("|---|---|---|---|---|---|---|\n")
		}
		m := c.Report.Metrics
		regressions, lost := "-", "-"
		if l := m.Loss; l != nil {
			acked := 0
			for _, a := range c.Report.History.Acks {
				if a.Kind == oracle.AckWrite {
					acked++
				}
			}
			regressions = fmt.Sprint(len(l.TokenRegressions))
			lost = fmt.Sprintf("%d/%d", len(l.LostWrites), acked)
		}
		lin := "-"
		if m.Linearizability != nil {
			lin = m.Linearizability.Linearizable
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", sc.Strategy, faultLabel(sc), sc.Topology, regressions, lost, lin,
			strings.Join(report.FailoverSteps(c.Report.History), "; "))
	}
	return b.String()
}
