package scenarios

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// ReportSchema names the JSON layout of Report; it changes when a field's
// meaning does.
const ReportSchema = "doublerun.report/v2"

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
	// OrphanTolerance is the oracle option the orphaned-lock window used.
	OrphanTolerance oracle.Duration `json:"orphan_tolerance_ms"`
	// CheckTimeout is the oracle option that bounded the linearizability
	// check.
	CheckTimeout oracle.Duration `json:"check_timeout_ms"`
	Replicas     []ReplicaInfo   `json:"replicas"`
	Metrics      oracle.Metrics  `json:"metrics"`
	Verdict      Verdict         `json:"verdict"`
	// Protocol says how replica commands reported their work; nil for a
	// built-in strategy's replicas.
	Protocol *ProtocolInfo  `json:"protocol,omitempty"`
	History  oracle.History `json:"history"`
}

// ProtocolInfo is how a run's replica commands (Scenario.Replica)
// reported, and what the runner saw of them.
type ProtocolInfo struct {
	// Mode is replica.ModeSQL or replica.ModeLog.
	Mode string `json:"mode"`
	// Note says what the timestamps are in this mode.
	Note string `json:"note"`
	// Lines and Matched count, in log mode, the lines the replicas
	// printed and those that matched a pattern.
	Lines   int `json:"lines,omitempty"`
	Matched int `json:"matched,omitempty"`
	// ReceiptLagMedian and ReceiptLagMax are, in log mode, how long the
	// runner took from reading a matching line to having its record
	// written on the oracle's clock.
	ReceiptLagMedian oracle.Duration `json:"receipt_lag_median_ms,omitempty"`
	ReceiptLagMax    oracle.Duration `json:"receipt_lag_max_ms,omitempty"`
	// LeftBehind names the replicas whose process group still ran after
	// the command exited; the runner killed what was left.
	LeftBehind []string `json:"left_behind,omitempty"`
	// Silent, when no leader work was reported, says why in the words of
	// the mode, and is the failed verdict's reason.
	Silent string `json:"silent,omitempty"`
}

// The notes of ProtocolInfo, by mode.
const (
	noteSQL = "each record's time is clock_timestamp() of the replica's own call of a doublerun.* function, on the one clock, as for a built-in replica"
	noteLog = "each record's time is the runner's receipt of the line that matched, written at once on the one clock: later than the program's own moment by its output's buffering and the receipt lag below"
)

// Analysis is the oracle options the report's figures were computed with.
func (r *Report) Analysis() oracle.Options {
	return oracle.Options{GapTolerance: time.Duration(r.GapTolerance), OrphanTolerance: time.Duration(r.OrphanTolerance),
		CheckTimeout: time.Duration(r.CheckTimeout), TTL: r.Scenario.TTL, Commands: r.Scenario.Replica != nil,
		StaleWritesOnly: r.Scenario.Expect == ExpectFenced, FaultHold: r.Scenario.faultHold(),
		Regression: r.Scenario.Expect == ExpectRegresses}
}

// Pieces is the number of pieces of leader work the report's history
// holds, which Judge needs.
func (r *Report) Pieces() int { return len(r.History.Intervals) }

// StackInfo says where a run happened.
type StackInfo struct {
	Provider      string `json:"provider"`
	Lease         string `json:"lease_endpoint"`
	Work          string `json:"work_endpoint"`
	PgBouncer     string `json:"pgbouncer_version,omitempty"`
	LeaseEndpoint string `json:"lease_endpoint_check"`
	// Versions names the servers of the stack, PgBouncer's too on a direct
	// run, where the work endpoint's PgBouncer version is empty.
	Versions VersionsInfo `json:"versions"`
}

// VersionsInfo is the exact server versions a run measured.
type VersionsInfo struct {
	// Set is the version set the servers make up, such as
	// "pg17-pgbouncer1.24", read from the servers.
	Set       string `json:"set"`
	Postgres  string `json:"postgres"`
	PgBouncer string `json:"pgbouncer"`
	// Note says when a version set was asked for that the servers are
	// not (the native provider runs the host's binaries).
	Note string `json:"note,omitempty"`
}

// String is the versions as one line, such as "pg17-pgbouncer1.24
// (Postgres 17.12 (Debian 17.12-0+deb13u1), PgBouncer 1.24.1)", with the
// note after it.
func (v VersionsInfo) String() string {
	if v.Set == "" {
		return "unknown"
	}
	s := fmt.Sprintf("%s (Postgres %s, PgBouncer %s)", v.Set, v.Postgres, v.PgBouncer)
	if v.Note != "" {
		s += "; " + v.Note
	}
	return s
}

// StackVersions is what VersionsInfo a run on s reports.
func StackVersions(s *stack.Stack) VersionsInfo {
	v := s.Versions()
	return VersionsInfo{Set: v.Set, Postgres: v.Postgres, PgBouncer: v.PgBouncer, Note: s.VersionsNote()}
}

// ReplicaInfo is one replica process.
type ReplicaInfo struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	Exit string `json:"exit"`
	Log  string `json:"log,omitempty"`
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

// Amend is v with what replica commands add to a verdict: a run without
// work says why in the words of its mode (Silent), and one whose process
// group outlived it fails, since what it left ran unmeasured.
// A nil p, built-in replicas, changes nothing.
func (p *ProtocolInfo) Amend(v Verdict) Verdict {
	if p == nil {
		return v
	}
	if p.Silent != "" && !v.Pass {
		v.Reason = p.Silent
	}
	if len(p.LeftBehind) == 0 {
		return v
	}
	// Caught by TestCommandReplicaLeavesNothingRunning.
	v.Pass, v.Inconclusive = false, false
	v.Reason = fmt.Sprintf("replica %s left processes of its group running after it exited, which the runner killed and never measured; make the command wait for its children, or exec the service so it is the one process (%s)",
		strings.Join(p.LeftBehind, ", "), v.Reason)
	return v
}
