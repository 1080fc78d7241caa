package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
)

const checkUsage = `Usage: doublerun check REPORT.json|DIR...

Recomputes every figure of each report from its own history, as a reader
of the file could: the double-run, leaderless and orphaned-lock windows,
failover latency, terms, writes and stale writes with the options the
report names, the linearizability check of the fence (porcupine), and the
verdict. Numbers compare at the precision the report stores and times as
instants, so a report written back by jq or Python still agrees. A DIR is
searched for every report.json under it. Prints a line per report, with
every figure that differs below it.

Exits 1 when a figure differs, when a file is not a doublerun report of
this version or its history lacks the evidence of its figures (a fence
without token operations, a write or grant outside every piece of work of
its replica, overlapping pieces of one replica, a count with nothing to
count: it is refused, not passed), or when a DIR holds no report.json; 2
on a usage error.
`

func checkCommand() command {
	return command{
		name: "check", summary: "recompute every figure of saved reports from their histories", usage: checkUsage,
		run: func(_ context.Context, e *env, args []string) error {
			fset := newFlagSet("check", checkUsage, e)
			if err := fset.Parse(args); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					fmt.Fprint(e.stdout, fset.fullUsage())
					return err
				}
				return flagError{msg: flagMessage(fset.FlagSet, err), usage: fset.fullUsage()}
			}
			if fset.NArg() == 0 {
				return usageError{"check needs report.json files or directories holding them, such as reports/chaos"}
			}
			c := checker{e: e}
			for _, arg := range fset.Args() {
				c.path(arg)
			}
			fmt.Fprintf(e.stdout, "check: %d agree, %d differ, %d refused\n", c.agree, c.differ, c.refused)
			if c.differ+c.refused > 0 {
				return fmt.Errorf("%d report(s) differ and %d refused; see the lines above", c.differ, c.refused)
			}
			return nil
		},
	}
}

// checker checks reports and counts what it found.
type checker struct {
	e                      *env
	agree, differ, refused int
}

// path checks a report.json, or every one under a directory.
func (c *checker) path(arg string) {
	info, err := os.Stat(arg)
	if err != nil {
		c.refuse(arg, err)
		return
	}
	if !info.IsDir() {
		c.file(arg)
		return
	}
	found := 0
	err = filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "report.json" {
			found++
			c.file(p)
		}
		return nil
	})
	if err != nil {
		c.refuse(arg, err)
		return
	}
	if found == 0 {
		c.refuse(arg, errors.New("no report.json under it; pass the --out directory of doublerun run or chaos, or DOUBLERUN_TEST_REPORTS"))
	}
}

// file checks one report.json.
func (c *checker) file(p string) {
	data, err := os.ReadFile(p)
	if err != nil {
		c.refuse(p, err)
		return
	}
	r, err := report.Recompute(data)
	if err != nil {
		c.refuse(p, err)
		return
	}
	m := r.Metrics
	figures := fmt.Sprintf("double-run %s (%d), leaderless %s (%d), failover %s, stale writes %d/%d, orphaned %s (%d), fence %s",
		m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total, m.Leaderless.Episodes, failoverOf(m),
		m.StaleWrites.Accepted, m.StaleWrites.Rejected, m.Orphaned.Total, m.Orphaned.Episodes, fenceOf(r))
	if len(r.Diffs) == 0 {
		c.agree++
		fmt.Fprintf(c.e.stdout, "ok      %s: %d figures agree: %s\n", p, r.Figures, figures)
		return
	}
	c.differ++
	fmt.Fprintf(c.e.stdout, "DIFFERS %s: %d of %d figures: recomputed %s\n", p, len(r.Diffs), r.Figures, figures)
	for _, d := range r.Diffs {
		fmt.Fprintf(c.e.stdout, "        %s\n", d)
	}
}

// refuse counts p as refused and says why on one line.
func (c *checker) refuse(p string, why error) {
	c.refused++
	var pe *fs.PathError
	if errors.As(why, &pe) {
		why = pe.Err
	}
	fmt.Fprintf(c.e.stdout, "REFUSED %s: %v\n", p, why)
}

func failoverOf(m oracle.Metrics) string {
	if m.FailoverLatency == nil {
		return "-"
	}
	return m.FailoverLatency.String()
}

// fenceOf is the recomputed linearizability verdict, with the time the
// report's own check took beside this one's.
func fenceOf(r report.Recomputed) string {
	l := r.Metrics.Linearizability
	if l == nil {
		return "not checked"
	}
	s := fmt.Sprintf("linearizable %s, %d operations, checked in %s", l.Linearizable, l.Operations, micros(l.CheckedIn))
	if was := r.Report.Metrics.Linearizability; was != nil {
		s += fmt.Sprintf(" (the run's check: %s)", micros(was.CheckedIn))
	}
	return s
}

func micros(d oracle.Duration) time.Duration { return time.Duration(d).Round(time.Microsecond) }
