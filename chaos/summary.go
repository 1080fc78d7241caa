package chaos

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// CellResult is what one cell of a matrix gave, as its summary shows it: the
// scenario, its report, or the error that kept it from running as
// designed, and what the check of the stack after it found.
type CellResult struct {
	Scenario scenarios.Scenario
	// Report is nil when the run could not be carried out; Err says why.
	Report *scenarios.Report
	Err    error
	// Wall is how long the cell took, set-up included.
	Wall time.Duration
	// Notes are what the check after the cell found and repaired: a
	// server of the stack that no longer answered (PgBouncer 1.18 can
	// crash on a cancel request; chaos/FINDINGS.md, finding 6).
	Notes []string
	// Versions is the version set the cell ran on, as the stack's servers
	// make it up (stack.Versions.Set); the report has the exact versions.
	// It groups a matrix run on several sets (SummarySets).
	Versions string
}

// Verdict is the cell's report's verdict, and a failed one when the cell
// could not run as designed.
func (c CellResult) Verdict() scenarios.Verdict {
	if c.Err != nil || c.Report == nil {
		return scenarios.Verdict{Expect: c.Scenario.Expect, Reason: "could not run as designed: " + report.FirstLine(c.Err)}
	}
	return c.Report.Verdict
}

// Line is the progress line of a cell, with its notes under it.
func (c CellResult) Line() string {
	var line string
	if c.Report == nil {
		line = fmt.Sprintf("ERROR %-40s %s", c.Scenario.Name, report.FirstLine(c.Err))
	} else {
		line = fmt.Sprintf("%s  (%s)", report.Line(c.Report), c.Wall.Round(100*time.Millisecond))
		if c.Err != nil {
			line += "\n    error: " + report.FirstLine(c.Err)
		}
	}
	for _, n := range c.Notes {
		line += "\n    note: " + n
	}
	return line
}

// Failed returns the cells whose verdict failed.
func Failed(cells []CellResult) []CellResult {
	var out []CellResult
	for _, c := range cells {
		if !c.Verdict().Pass {
			out = append(out, c)
		}
	}
	return out
}

// Verdict judges a matrix: it passes when every cell did, and its reason
// names the cells that did not.
func Verdict(cells []CellResult) scenarios.Verdict {
	failed := Failed(cells)
	if len(failed) == 0 {
		return scenarios.Verdict{Pass: true, Reason: fmt.Sprintf("all %d cells matched their expectation", len(cells))}
	}
	names := make([]string, len(failed))
	for i, c := range failed {
		names[i] = c.Scenario.Name
	}
	return scenarios.Verdict{Reason: fmt.Sprintf("%d of %d cells did not match their expectation: %s", len(failed), len(cells), strings.Join(names, ", "))}
}

// Summary renders cells as one Markdown table by strategy × fault (and
// topology): the double-run window with its episodes, the leaderless
// window, stale writes accepted / rejected, the expectation and the
// verdict; the cells that failed follow with their reasons, and then what
// the checks of the stack repaired. Rows are sorted by strategy name,
// fault in catalog order and topology in scenarios.Topologies order.
func Summary(cells []CellResult, wall time.Duration) string {
	sorted := slices.Clone(cells)
	strategies := strategy.Names()
	faults := append([]string{fault.None}, fault.Names()...)
	slices.SortStableFunc(sorted, func(a, b CellResult) int {
		return cmp.Or(
			cmp.Compare(slices.Index(strategies, a.Scenario.Strategy), slices.Index(strategies, b.Scenario.Strategy)),
			cmp.Compare(slices.Index(faults, a.Scenario.Fault), slices.Index(faults, b.Scenario.Fault)),
			cmp.Compare(slices.Index(scenarios.Topologies, a.Scenario.Topology.Kind), slices.Index(scenarios.Topologies, b.Scenario.Topology.Kind)),
		)
	})
	var b strings.Builder
	failed := Failed(cells)
	inconclusive := 0
	for _, c := range cells {
		if c.Verdict().Inconclusive {
			inconclusive++
		}
	}
	counts := fmt.Sprintf("%d cells, %d matched their expectation, %d did not", len(cells), len(cells)-len(failed), len(failed))
	if inconclusive > 0 {
		counts += fmt.Sprintf(" (%d of them INCONCLUSIVE: their runs could not have failed)", inconclusive)
	}
	fmt.Fprintf(&b, "# Chaos matrix\n\n%s; wall time %s.\n\n", counts, wall.Round(time.Second))
	b.WriteString(versionsLine(cells))
	b.WriteString("| strategy | fault | topology | double-run (episodes) | leaderless | orphaned lock (episodes) | stale writes accepted / rejected | expect | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range sorted {
		sc := c.Scenario
		if c.Report == nil {
			fmt.Fprintf(&b, "| %s | %s | %s | - | - | - | - | %s | **ERROR** |\n", sc.Strategy, faultLabel(sc), sc.Topology, sc.Expect)
			continue
		}
		m := c.Report.Metrics
		verdict := "PASS"
		switch {
		case c.Err != nil:
			verdict = "**ERROR**"
		case c.Report.Verdict.Inconclusive:
			verdict = "**INCONCLUSIVE**"
		case !c.Report.Verdict.Pass:
			verdict = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s (%d) | %s | %s (%d) | %d / %d | %s | %s |\n",
			sc.Strategy, faultLabel(sc), sc.Topology, m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total,
			m.Orphaned.Total, m.Orphaned.Episodes, m.StaleWrites.Accepted, m.StaleWrites.Rejected, sc.Expect, verdict)
	}
	b.WriteString(failoverSummary(sorted))
	if len(failed) > 0 {
		b.WriteString("\n## Cells that did not match their expectation\n\n")
		for _, c := range failed {
			fmt.Fprintf(&b, "- `%s`: %s\n", c.Scenario.Name, c.Verdict().Reason)
		}
	}
	var notes []string
	for _, c := range cells {
		for _, n := range c.Notes {
			notes = append(notes, fmt.Sprintf("- after `%s`: %s\n", c.Scenario.Name, n))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Stack repairs between cells\n\n")
		b.WriteString(strings.Join(notes, ""))
	}
	return b.String()
}

// WriteSummary writes Summary to dir/summary.md. Each cell's own
// report.json, report.md and timeline.svg are under dir/<cell name>
// (Write).
func WriteSummary(dir string, cells []CellResult, wall time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(Summary(cells, wall)), 0o644)
}
