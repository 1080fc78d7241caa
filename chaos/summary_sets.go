package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/report"
)

// versionsLine names the exact server versions and providers the cells'
// reports ran on, for the summary's header; "" when no report names them.
func versionsLine(cells []CellResult) string {
	var vs, providers []string
	for _, c := range cells {
		if c.Report == nil || c.Report.Stack.Versions.Set == "" {
			continue
		}
		if v := c.Report.Stack.Versions.String(); !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
		if p := c.Report.Stack.Provider; !slices.Contains(providers, p) {
			providers = append(providers, p)
		}
	}
	if len(vs) == 0 {
		return ""
	}
	slices.Sort(vs)
	slices.Sort(providers)
	return fmt.Sprintf("Versions: %s; provider %s.\n\n", strings.Join(vs, "; "), strings.Join(providers, ", "))
}

// VersionSet is the version set c ran on: its Versions, else its
// report's.
func (c CellResult) VersionSet() string {
	if c.Versions != "" {
		return c.Versions
	}
	if c.Report != nil {
		return c.Report.Stack.Versions.Set
	}
	return ""
}

// SummarySets renders cells run on one or more version sets. On one set
// it is exactly Summary(cells, walls[set]). On several it is a header, the
// cells whose outcome differs between the sets (Differences), and then
// each set's Summary, oldest set first, its headings one level down; walls
// holds each set's wall time.
func SummarySets(cells []CellResult, walls map[string]time.Duration) string {
	bySet := map[string][]CellResult{}
	for _, c := range cells {
		bySet[c.VersionSet()] = append(bySet[c.VersionSet()], c)
	}
	sets := slices.SortedFunc(maps.Keys(bySet), CompareSets)
	if len(sets) <= 1 {
		var set string
		if len(sets) == 1 {
			set = sets[0]
		}
		return Summary(cells, walls[set])
	}
	var total time.Duration
	for _, w := range walls {
		total += w
	}
	var b strings.Builder
	failed := Failed(cells)
	fmt.Fprintf(&b, "# Chaos matrix on %d version sets\n\n%s: %d cells, %d matched their expectation, %d did not; wall time %s.\n\n",
		len(sets), strings.Join(sets, ", "), len(cells), len(cells)-len(failed), len(failed), total.Round(time.Second))
	b.WriteString(Differences(cells))
	for _, set := range sets {
		b.WriteString("\n")
		s := Summary(bySet[set], walls[set])
		s = strings.Replace(s, "# Chaos matrix\n", "# Chaos matrix on "+cmp.Or(set, "unknown versions")+"\n", 1)
		for _, l := range strings.SplitAfter(s, "\n") {
			if strings.HasPrefix(l, "#") {
				l = "#" + l
			}
			b.WriteString(l)
		}
	}
	return b.String()
}

// CompareSets orders version set names by Postgres major, then PgBouncer
// version, numerically ("pg9-..." before "pg15-..."), oldest first.
func CompareSets(a, b string) int {
	key := func(s string) (int, int, int) {
		var pg, major, minor int
		fmt.Sscanf(s, "pg%d-pgbouncer%d.%d", &pg, &major, &minor)
		return pg, major, minor
	}
	a1, a2, a3 := key(a)
	b1, b2, b3 := key(b)
	return cmp.Or(cmp.Compare(a1, b1), cmp.Compare(a2, b2), cmp.Compare(a3, b3), cmp.Compare(a, b))
}

// shown is what a cell showed, coarsely: whether it ran, its verdict,
// whether a double-run appeared and whether a stale write was accepted.
// Two runs of a cell on different versions differ when these do.
type shown struct {
	Ran, Pass, DoubleRun, StaleAccepted bool
}

// shownBy is what c showed.
func shownBy(c CellResult) shown {
	if c.Report == nil || c.Err != nil {
		return shown{}
	}
	m := c.Report.Metrics
	return shown{Ran: true, Pass: c.Report.Verdict.Pass, DoubleRun: m.DoubleRun.Total > 0, StaleAccepted: m.StaleWrites.Accepted > 0}
}

// Differences renders, as a Markdown section, the cells run on two or more
// version sets where what they showed (shownBy) differs between them, with each set's
// figures; "" when every such cell agrees.
func Differences(cells []CellResult) string {
	byName := map[string]map[string]CellResult{}
	var names []string
	for _, c := range cells {
		n := c.Scenario.Name
		if byName[n] == nil {
			byName[n] = map[string]CellResult{}
			names = append(names, n)
		}
		byName[n][c.VersionSet()] = c
	}
	var rows []string
	for _, n := range names {
		per := byName[n]
		if len(per) < 2 {
			continue
		}
		sets := slices.SortedFunc(maps.Keys(per), CompareSets)
		first := shownBy(per[sets[0]])
		differ := false
		for _, s := range sets[1:] {
			differ = differ || shownBy(per[s]) != first
		}
		if !differ {
			continue
		}
		var parts []string
		for _, s := range sets {
			parts = append(parts, s+": "+shownText(per[s]))
		}
		rows = append(rows, fmt.Sprintf("| %s | %s |\n", n, strings.Join(parts, "<br>")))
	}
	if len(rows) == 0 {
		return "No cell's outcome (verdict, double-run, accepted stale write) differs between the version sets.\n"
	}
	var b strings.Builder
	b.WriteString("## Cells whose outcome differs between version sets\n\n| cell | per version set: double-run (episodes), leaderless, stale writes accepted / rejected, verdict |\n|---|---|\n")
	b.WriteString(strings.Join(rows, ""))
	return b.String()
}

func shownText(c CellResult) string {
	if c.Report == nil {
		return "ERROR " + report.FirstLine(c.Err)
	}
	m := c.Report.Metrics
	v := "PASS"
	switch {
	case c.Err != nil:
		v = "ERROR"
	case !c.Report.Verdict.Pass:
		v = "FAIL"
	}
	return fmt.Sprintf("%s (%d), %s, %d / %d, %s", m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total,
		m.StaleWrites.Accepted, m.StaleWrites.Rejected, v)
}
