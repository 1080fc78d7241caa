package scenarios

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// ReportSchema names the JSON layout of Report; it changes when a field's
// meaning does.
const ReportSchema = "doublerun.report/v1"

// Report is everything one run measured. Its JSON form is documented in
// the package documentation; it carries the raw history, so every figure
// can be recomputed with oracle.Analyze.
type Report struct {
	Schema   string          `json:"schema"`
	Scenario Scenario        `json:"scenario"`
	Stack    StackInfo       `json:"stack"`
	Began    time.Time       `json:"began"`
	Wall     oracle.Duration `json:"wall_ms"`
	// GapTolerance is the oracle option the leaderless window used.
	GapTolerance oracle.Duration `json:"gap_tolerance_ms"`
	Replicas     []ReplicaInfo   `json:"replicas"`
	Metrics      oracle.Metrics  `json:"metrics"`
	Verdict      Verdict         `json:"verdict"`
	History      oracle.History  `json:"history"`
}

// StackInfo says where a run happened.
type StackInfo struct {
	Provider      string `json:"provider"`
	Lease         string `json:"lease_endpoint"`
	Work          string `json:"work_endpoint"`
	PgBouncer     string `json:"pgbouncer_version,omitempty"`
	LeaseEndpoint string `json:"lease_endpoint_check"`
}

// ReplicaInfo is one replica process.
type ReplicaInfo struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	Exit string `json:"exit"`
	Log  string `json:"log,omitempty"`
}

// Verdict compares the measurements with the scenario's expectation.
type Verdict struct {
	Expect Expectation `json:"expect"`
	Pass   bool        `json:"pass"`
	Reason string      `json:"reason"`
}

// Judge decides whether m meets expect. A mismatch fails in either
// direction: a "reproduces" scenario that shows no double-run fails too.
func Judge(expect Expectation, m oracle.Metrics, pieces int) Verdict {
	v := Verdict{Expect: expect}
	dr := m.DoubleRun
	switch {
	case pieces == 0:
		v.Reason = "no leader work was logged: no replica ever became leader"
	case expect == ExpectSafe:
		v.Pass = dr.Episodes == 0 && m.StaleWrites.Accepted == 0
		if v.Pass {
			v.Reason = "no double-run and no accepted stale write"
		} else {
			v.Reason = fmt.Sprintf("expected safe, measured a double-run of %s in %d episodes and %d accepted stale writes",
				dr.Total, dr.Episodes, m.StaleWrites.Accepted)
		}
	case expect == ExpectReproduces:
		v.Pass = dr.Total > 0
		if v.Pass {
			v.Reason = fmt.Sprintf("reproduced: double-run of %s in %d episodes (longest %s)", dr.Total, dr.Episodes, dr.Longest)
		} else {
			v.Reason = "expected a double-run, measured none: the limitation did not reproduce"
		}
	case expect == ExpectFenced:
		v.Pass = m.StaleWrites.Accepted == 0
		if v.Pass {
			v.Reason = fmt.Sprintf("no accepted stale write (%d rejected by the fence; double-run %s)", m.StaleWrites.Rejected, dr.Total)
		} else {
			v.Reason = fmt.Sprintf("expected fenced, measured %d accepted stale writes", m.StaleWrites.Accepted)
		}
	default:
		v.Reason = fmt.Sprintf("unknown expectation %q", expect)
	}
	return v
}

func (r *run) report(h oracle.History, m oracle.Metrics) *Report {
	rep := &Report{
		Schema:       ReportSchema,
		Scenario:     r.sc,
		Began:        r.began,
		Wall:         oracle.Duration(time.Since(r.began)),
		GapTolerance: oracle.Duration(r.gapTolerance()),
		Metrics:      m,
		Verdict:      Judge(r.sc.Expect, m, len(h.Intervals)),
		History:      h,
		Stack: StackInfo{
			Provider:      string(r.opts.Stack.Provider()),
			Lease:         describe(r.leaseEP),
			Work:          describe(r.workEP),
			PgBouncer:     r.workEP.Version,
			LeaseEndpoint: r.leaseCheck,
		},
	}
	r.mu.Lock()
	for _, rp := range r.replicas {
		info := ReplicaInfo{ID: rp.id, PID: rp.cmd.Process.Pid, Exit: "running"}
		select {
		case <-rp.done:
			info.Exit = "exit 0"
			if rp.err != nil {
				info.Exit = rp.err.Error()
			}
		default:
		}
		if !r.tempDir {
			info.Log = rp.log
		}
		rep.Replicas = append(rep.Replicas, info)
	}
	r.mu.Unlock()
	return rep
}

func describe(ep stack.Endpoint) string {
	if ep.Direct() {
		return "postgres (direct)"
	}
	return fmt.Sprintf("%s (PgBouncer %s, pool_mode=%s, default_pool_size=%d)", ep.Name, ep.Version, ep.PoolMode, ep.PoolSize)
}

// BackendPIDs returns, per replica, the backend PIDs its lease held while
// it worked, as the advisory lease reports them.
func (r *Report) BackendPIDs() map[string][]int32 {
	out := map[string][]int32{}
	for _, iv := range r.History.Intervals {
		if iv.BackendPID != 0 && !slices.Contains(out[iv.Replica], iv.BackendPID) {
			out[iv.Replica] = append(out[iv.Replica], iv.BackendPID)
		}
	}
	return out
}

// Summary is the one progress line printed per scenario.
func (r *Report) Summary() string {
	status := "PASS"
	if !r.Verdict.Pass {
		status = "FAIL"
	}
	m := r.Metrics
	return fmt.Sprintf("%s %-40s double-run %8s (%d episodes)  leaderless %8s  stale accepted/rejected %d/%d  [%s: %s]",
		status, r.Scenario.Name, m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total,
		m.StaleWrites.Accepted, m.StaleWrites.Rejected, r.Verdict.Expect, r.Verdict.Reason)
}

// WriteFiles writes report.json, report.md and timeline.svg into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"report.json":  append(js, '\n'),
		"report.md":    []byte(r.Markdown()),
		"timeline.svg": []byte(r.SVG()),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}

// Markdown renders the report as a table.
func (r *Report) Markdown() string {
	var b strings.Builder
	m := r.Metrics
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", r.Scenario.Name, r.Scenario.Description)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	row("strategy", r.Scenario.Strategy)
	row("topology", r.Scenario.Topology.String())
	row("replicas", fmt.Sprint(r.Scenario.Replicas))
	row("measured for", r.Scenario.Duration.String())
	row("poll interval / work / TTL", fmt.Sprintf("%s / %s / %s", r.Scenario.PollInterval, r.Scenario.Work, r.Scenario.TTL))
	row("fault", r.Scenario.Fault)
	row("provider", r.Stack.Provider)
	row("lease endpoint", r.Stack.Lease)
	row("lease endpoint check", r.Stack.LeaseEndpoint)
	row("work endpoint", r.Stack.Work)
	row("**double-run window**", fmt.Sprintf("%s in %d episodes (longest %s)", m.DoubleRun.Total, m.DoubleRun.Episodes, m.DoubleRun.Longest))
	row("**leaderless window**", fmt.Sprintf("%s in %d episodes (longest %s; gaps ≤ %s ignored)", m.Leaderless.Total, m.Leaderless.Episodes, m.Leaderless.Longest, r.GapTolerance))
	fo := "-"
	if m.FailoverLatency != nil {
		fo = m.FailoverLatency.String()
	}
	row("failover latency", fo)
	row("most leaders at once", fmt.Sprint(m.MaxConcurrentLeaders))
	row("terms granted / leadership changes", fmt.Sprintf("%d / %d", m.Terms, m.LeadershipChanges))
	row("side-effect writes accepted", fmt.Sprint(m.Writes))
	row("stale writes accepted / rejected", fmt.Sprintf("%d / %d", m.StaleWrites.Accepted, m.StaleWrites.Rejected))
	if pids := r.BackendPIDs(); len(pids) > 0 {
		var parts []string
		for _, id := range slices.Sorted(maps.Keys(pids)) {
			parts = append(parts, fmt.Sprintf("%s: %v", id, pids[id]))
		}
		row("lease backend PIDs", strings.Join(parts, "; "))
	}
	verdict := "PASS"
	if !r.Verdict.Pass {
		verdict = "FAIL"
	}
	row("**verdict**", fmt.Sprintf("%s (expected %s): %s", verdict, r.Verdict.Expect, r.Verdict.Reason))
	return b.String()
}
