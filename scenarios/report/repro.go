package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/doublerun/doublerun/scenarios"
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
