package report

import (
	"fmt"
	"strings"

	"github.com/doublerun/doublerun/scenarios"
)

// Line is the one progress line printed per run: PASS, FAIL or
// INCONCLUSIVE, the
// scenario, the double-run and leaderless windows, the stale writes and
// the verdict's reason.
func Line(r *scenarios.Report) string {
	status := r.Verdict.Status()
	m := r.Metrics
	return fmt.Sprintf("%s %-40s double-run %8s (%d episodes)  leaderless %8s  orphaned %8s (%d)  stale accepted/rejected %d/%d  [%s: %s]",
		status, r.Scenario.Name, m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total,
		m.Orphaned.Total, m.Orphaned.Episodes, m.StaleWrites.Accepted, m.StaleWrites.Rejected, r.Verdict.Expect, r.Verdict.Reason)
}

// FirstLine is the first line of err, which by house rule says what failed
// and what to do; what follows (a server's log, say) is for debugging.
// It is "" for a nil err.
func FirstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
