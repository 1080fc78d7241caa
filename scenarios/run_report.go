package scenarios

// What a run makes of its history: the Report (report.go) with the stack
// it ran on, its replicas, and how its replica commands reported.

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack"
)

func (r *run) report(h oracle.History, m oracle.Metrics) *Report {
	opts := r.analysis()
	rep := &Report{
		Schema:          ReportSchema,
		Scenario:        r.sc,
		Began:           r.began,
		Wall:            oracle.Duration(time.Since(r.began)),
		GapTolerance:    oracle.Duration(opts.GapTolerance),
		OrphanTolerance: oracle.Duration(opts.OrphanTolerance),
		CheckTimeout:    oracle.Duration(opts.CheckTimeout),
		Metrics:         m,
		Verdict:         Judge(r.sc.Expect, m, len(h.Intervals)),
		History:         h,
		Stack: StackInfo{
			Provider:      string(r.opts.Stack.Provider()),
			Lease:         describe(r.leaseEP),
			Work:          describe(r.workEP),
			PgBouncer:     r.workEP.Version,
			LeaseEndpoint: r.leaseCheck,
			Versions:      StackVersions(r.opts.Stack),
		},
	}
	rep.Protocol = r.protocolInfo()
	if rep.Protocol != nil && len(h.Intervals) == 0 {
		rep.Protocol.Silent = r.silentReason()
	}
	rep.Verdict = rep.Protocol.Amend(rep.Verdict)
	r.mu.Lock()
	for _, rp := range r.replicas {
		info := ReplicaInfo{ID: rp.id, PID: rp.cmd.Process.Pid, Exit: "running"}
		if rp.ended() {
			info.Exit = "exit 0"
			if rp.err != nil {
				info.Exit = rp.err.Error()
			}
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
	name := ep.Name
	if u, err := url.Parse(ep.DSN); err == nil && strings.HasSuffix(u.Path, aliasLeaseSuffix) {
		// The alias topology's lease name on the one bouncer.
		name += " database " + strings.TrimPrefix(u.Path, "/")
	}
	return fmt.Sprintf("%s (PgBouncer %s, pool_mode=%s, default_pool_size=%d)", name, ep.Version, ep.PoolMode, ep.PoolSize)
}

// silentReason says why no work was measured from replica commands.
func (r *run) silentReason() string {
	wait := r.opts.LeaderWait
	c := r.sc.Replica
	if c.Log == nil {
		return fmt.Sprintf("no leader work was reported: in %s no replica command called doublerun.work_begin; make the lease call it (on %s) when it leads and doublerun.work_end after, or judge an unchanged program by \"replica.log\" patterns", wait, replica.EnvOracleDSN)
	}
	var lines, matched int
	r.mu.Lock()
	for _, rp := range r.replicas {
		if rp.lines != nil {
			l, m := rp.lines.Counts()
			lines, matched = lines+l, matched+m
		}
	}
	r.mu.Unlock()
	if lines == 0 {
		return fmt.Sprintf("no leader work was reported: in %s the replica commands printed nothing; make the program log when it leads and works (and flush: PYTHONUNBUFFERED=1 for Python), see %s", wait, filepath.Join(r.dir, "replicas"))
	}
	return fmt.Sprintf("no leader work was reported: in %s the replica commands printed %d lines and %d matched a pattern, none of them starting work or leadership; check \"replica.log\" against their output in %s", wait, lines, matched, filepath.Join(r.dir, "replicas"))
}

// protocolInfo is the report's ProtocolInfo, nil for built-in replicas.
func (r *run) protocolInfo() *ProtocolInfo {
	c := r.sc.Replica
	if c == nil {
		return nil
	}
	p := &ProtocolInfo{Mode: c.Mode(), Note: noteSQL}
	if p.Mode == replica.ModeLog {
		p.Note = noteLog
	}
	var lags []time.Duration
	r.mu.Lock()
	for _, rp := range r.replicas {
		if rp.ended() && rp.leftBehind {
			p.LeftBehind = append(p.LeftBehind, rp.id)
		}
		if rp.lines != nil {
			l, m := rp.lines.Counts()
			p.Lines, p.Matched = p.Lines+l, p.Matched+m
			lags = append(lags, rp.lines.ReceiptLags()...)
		}
	}
	r.mu.Unlock()
	if len(lags) > 0 {
		slices.Sort(lags)
		p.ReceiptLagMedian = oracle.Duration(lags[len(lags)/2])
		p.ReceiptLagMax = oracle.Duration(lags[len(lags)-1])
	}
	return p
}
