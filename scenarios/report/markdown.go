package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/replica"
)

// Markdown renders a run's report as report.md: what ran, where, and a
// table of what it measured, ending with the verdict.
func Markdown(r *scenarios.Report) string {
	var b strings.Builder
	m := r.Metrics
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", r.Scenario.Name, r.Scenario.Description)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	row("strategy", r.Scenario.Strategy)
	row("topology", r.Scenario.Topology.String())
	row("replicas", fmt.Sprint(r.Scenario.Replicas))
	row("measured for", r.Scenario.Duration.String())
	row("poll interval / work / TTL", fmt.Sprintf("%s / %s / %s", r.Scenario.PollInterval, r.Scenario.Work, r.Scenario.TTL))
	row("fault", r.Scenario.Fault)
	if c := r.Scenario.Replica; c != nil && r.Protocol != nil {
		row("replicas run as", fmt.Sprintf("`%s`, reporting by %s", strings.Join(c.Command, " "), r.Protocol.Mode))
		row("timestamps", r.Protocol.Note)
		if r.Protocol.Mode == replica.ModeLog {
			row("log lines matched", fmt.Sprintf("%d of %d", r.Protocol.Matched, r.Protocol.Lines))
			row("receipt lag (line read → recorded)", fmt.Sprintf("median %s, max %s",
				time.Duration(r.Protocol.ReceiptLagMedian).Round(time.Microsecond), time.Duration(r.Protocol.ReceiptLagMax).Round(time.Microsecond)))
		}
	}
	row("provider", r.Stack.Provider)
	row("versions", r.Stack.Versions.String())
	row("lease endpoint", r.Stack.Lease)
	row("lease endpoint check", r.Stack.LeaseEndpoint)
	row("work endpoint", r.Stack.Work)
	row("**double-run window**", fmt.Sprintf("%s in %d episodes (longest %s)", m.DoubleRun.Total, m.DoubleRun.Episodes, m.DoubleRun.Longest))
	row("**leaderless window**", fmt.Sprintf("%s in %d episodes (longest %s; gaps ≤ %s ignored)", m.Leaderless.Total, m.Leaderless.Episodes, m.Leaderless.Longest, r.GapTolerance))
	row("**orphaned-lock window**", orphanedText(m.Orphaned)+fmt.Sprintf(" (stretches ≤ %s ignored)", r.OrphanTolerance))
	fo := "-"
	if m.FailoverLatency != nil {
		fo = failoverText(*m.FailoverLatency, m.FailoverFrom)
	}
	row("failover latency", fo)
	row("most leaders at once", fmt.Sprint(m.MaxConcurrentLeaders))
	row("terms granted / leadership changes", fmt.Sprintf("%d / %d", m.Terms, m.LeadershipChanges))
	row("side-effect writes accepted", fmt.Sprint(m.Writes))
	row("stale writes accepted / rejected", fmt.Sprintf("%d / %d", m.StaleWrites.Accepted, m.StaleWrites.Rejected))
	row("**fence**", fenceText(r))
	lossRows(r.History, m.Loss, row)
	if pids := r.BackendPIDs(); len(pids) > 0 {
		var parts []string
		for _, id := range slices.Sorted(maps.Keys(pids)) {
			parts = append(parts, fmt.Sprintf("%s: %v", id, pids[id]))
		}
		row("lease backend PIDs", strings.Join(parts, "; "))
	}
	for _, o := range m.Orphaned.Orphans {
		row("orphaned lock", orphanLine(r, o))
	}
	if len(m.Orphaned.LeftHeld) > 0 {
		row("lock left held after every replica stopped", fmt.Sprintf("backends %v: no replica claims them; the lock stays until those server connections close", m.Orphaned.LeftHeld))
	}
	row("validity", validityText(m.Validity))
	verdict := r.Verdict.Status()
	row("**verdict**", fmt.Sprintf("%s (expected %s): %s", verdict, r.Verdict.Expect, r.Verdict.Reason))
	fmt.Fprintf(&b, "\nViews: [timeline.svg](timeline.svg)")
	if m.Linearizability != nil {
		fmt.Fprintf(&b, ", [%[1]s](%[1]s) (porcupine's view of the fence's grants, renewals and writes)", LinearizabilityView)
	}
	fmt.Fprintf(&b, ". `doublerun check report.json` recomputes every figure from the history.\n")
	return b.String()
}

// fenceText is the linearizability check's verdict, or why there was none.
func fenceText(r *scenarios.Report) string {
	if l := r.Metrics.Linearizability; l != nil {
		return fmt.Sprintf("%s ([view](%s))", l, LinearizabilityView)
	}
	if !slices.ContainsFunc(r.History.Writes, func(w oracle.Write) bool { return w.Fenced }) {
		return "not checked for linearizability: no fenced side-effect write"
	}
	return "not checked for linearizability: the strategy's token table is unknown (strategy.Strategy.TokenTable)"
}

// failoverText is a failover latency with where it is measured from, to
// a tenth of a millisecond: a waiting lease fails over in a few.
func failoverText(d oracle.Duration, from string) string {
	v := time.Duration(d).Round(100 * time.Microsecond).String()
	switch from {
	case oracle.FailoverFromInjection:
		return v + " from the fault's injection"
	case oracle.FailoverFromFault:
		return v + " from the fault event (before the fault waited for its moment)"
	}
	return v
}

// orphanedText is the orphaned-lock window in one phrase.
func orphanedText(o oracle.Orphaned) string {
	if o.Episodes == 0 {
		return "0s"
	}
	s := fmt.Sprintf("%s in %d episodes (longest %s)", o.Total, o.Episodes, o.Longest)
	if o.Reentries > 0 {
		s += fmt.Sprintf("; %d re-entrant acquisitions", o.Reentries)
	}
	return s
}

// orphanLine says what happened to one orphaned stretch: its backend, how
// long from when, who let go and how, whether a client was linked, and
// who re-entered it.
func orphanLine(r *scenarios.Report, o oracle.Orphan) string {
	from := o.Start.Sub(r.History.Start).Round(time.Millisecond)
	s := fmt.Sprintf("backend %d, %s from +%s, after %s %s", o.BackendPID, o.End.Sub(o.Start).Round(time.Millisecond), from, o.After, o.Cause)
	switch {
	case o.ClientLinkedFor == nil:
		s += "; no bouncer to ask about a client"
	case *o.ClientLinkedFor == 0:
		s += "; no client linked to it"
	default:
		s += fmt.Sprintf("; a client linked to it for %s of it", o.ClientLinkedFor)
	}
	if o.ReenteredBy != "" {
		s += "; re-entered by " + o.ReenteredBy + " (re-entrant: a second leader on a lock it never took)"
	}
	return s
}

// validityText is the validity row: VALID or INVALID, then each
// condition's figure, the failed ones with their reason.
func validityText(v oracle.Validity) string {
	word := "valid"
	if !v.Valid {
		word = "**invalid**"
	}
	parts := make([]string, 0, len(v.Conditions))
	for _, c := range v.Conditions {
		if c.Holds {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Name, c.Figure))
		} else {
			parts = append(parts, fmt.Sprintf("%s **failed**: %s", c.Name, c.Reason))
		}
	}
	return word + " (" + strings.Join(parts, "; ") + ")"
}
