package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
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
// steps in ms after the primary was taken down, on the oracle's clock; empty when no cell ran on one.
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
			stepTimes(c.Report.History))
	}
	return b.String()
}

// stepTimes are the failover's steps (scenarios/fault/failover.go) in ms
// after the primary was taken down, such as "down 65 / promoted 224 /
// repointed 230 / first statement 254"; "-" for a step that never showed.
func stepTimes(h oracle.History) string {
	var from time.Time
	for _, e := range h.Events {
		if e.Kind == oracle.EventInjected {
			from = e.At
			break
		}
	}
	var out []string
	for _, step := range []struct{ name, has string }{
		{"down", " down, "}, {"promoted", " promoted, timeline "}, {"repointed", "address leads to "}, {"first statement", "first statement on the new primary"},
	} {
		at := "-"
		for _, e := range h.Events {
			if !from.IsZero() && e.Kind == oracle.EventChaos && !e.At.Before(from) && strings.Contains(e.Detail, step.has) {
				at = fmt.Sprint(e.At.Sub(from).Milliseconds())
				break
			}
		}
		out = append(out, step.name+" "+at)
	}
	return strings.Join(out, " / ")
}
