package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// htmlCell is a result for the page's tests: a run of two (or three)
// replicas with one overlap when overlap is set, judged pass or not, or a
// cell that could not run when failed is set.
func htmlCell(strategy string, kind scenarios.TopologyKind, f string, replicas int, pass, overlap bool, failed error) CellResult {
	sc := scenarios.Scenario{Name: strategy + "/" + string(kind) + "/" + f, Strategy: strategy, Topology: scenarios.Topology{Kind: kind}, Fault: f, Expect: scenarios.ExpectSafe, Replicas: replicas}
	if failed != nil {
		return CellResult{Scenario: sc, Err: failed, Versions: "pg15-pgbouncer1.18"}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := oracle.History{Start: t0, End: at(9000)}
	for i := range replicas {
		id := "r" + string(rune('1'+i))
		h.Intervals = append(h.Intervals, oracle.Interval{Replica: id, Token: int64(i + 1), Start: at(1000 + 2500*i), End: at(3000 + 2500*i)})
	}
	r := &scenarios.Report{Scenario: sc, History: h, Verdict: scenarios.Verdict{Expect: sc.Expect, Pass: pass, Reason: "judged for the page's test"}}
	if overlap {
		r.Metrics.DoubleRun = oracle.Window{Total: oracle.Duration(12345678 * time.Millisecond), Episodes: 123456,
			Spans: []oracle.Span{{Start: at(3000), End: at(3500)}}}
		r.Metrics.Leaderless.Total = oracle.Duration(98765432 * time.Millisecond)
		r.Metrics.StaleWrites = oracle.StaleWrites{Accepted: 123456, Rejected: 654321}
	}
	return CellResult{Scenario: sc, Report: r, Versions: "pg15-pgbouncer1.18"}
}

func htmlCells() []CellResult {
	return []CellResult{
		htmlCell(strategy.Advisory, scenarios.Direct, fault.None, 2, true, false, nil),
		htmlCell(strategy.Advisory, scenarios.Transaction, fault.None, 2, false, true, nil),
		htmlCell(strategy.Advisory, scenarios.Pinned, fault.KillLeader.Name(), 2, true, false, nil),
		htmlCell(strategy.Fenced, scenarios.Transaction, fault.FreezeLeader.Name(), 3, true, true, nil),
		htmlCell(strategy.Fenced, scenarios.Direct, fault.KillLeader.Name(), 2, false, false, errors.New("replica r2 failed")),
		couldNotFail(htmlCell(strategy.Fenced, scenarios.Pinned, fault.KillLeader.Name(), 2, false, false, nil)),
	}
}

// couldNotFail marks c's run as one that could not have failed.
func couldNotFail(c CellResult) CellResult {
	c.Report.Verdict.Inconclusive = true
	c.Report.Verdict.Reason = "contention: 1 of 2 replicas alive through the fault"
	return c
}

// TestSummaryHTMLText checks the page's text: a cell per result with its
// verdict, its panel's links and its timeline, and no reference that
// leaves the file system.
func TestSummaryHTMLText(t *testing.T) {
	cells := htmlCells()
	page := SummaryHTML(cells, time.Minute, beside)
	require.Equal(t, len(cells), strings.Count(page, `<td class="cell `), "a grid cell per result")
	for _, c := range cells {
		require.Contains(t, page, `data-cell="`+c.Scenario.Name+`" data-verdict="`+htmlVerdict(c)+`"`)
	}
	require.Contains(t, page, `href="advisory/transaction/none/report.md"`)
	require.Equal(t, 5, strings.Count(page, "<svg "), "a timeline per cell that ran")
	require.NotRegexp(t, regexp.MustCompile(`(?i)(src|href)="(https?:)?//`), page, "the page must work with no network")
	require.Equal(t, "ERROR", htmlVerdict(cells[4]))
	require.Equal(t, "FAIL", htmlVerdict(cells[1]))
	require.Equal(t, "PASS", htmlVerdict(cells[0]))
	require.Equal(t, "INCONCLUSIVE", htmlVerdict(cells[5]), "a run that could not have failed is no FAIL")
	require.Contains(t, page, `<span class="INCONCLUSIVE">`, "the legend names the third verdict")
	off := SummaryHTML(cells, time.Minute, func(CellResult) string { return "pg17-pgbouncer1.24" })
	require.Contains(t, off, `href="pg17-pgbouncer1.24/advisory/transaction/none/report.md"`)
}

// probeScript, added to a copy of summary.html, writes what the browser
// laid out: each grid cell's name, text, background colour and size, and
// for the panel the URL's fragment opens, its display, its timeline's
// size and the right edge of the timeline's widest text.
const probeScript = `<pre id="probe-result"></pre><script>
window.addEventListener('load', () => {
  const out = {};
  try {
    out.cells = [...document.querySelectorAll('td.cell')].map(td => {
      const r = td.getBoundingClientRect();
      return {name: td.dataset.cell, text: td.innerText.split('\n')[0].trim(), bg: getComputedStyle(td).backgroundColor, w: r.width, h: r.height};
    });
    out.opened = location.hash.slice(1);
    const p = document.getElementById(out.opened), svg = p.querySelector('svg');
    out.display = getComputedStyle(p).display;
    const sr = svg.getBoundingClientRect();
    out.svg = {w: sr.width, h: sr.height, width: svg.width.baseVal.value};
    out.textRight = Math.max(...[...svg.querySelectorAll('text')].map(t => { const b = t.getBBox(); return b.x + b.width; }));
  } catch (e) { out.error = String(e); }
  document.getElementById('probe-result').textContent = JSON.stringify(out);
});
</script>`

type probed struct {
	Cells []struct {
		Name, Text, Bg string
		W, H           float64
	}
	Error     string
	Opened    string
	Display   string
	SVG       struct{ W, H, Width float64 }
	TextRight float64
}

// chromium runs Debian's chromium headless with args, in a profile of its
// own, and returns its stdout.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	// This test renders summary.html in a real browser: Debian's.
	stacktest.NeedPackage(t, "chromium", func() error { _, err := exec.LookPath("chromium"); return err })
	bin, err := exec.LookPath("chromium")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--allow-file-access-from-files", "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium %s: %s", strings.Join(args, " "), stderr.String())
	return out
}

// TestSummaryHTMLRendersInChromium renders summary.html in headless
// chromium and asserts on what it laid out, not on the HTML's text: every
// cell present, with its verdict and its verdict's colour; a cell's panel
// opening to its timeline; the timeline's title inside its width, for the
// longest figures a 3-replica FREEZE_LEADER cell can show. The screenshot
// is left in the test's artifact directory (go test -artifacts).
func TestSummaryHTMLRendersInChromium(t *testing.T) {
	cells := htmlCells()
	dir := t.ArtifactDir()
	require.NoError(t, writeSummaryHTML(dir, cells, time.Minute, beside))
	page := filepath.Join(dir, SummaryHTMLFile)

	html, err := os.ReadFile(page)
	require.NoError(t, err)
	freeze := regexp.MustCompile(`data-cell="fenced/transaction/FREEZE_LEADER"[^>]*><a href="#(cell-\d+)"`).FindSubmatch(html)
	require.NotNil(t, freeze, "the FREEZE_LEADER cell links its panel")
	begin := time.Now()
	chromium(t, "--window-size=1400,1400", "--screenshot="+filepath.Join(dir, "summary.png"), "file://"+page+"#"+string(freeze[1]))
	t.Logf("screenshot %s rendered in %s", filepath.Join(dir, "summary.png"), time.Since(begin).Round(time.Millisecond))
	info, err := os.Stat(filepath.Join(dir, "summary.png"))
	require.NoError(t, err)
	require.Positive(t, info.Size())

	probe := filepath.Join(dir, "probe.html")
	require.NoError(t, os.WriteFile(probe, []byte(strings.Replace(string(html), "</body>", probeScript+"</body>", 1)), 0o644))
	dom := chromium(t, "--virtual-time-budget=10000", "--dump-dom", "file://"+probe+"#"+string(freeze[1]))
	m := regexp.MustCompile(`(?s)<pre id="probe-result">(.*?)</pre>`).FindSubmatch(dom)
	require.NotNil(t, m, "the probe wrote no result: %s", dom)
	require.NotEmpty(t, m[1], "the probe never ran")
	var got probed
	require.NoError(t, json.Unmarshal([]byte(strings.ReplaceAll(string(m[1]), "&quot;", `"`)), &got))

	require.Empty(t, got.Error, "the probe failed")
	colours := map[string]string{"PASS": "rgb(155, 226, 155)", "FAIL": "rgb(240, 128, 128)", "ERROR": "rgb(240, 192, 96)", "INCONCLUSIVE": "rgb(200, 200, 232)"}
	require.Len(t, got.Cells, len(cells), "a rendered cell per result")
	for _, c := range cells {
		want := htmlVerdict(c)
		found := false
		for _, g := range got.Cells {
			if g.Name != c.Scenario.Name {
				continue
			}
			found = true
			require.Equal(t, want, g.Text, "cell %s shows its verdict", g.Name)
			require.Equal(t, colours[want], g.Bg, "cell %s is coloured by its verdict", g.Name)
			require.Greater(t, g.W, 20.0, "cell %s is laid out", g.Name)
			require.Greater(t, g.H, 10.0, "cell %s is laid out", g.Name)
		}
		require.True(t, found, "cell %s rendered", c.Scenario.Name)
	}
	require.Equal(t, "block", got.Display, "clicking a cell opens its panel")
	require.Greater(t, got.SVG.H, 100.0, "the opened panel shows its timeline")
	require.LessOrEqual(t, got.TextRight, got.SVG.Width, "no text of the timeline runs past its right edge")
}
