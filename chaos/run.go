package chaos

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
)

// Result is one cell's outcome.
type Result struct {
	Scenario scenarios.Scenario
	// Report is nil when the run could not be carried out; Err says why.
	Report *scenarios.Report
	Err    error
	// Wall is how long the cell took, set-up included.
	Wall time.Duration
	// Notes are what the check after the cell found and repaired: a
	// server of the stack that no longer answered (PgBouncer 1.18 can
	// crash on a cancel request; see "Findings").
	Notes []string
}

// Pass reports whether the cell ran and its verdict matched its
// expectation.
func (r Result) Pass() bool { return r.Err == nil && r.Report != nil && r.Report.Verdict.Pass }

// Line is the progress line of a cell, with its notes under it.
func (r Result) Line() string {
	var line string
	if r.Report == nil {
		line = fmt.Sprintf("ERROR %-40s %s", r.Scenario.Name, firstLine(r.Err))
	} else {
		line = fmt.Sprintf("%s  (%s)", r.Report.Summary(), r.Wall.Round(100*time.Millisecond))
		if r.Err != nil {
			line += "\n    error: " + firstLine(r.Err)
		}
	}
	for _, n := range r.Notes {
		line += "\n    note: " + n
	}
	return line
}

// RunMatrix runs cells one after another on opts.Stack (faults such as
// POSTGRES_RESTART touch the whole stack, so cells never overlap), writing
// each report under opts.OutDir/<cell name>. progress, if set, sees each
// result as it comes. A cell that cannot be run is recorded and the next
// one runs; only the end of ctx stops the matrix early. After each cell
// every server of the stack must answer; one that does not is started
// again, and the cell's Notes say so, so that one crash cannot fail every
// cell after it.
func RunMatrix(ctx context.Context, cells []scenarios.Scenario, opts scenarios.RunOptions, progress func(done, total int, r Result)) []Result {
	results := make([]Result, 0, len(cells))
	for i, sc := range cells {
		if ctx.Err() != nil {
			break
		}
		r := runCell(ctx, sc, opts)
		if why := flaked(r); why != "" && ctx.Err() == nil {
			// A cell that could not run, or ran with a replica fewer
			// because one failed on its own, measured nothing it was meant
			// to. Once is a flake (see "Findings"), twice an error.
			notes := append([]string{"ran again after: " + why}, r.Notes...)
			r = runCell(ctx, sc, opts)
			r.Notes = append(notes, r.Notes...)
			if why := flaked(r); why != "" && r.Err == nil {
				r.Err = fmt.Errorf("cell %s: %s", sc.Name, why)
			}
		}
		results = append(results, r)
		if progress != nil {
			progress(i+1, len(cells), r)
		}
	}
	return results
}

func runCell(ctx context.Context, sc scenarios.Scenario, opts scenarios.RunOptions) Result {
	begin := time.Now()
	rep, err := scenarios.Run(ctx, sc, opts)
	r := Result{Scenario: sc.WithDefaults(), Report: rep, Err: err, Wall: time.Since(begin)}
	if err == nil && rep == nil {
		r.Err = fmt.Errorf("scenario %s produced no report", sc.Name)
	}
	if ctx.Err() == nil {
		r.Notes = opts.Stack.Repair(ctx)
	}
	return r
}

// flaked says why r did not measure what it was meant to: the run failed,
// or a replica exited with an error of its own (a replica killed by the
// fault ends with "signal: killed", one stopped gracefully with "exit 0").
func flaked(r Result) string {
	if r.Err != nil {
		return firstLine(r.Err)
	}
	var out []string
	for _, rp := range r.Report.Replicas {
		if strings.HasPrefix(rp.Exit, "exit status") {
			out = append(out, fmt.Sprintf("replica %s failed (%s; log %s)", rp.ID, rp.Exit, rp.Log))
		}
	}
	return strings.Join(out, "; ")
}

// Failed returns the results whose verdict did not match, or that could
// not run.
func Failed(results []Result) []Result {
	var out []Result
	for _, r := range results {
		if !r.Pass() {
			out = append(out, r)
		}
	}
	return out
}

// Summary renders the results as one Markdown table by strategy × fault
// (and topology): the double-run window with its episodes, the leaderless
// window, stale writes accepted / rejected, the expectation and the
// verdict; the cells that failed follow with their reasons.
func Summary(results []Result, wall time.Duration) string {
	sorted := slices.Clone(results)
	order := columns()
	slices.SortStableFunc(sorted, func(a, b Result) int {
		return cmp.Or(
			cmp.Compare(slices.Index(Strategies, a.Scenario.Strategy), slices.Index(Strategies, b.Scenario.Strategy)),
			cmp.Compare(slices.Index(order, a.Scenario.Fault), slices.Index(order, b.Scenario.Fault)),
			cmp.Compare(slices.Index(scenarios.Topologies, a.Scenario.Topology.Kind), slices.Index(scenarios.Topologies, b.Scenario.Topology.Kind)),
		)
	})
	var b strings.Builder
	failed := Failed(results)
	fmt.Fprintf(&b, "# Chaos matrix\n\n%d cells, %d matched their expectation, %d did not; wall time %s.\n\n",
		len(results), len(results)-len(failed), len(failed), wall.Round(time.Second))
	b.WriteString("| strategy | fault | topology | double-run (episodes) | leaderless | stale writes accepted / rejected | expect | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range sorted {
		sc := r.Scenario
		if r.Report == nil {
			fmt.Fprintf(&b, "| %s | %s | %s | - | - | - | %s | **ERROR** |\n", sc.Strategy, sc.Fault, sc.Topology, sc.Expect)
			continue
		}
		m := r.Report.Metrics
		verdict := "PASS"
		switch {
		case r.Err != nil:
			verdict = "**ERROR**"
		case !r.Report.Verdict.Pass:
			verdict = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s (%d) | %s | %d / %d | %s | %s |\n",
			sc.Strategy, sc.Fault, sc.Topology, m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total,
			m.StaleWrites.Accepted, m.StaleWrites.Rejected, sc.Expect, verdict)
	}
	if len(failed) > 0 {
		b.WriteString("\n## Cells that did not match their expectation\n\n")
		for _, r := range failed {
			if r.Err != nil {
				fmt.Fprintf(&b, "- `%s`: could not run as designed: %s\n", r.Scenario.Name, firstLine(r.Err))
				continue
			}
			fmt.Fprintf(&b, "- `%s`: %s\n", r.Scenario.Name, r.Report.Verdict.Reason)
		}
	}
	var notes []string
	for _, r := range results {
		for _, n := range r.Notes {
			notes = append(notes, fmt.Sprintf("- after `%s`: %s\n", r.Scenario.Name, n))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Stack repairs between cells\n\n")
		b.WriteString(strings.Join(notes, ""))
	}
	return b.String()
}

// WriteSummary writes Summary to dir/summary.md. Each cell's own
// report.json, report.md and timeline.svg are already under dir/<cell>.
func WriteSummary(dir string, results []Result, wall time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(Summary(results, wall)), 0o644)
}

func firstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
