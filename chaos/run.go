package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/report"
)

// RunMatrix runs cells one after another on opts.Stack (faults such as
// POSTGRES_RESTART touch the whole stack, so cells never overlap), writing
// each report under opts.OutDir/<cell name> when OutDir is set. progress,
// if set, sees each cell as it comes. A cell that cannot be run is
// recorded and the next one runs; only the end of ctx stops the matrix
// early. After each cell every server of the stack must answer; one that
// does not is started again (stack.Repair), and the cell's Notes say so,
// so that one crash cannot fail every cell after it. Summary renders the
// cells' results, Verdict judges them.
func RunMatrix(ctx context.Context, cells []scenarios.Scenario, opts scenarios.RunOptions, progress func(done, total int, c CellResult)) []CellResult {
	results := make([]CellResult, 0, len(cells))
	for i, sc := range cells {
		if ctx.Err() != nil {
			break
		}
		c := runCell(ctx, sc, opts)
		if why := missed(c); why != "" && ctx.Err() == nil {
			// A limitation that shows only when the fault lands in time
			// may miss its moment on a loaded machine; it must show in one
			// of two runs, and the cell's notes say it took two.
			c = runAgain(ctx, sc, opts, c, why)
		}
		if why := inconclusive(c); why != "" && ctx.Err() == nil {
			// A run that could not have shown a double-run (a replica
			// that died on its own, a fault that missed its moment) is
			// run once more; still inconclusive, it fails the matrix.
			c = runAgain(ctx, sc, opts, c, why)
		}
		if why := flaked(c); why != "" && ctx.Err() == nil {
			// A cell that could not run, or ran with a replica fewer
			// because one failed on its own, measured nothing it was meant
			// to. Once is a flake (FINDINGS.md, findings 6 and 7), twice an error.
			c = runAgain(ctx, sc, opts, c, why)
			if why := flaked(c); why != "" && c.Err == nil {
				c.Err = fmt.Errorf("cell %s: %s", sc.Name, why)
			}
		}
		results = append(results, c)
		if progress != nil {
			progress(i+1, len(cells), c)
		}
	}
	return results
}

// runAgain runs sc once more after its run c failed for why, keeping c's
// notes and saying why in front of them.
func runAgain(ctx context.Context, sc scenarios.Scenario, opts scenarios.RunOptions, c CellResult, why string) CellResult {
	notes := append([]string{"ran again after: " + why}, c.Notes...)
	again := runCell(ctx, sc, opts)
	again.Notes = append(notes, again.Notes...)
	return again
}

func runCell(ctx context.Context, sc scenarios.Scenario, opts scenarios.RunOptions) CellResult {
	begin := time.Now()
	rep, err := scenarios.Run(ctx, sc, opts)
	c := CellResult{Scenario: sc, Report: rep, Err: err, Wall: time.Since(begin)}
	if rep != nil {
		c.Scenario = rep.Scenario // as it ran, defaults applied
	}
	if err == nil && rep == nil {
		c.Err = fmt.Errorf("scenario %s produced no report", sc.Name)
	}
	if rep != nil && opts.OutDir != "" {
		if err := report.Write(opts.OutDir, rep); err != nil && c.Err == nil {
			c.Err = err
		}
	}
	if ctx.Err() == nil {
		c.Notes = opts.Stack.Repair(ctx)
	}
	return c
}

// flaked says why c did not measure what it was meant to: the run failed,
// or a replica exited with an error of its own (a replica killed by the
// fault ends with "signal: killed", one stopped gracefully with "exit 0").
func flaked(c CellResult) string {
	if c.Err != nil {
		return report.FirstLine(c.Err)
	}
	var out []string
	for _, rp := range c.Report.Replicas {
		if strings.HasPrefix(rp.Exit, "exit status") {
			out = append(out, fmt.Sprintf("replica %s failed (%s; log %s)", rp.ID, rp.Exit, rp.Log))
		}
	}
	return strings.Join(out, "; ")
}

// missed says why c, a cell expected to reproduce a limitation, showed
// none: a double-run needs the follower to take over before the old
// leader's piece of work ends (Work, 200ms), and under load the fault's
// round trips and the follower's grant can take longer than that (seen
// on the docker provider with two matrices at once:
// TERMINATE_LEADER_BACKEND ended the backend 190ms after the piece began).
// Only a failed verdict of a reproduction is run again; a cell expected
// to be safe that shows a double-run is a finding, never retried.
// Caught by TestMissed.
func missed(c CellResult) string {
	if c.Err != nil || c.Report == nil || c.Report.Verdict.Pass || c.Report.Verdict.Inconclusive {
		return ""
	}
	switch c.Report.Verdict.Expect {
	case scenarios.ExpectReproduces, scenarios.ExpectReproducesOrOrphans, scenarios.ExpectRegresses:
		return c.Report.Verdict.Reason
	}
	return ""
}

// inconclusive says why c's run could not have shown a double-run: its
// verdict's reason, the validity condition that failed. Caught by
// TestInconclusiveRunsAgain.
func inconclusive(c CellResult) string {
	if c.Err != nil || c.Report == nil || !c.Report.Verdict.Inconclusive {
		return ""
	}
	return "INCONCLUSIVE: " + c.Report.Verdict.Reason
}
