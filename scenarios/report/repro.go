package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// Repro556 writes what `doublerun repro 556` found as a short text
// report: the shared backend and the double-run window, the PID guard's
// effect per pool size, and the fixes.
func Repro556(w io.Writer, r *scenarios.Repro556Result) {
	rep := r.Reproduction
	pid, who := rep.SharedBackend()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "== #556: advisory lease through transaction pooling, pool of one")
	fmt.Fprintf(w, "backend PIDs per replica: %v\n", rep.BackendPIDs())
	if pid != 0 {
		fmt.Fprintf(w, "replicas %s were leader on the same backend PID %d\n", strings.Join(who, " and "), pid)
	}
	fmt.Fprintf(w, "double-run window: %s in %d episodes (longest %s), most leaders at once: %d\n",
		rep.Metrics.DoubleRun.Total, rep.Metrics.DoubleRun.Episodes, rep.Metrics.DoubleRun.Longest, rep.Metrics.MaxConcurrentLeaders)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "== the PID guard's effect (double-run window over the same duration)")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL SIZE\tUNGUARDED\tGUARDED\tGUARDED EPISODES")
	for _, g := range r.Guard {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\n", g.PoolSize, g.Unguarded.Metrics.DoubleRun.Total, g.Guarded.Metrics.DoubleRun.Total, g.Guarded.Metrics.DoubleRun.Episodes)
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "== the fixes")
	fmt.Fprintf(w, "pinned lease endpoint: double-run %s; %s\n", r.Pinned.Metrics.DoubleRun.Total, r.Pinned.Verdict.Reason)
	fmt.Fprintf(w, "fenced lease: accepted stale writes %d, rejected %d; %s\n", r.Fenced.Metrics.StaleWrites.Accepted, r.Fenced.Metrics.StaleWrites.Rejected, r.Fenced.Verdict.Reason)
	fmt.Fprintf(w, "one bouncer, session-mode lease name: double-run %s; %s\n", r.Alias.Metrics.DoubleRun.Total, r.Alias.Verdict.Reason)
	fmt.Fprintln(w)
}

// ReproFailover writes what `doublerun repro failover` found: for the
// plain fence and the epoch fence across the same lossy promotion, the
// failover's steps on the oracle's clock and what it cost.
func ReproFailover(w io.Writer, r *scenarios.ReproFailoverResult) {
	for _, c := range []struct {
		title string
		rep   *scenarios.Report
	}{
		{"the fenced lease (plain tokens)", r.Plain},
		{"the epoch fence (tokens carry the server's timeline)", r.Epoch},
	} {
		m := c.rep.Metrics
		fmt.Fprintln(w)
		fmt.Fprintf(w, "== %s across a lossy promotion\n", c.title)
		for _, s := range FailoverSteps(c.rep.History) {
			fmt.Fprintf(w, "  %s\n", s)
		}
		lin := "not checked"
		if m.Linearizability != nil {
			lin = m.Linearizability.String()
		}
		fmt.Fprintf(w, "double-run %s in %d episodes; stale writes accepted %d, rejected %d; %s\n",
			m.DoubleRun.Total, m.DoubleRun.Episodes, m.StaleWrites.Accepted, m.StaleWrites.Rejected, lin)
		if l := m.Loss; l != nil {
			acked := 0
			for _, a := range c.rep.History.Acks {
				if a.Kind == oracle.AckWrite {
					acked++
				}
			}
			fmt.Fprintf(w, "lost acknowledged writes: %d of %d; token regressions: %d\n", len(l.LostWrites), acked, len(l.TokenRegressions))
			for _, g := range l.TokenRegressions {
				fmt.Fprintf(w, "  token %d of %s (%s): acknowledged to %s as token %d before\n", g.Grant.Token, g.Grant.Replica, g.Why, g.Earlier.Replica, g.Earlier.Token)
			}
		}
		fmt.Fprintf(w, "verdict: %s: %s\n", c.rep.Verdict.Status(), c.rep.Verdict.Reason)
	}
	fmt.Fprintln(w)
}

// FailoverSteps are the steps of h's failover as its fault logged them
// (the instant the primary was taken down, then each chaos event after
// it), each with its offset from that instant on the oracle's clock.
func FailoverSteps(h oracle.History) []string {
	var from time.Time
	var out []string
	for _, e := range h.Events {
		switch {
		case e.Kind == oracle.EventInjected && from.IsZero():
			from = e.At
			out = append(out, fmt.Sprintf("+0ms       %s", e.Detail))
		case e.Kind == oracle.EventChaos && !from.IsZero():
			out = append(out, fmt.Sprintf("%-10s %s", fmt.Sprintf("+%dms", e.At.Sub(from).Milliseconds()), e.Detail))
		}
	}
	return out
}
