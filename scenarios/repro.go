package scenarios

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Repro556Result is what `doublerun repro 556` found.
type Repro556Result struct {
	// Reproduction is the advisory lease through a transaction pool of one.
	Reproduction *Report
	// Guard pairs the unguarded and guarded advisory lease per pool size.
	Guard []GuardRow
	// Pinned and Fenced are the two fixes.
	Pinned, Fenced *Report
}

// GuardRow is one pool size of the guard comparison.
type GuardRow struct {
	PoolSize           int
	Unguarded, Guarded *Report
}

// Repro556 runs the reproduction, the guard comparison and the fixes,
// calling progress with one line per scenario.
func Repro556(ctx context.Context, opts RunOptions, progress func(string)) (*Repro556Result, error) {
	if progress == nil {
		progress = func(string) {}
	}
	run := func(sc Scenario) (*Report, error) {
		rep, err := Run(ctx, sc, opts)
		if err != nil {
			return nil, err
		}
		progress(rep.Summary())
		return rep, nil
	}
	var res Repro556Result
	var err error
	if res.Reproduction, err = run(Issue556); err != nil {
		return nil, err
	}
	guard := GuardScenarios()
	for i := 0; i < len(guard); i += 2 {
		row := GuardRow{PoolSize: guard[i].Topology.PoolSize}
		if row.Unguarded, err = run(guard[i]); err != nil {
			return nil, err
		}
		if row.Guarded, err = run(guard[i+1]); err != nil {
			return nil, err
		}
		res.Guard = append(res.Guard, row)
	}
	if res.Pinned, err = run(Issue556Pinned); err != nil {
		return nil, err
	}
	if res.Fenced, err = run(Issue556Fenced); err != nil {
		return nil, err
	}
	return &res, nil
}

// SharedBackend returns a backend PID on which two or more replicas held
// the lease at the same time, if any.
func (r *Report) SharedBackend() (pid int32, replicas []string) {
	by := map[int32]map[string]bool{}
	for _, iv := range r.History.Intervals {
		if iv.BackendPID == 0 {
			continue
		}
		if by[iv.BackendPID] == nil {
			by[iv.BackendPID] = map[string]bool{}
		}
		by[iv.BackendPID][iv.Replica] = true
	}
	for p, who := range by {
		if len(who) >= 2 {
			return p, slices.Sorted(maps.Keys(who))
		}
	}
	return 0, nil
}

// Reproduced reports whether two leaders ran at once on one backend.
func (r *Repro556Result) Reproduced() bool {
	pid, _ := r.Reproduction.SharedBackend()
	return r.Reproduction.Verdict.Pass && r.Reproduction.Metrics.DoubleRun.Total > 0 && pid != 0
}

// FixesHeld reports whether both fixes met their expectations.
func (r *Repro556Result) FixesHeld() bool {
	return r.Pinned.Verdict.Pass && r.Pinned.Metrics.DoubleRun.Total == 0 &&
		r.Fenced.Verdict.Pass && r.Fenced.Metrics.StaleWrites.Accepted == 0
}

// Success is the reproduction and both fixes.
func (r *Repro556Result) Success() bool { return r.Reproduced() && r.FixesHeld() }

// Why explains a failure in one line.
func (r *Repro556Result) Why() string {
	var why []string
	if !r.Reproduced() {
		if pid, _ := r.Reproduction.SharedBackend(); pid == 0 && r.Reproduction.Verdict.Pass {
			why = append(why, "two leaders ran at once, but no two replicas reported the same lease backend PID")
		} else {
			why = append(why, "the double-run did not reproduce: "+r.Reproduction.Verdict.Reason)
		}
	}
	if !r.Pinned.Verdict.Pass {
		why = append(why, "pinned fix: "+r.Pinned.Verdict.Reason)
	}
	if !r.Fenced.Verdict.Pass {
		why = append(why, "fenced fix: "+r.Fenced.Verdict.Reason)
	}
	return strings.Join(why, "; ")
}

// Print writes the findings as a short text report.
func (r *Repro556Result) Print(w io.Writer) {
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
	fmt.Fprintln(w)
}
