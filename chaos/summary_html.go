package chaos

import (
	"cmp"
	"fmt"
	"html"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// SummaryHTMLFile is the page beside summary.md that shows the matrix as
// a grid.
const SummaryHTMLFile = "summary.html"

// htmlVerdict is how the page names and colours a cell's outcome: ERROR
// when the cell could not run as designed, else the verdict's status, so a
// run that could not have failed is INCONCLUSIVE on the page as in
// summary.md, never a FAIL. Caught by TestSummaryHTMLText.
func htmlVerdict(c CellResult) string {
	if c.Err != nil || c.Report == nil {
		return "ERROR"
	}
	return c.Report.Verdict.Status()
}

// SummaryHTML renders cells as one self-contained page: a grid with a row
// per fault and a column per strategy and topology (with its pool size),
// one table per version set, each cell coloured by its verdict and
// opening, below the grid, its timeline as inline SVG with links to its
// report.md and, when the fence was checked, linearizability.html. It
// needs no server, no script and no network: the panels open by URL
// fragment (CSS :target). dirOf gives the directory, relative to the
// page, under which a cell's report directory lies ("" for beside it).
func SummaryHTML(cells []CellResult, wall time.Duration, dirOf func(CellResult) string) string {
	var b strings.Builder
	failed := Failed(cells)
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>doublerun chaos matrix</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table.grid{border-collapse:collapse;margin-bottom:1.5em}
.grid th,.grid td{border:1px solid #bbb;padding:0;font-size:12px;text-align:center}
.grid th{padding:4px 6px;background:#f3f3f3}
.grid th.fault{text-align:left}
.grid td a{display:block;padding:6px 4px;min-width:5.5em;color:#000;text-decoration:none}
.grid td.none{background:#fafafa;color:#aaa}
.PASS{background:#9be29b}.FAIL{background:#f08080}.INCONCLUSIVE{background:#c8c8e8}.ERROR{background:#f0c060}
.expect{display:block;font-size:10px;color:#333}
.panel{display:none;border:1px solid #888;padding:.5em 1em;margin:1em 0}
.panel:target{display:block}
.panel svg{max-width:100%;height:auto}
.legend span{padding:2px 8px;margin-right:6px}
</style></head><body>
`)
	fmt.Fprintf(&b, "<h1>Chaos matrix</h1>\n<p>%d cells, %d matched their expectation, %d did not; wall time %s.</p>\n",
		len(cells), len(cells)-len(failed), len(failed), wall.Round(time.Second))
	b.WriteString(`<p class="legend"><span class="PASS">PASS</span><span class="FAIL">FAIL</span><span class="INCONCLUSIVE">INCONCLUSIVE: could not have failed</span><span class="ERROR">ERROR: could not run as designed</span> Click a cell for its timeline.</p>` + "\n")
	bySet := map[string][]CellResult{}
	for _, c := range cells {
		bySet[c.VersionSet()] = append(bySet[c.VersionSet()], c)
	}
	sets := slices.SortedFunc(maps.Keys(bySet), CompareSets)
	var panels strings.Builder
	n := 0
	for _, set := range sets {
		group := bySet[set]
		fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(cmp.Or(set, "unknown versions")))
		type column struct{ strategy, topology string }
		var cols []column
		byKey := map[string]CellResult{}
		strategies := strategy.Names()
		for _, c := range group {
			col := column{c.Scenario.Strategy, c.Scenario.Topology.String()}
			if !slices.Contains(cols, col) {
				cols = append(cols, col)
			}
			byKey[c.Scenario.Fault+"\x00"+col.strategy+"\x00"+col.topology] = c
		}
		slices.SortStableFunc(cols, func(a, b column) int {
			return cmp.Compare(slices.Index(strategies, a.strategy), slices.Index(strategies, b.strategy))
		})
		b.WriteString(`<table class="grid"><tr><th rowspan="2">fault</th>`)
		for i := 0; i < len(cols); {
			j := i
			for j < len(cols) && cols[j].strategy == cols[i].strategy {
				j++
			}
			fmt.Fprintf(&b, `<th colspan="%d">%s</th>`, j-i, html.EscapeString(cols[i].strategy))
			i = j
		}
		b.WriteString("</tr>\n<tr>")
		for _, col := range cols {
			fmt.Fprintf(&b, "<th>%s</th>", html.EscapeString(col.topology))
		}
		b.WriteString("</tr>\n")
		for _, f := range append([]string{fault.None}, fault.Names()...) {
			var row strings.Builder
			any := false
			for _, col := range cols {
				c, ok := byKey[f+"\x00"+col.strategy+"\x00"+col.topology]
				if !ok {
					row.WriteString(`<td class="none">-</td>`)
					continue
				}
				any = true
				n++
				id := fmt.Sprintf("cell-%d", n)
				v := htmlVerdict(c)
				fmt.Fprintf(&row, `<td class="cell %s" data-cell="%s" data-verdict="%s"><a href="#%s">%s<span class="expect">%s</span></a></td>`,
					v, html.EscapeString(c.Scenario.Name), v, id, v, html.EscapeString(string(c.Scenario.Expect)))
				writePanel(&panels, id, set, c, dirOf(c))
			}
			if any {
				fmt.Fprintf(&b, `<tr><th class="fault">%s</th>%s</tr>`+"\n", html.EscapeString(f), row.String())
			}
		}
		b.WriteString("</table>\n")
	}
	b.WriteString(panels.String())
	b.WriteString("</body></html>\n")
	return b.String()
}

// writePanel writes the panel cell c opens: its figures, its verdict's
// reason, its links and its timeline.
func writePanel(b *strings.Builder, id, set string, c CellResult, dir string) {
	sc := c.Scenario
	fmt.Fprintf(b, `<section class="panel" id="%s"><h3>%s <small>%s</small></h3>`+"\n", id, html.EscapeString(sc.Name), html.EscapeString(set))
	fmt.Fprintf(b, "<p><b>%s</b> (expect %s): %s</p>\n", htmlVerdict(c), html.EscapeString(string(sc.Expect)), html.EscapeString(c.Verdict().Reason))
	if c.Report == nil {
		b.WriteString("</section>\n")
		return
	}
	base := path.Join(filepath.ToSlash(dir), sc.Name)
	fmt.Fprintf(b, `<p><a href="%s">report.md</a>`, html.EscapeString(base+"/report.md"))
	if c.Report.Metrics.Linearizability != nil {
		fmt.Fprintf(b, ` · <a href="%s">%s</a>`, html.EscapeString(base+"/"+report.LinearizabilityView), report.LinearizabilityView)
	}
	b.WriteString("</p>\n")
	b.WriteString(report.SVG(c.Report))
	b.WriteString("</section>\n")
}

// writeSummaryHTML writes SummaryHTML into dir/summary.html.
func writeSummaryHTML(dir string, cells []CellResult, wall time.Duration, dirOf func(CellResult) string) error {
	p := filepath.Join(dir, SummaryHTMLFile)
	if err := os.WriteFile(p, []byte(SummaryHTML(cells, wall, dirOf)), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// beside is the dirOf of a page in the directory of the cells' reports.
func beside(CellResult) string { return "" }

// writeSummaryHTML writes the page of a run on several sets into the run's
// directory, each cell's links under its set's directory.
func (r *setsRun) writeSummaryHTML() error {
	var total time.Duration
	for _, w := range r.out.Walls {
		total += w
	}
	return writeSummaryHTML(r.cfg.OutDir, r.out.Results, total, func(c CellResult) string { return r.ran[c.Versions] })
}

// WriteSummaryHTML writes the page of merged results into dir/summary.html,
// each cell's links under dir/<its version set>/: where the chaos workflow
// lays out the shards it merged.
func (r SetResults) WriteSummaryHTML(dir string) error {
	var total time.Duration
	for _, w := range r.Walls {
		total += w
	}
	return writeSummaryHTML(dir, r.Results, total, func(c CellResult) string { return c.Versions })
}
