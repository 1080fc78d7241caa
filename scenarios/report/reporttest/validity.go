package reporttest

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// validity recomputes whether each validity condition holds, from the
// definitions in package oracle's documentation (validity.go): two
// replicas contending through the fault and a TTL after its heal, the
// fault's own evidence that it struck, every replica command's
// connections through its proxy or a bouncer, and two pieces of work on
// each side of the fault (of the middle of a run without one), and, for a
// run judged by its stale writes alone under a fault held to outlast the
// lease, a newer term granted after the fault began; for a run that
// expects a token regression, a sixth: its failover lost a grant. The
// conditions' figures and reasons are the oracle's words, not figures;
// only whether each holds is recomputed.
func validity(f file, got figures) bool {
	h := f.History
	ttl := time.Duration(f.Scenario.TTL)
	var fault, target string
	var at, heal time.Time
	for _, e := range h.Events {
		switch {
		case e.Kind == "fault" && fault == "":
			fault, at, target = e.Detail, e.At, e.Replica
		case fault != "" && heal.IsZero() && e.Kind == "healed":
			heal = e.At
		case fault != "" && heal.IsZero() && e.Replica != "" && (e.Kind == "injected" || e.Kind == "replica-killed" || e.Kind == "chaos"):
			target = e.Replica
		}
	}
	if fault != "" && heal.IsZero() {
		heal = h.End
	}
	// Alive from the first start to the first death.
	started, died := map[string]time.Time{}, map[string]time.Time{}
	var ids []string
	for _, e := range h.Events {
		if _, ok := started[e.Replica]; e.Kind == "replica-started" && !ok {
			started[e.Replica] = e.At
			ids = append(ids, e.Replica)
		}
		if _, ok := died[e.Replica]; (e.Kind == "replica-killed" || e.Kind == "replica-stopped") && !ok && !started[e.Replica].IsZero() {
			died[e.Replica] = e.At
		}
	}
	alive := func(id string, t time.Time) bool {
		d, dead := died[id]
		return !started[id].After(t) && (!dead || d.After(t))
	}
	// Without a fault, from a TTL into the run, or its middle if sooner.
	from, to := h.Start.Add(min(ttl, h.End.Sub(h.Start)/2)), h.End
	if fault != "" {
		from, to = at, heal.Add(ttl)
		if to.After(h.End) {
			to = h.End
		}
	}
	contenders := 0
	for _, id := range ids {
		if alive(id, from) && (alive(id, to) || fault != "" && id == target) {
			contenders++
		}
	}
	conds := []bool{contenders >= 2, struck(f, fault, target, at), pathHolds(f, ids), workHolds(f, fault, at), newerTermHolds(f, fault, target, at)}
	if f.Scenario.Expect == "regresses" {
		conds = append(conds, grantLostHolds(h))
	}
	valid := true
	for i, ok := range conds {
		got["metrics.validity.conditions["+strconv.Itoa(i)+"].holds"] = strconv.FormatBool(ok)
		valid = valid && ok
	}
	got["metrics.validity.valid"] = strconv.FormatBool(valid)
	return valid
}

func struck(f file, fault, target string, at time.Time) bool {
	h := f.History
	after := func(kind, replica, has string) (time.Time, bool) {
		for _, e := range h.Events {
			if e.Kind == kind && !e.At.Before(at) && (replica == "" || e.Replica == replica) && strings.Contains(e.Detail, has) {
				return e.At, true
			}
		}
		return time.Time{}, false
	}
	leading := func(t time.Time) bool {
		for _, iv := range h.Intervals {
			if iv.Replica == target && !iv.Start.After(t) && !iv.End.Before(t) {
				return true
			}
		}
		return false
	}
	switch fault {
	case "", "none":
		return true
	case "KILL_LEADER":
		t, ok := after("replica-killed", target, "")
		return ok && leading(t)
	case "FREEZE_LEADER":
		t, ok := after("chaos", target, "SIGSTOP")
		_, late := after("chaos", "", "without waiting")
		return ok && !late && leading(t)
	case "TERMINATE_LEADER_BACKEND":
		_, ok := after("chaos", target, " terminated")
		return ok
	case "PARTITION_LEADER", "DELAY_LEADER":
		label := map[string]string{"PARTITION_LEADER": "partition ", "DELAY_LEADER": "delay "}[fault]
		on, ok1 := after("chaos", target, label+"map[")
		off, ok2 := after("chaos", target, label+"removed")
		if !ok1 || !ok2 {
			return false
		}
		var starts []time.Time
		worked := false
		for _, iv := range h.Intervals {
			if iv.Replica != target {
				continue
			}
			worked = worked || iv.Start.Before(at)
			if !iv.Start.Before(on) && !iv.Start.After(off) {
				starts = append(starts, iv.Start)
			}
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		edges := append(append([]time.Time{on}, starts...), off)
		longest := time.Duration(0)
		for i := 1; i < len(edges); i++ {
			longest = max(longest, edges[i].Sub(edges[i-1]))
		}
		return worked && longest > msDuration(*f.GapTolerance)
	case "PGBOUNCER_PAUSE":
		_, a := after("chaos", "", "PAUSE ")
		_, b := after("chaos", "", "RESUME ")
		return a && b
	case "PGBOUNCER_KILL", "PGBOUNCER_RECONNECT":
		_, ok := after("chaos", "", strings.TrimPrefix(fault, "PGBOUNCER_")+" ")
		return ok
	case "PGBOUNCER_RESTART":
		_, a := after("chaos", "", "stopped pgbouncer")
		_, b := after("chaos", "", "started pgbouncer")
		return a && b
	case "POSTGRES_RESTART":
		_, ok := after("chaos", "", "postgres restarted")
		return ok
	case "PRIMARY_FAILOVER", "PRIMARY_FAILOVER_LOSSY", "SWITCHOVER":
		return failoverStruck(f, fault, target, at)
	case "GRACEFUL_HANDOVER":
		t, ok := after("injected", target, "")
		_, exited := after("replica-stopped", target, "")
		return ok && exited && leading(t)
	}
	return false
}

// pathHolds: every replica was seen, and never around its path; in a
// report written before the runner watched built-in replicas' backends,
// they held by construction.
func pathHolds(f file, ids []string) bool {
	if (len(f.Scenario.Replica) == 0 || string(f.Scenario.Replica) == "null") && !f.History.PathWatched {
		return true
	}
	seen := map[string]bool{}
	for _, b := range f.History.Backends {
		if b.Via == "other" {
			return false
		}
		seen[b.Replica] = true
	}
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}

func workHolds(f file, fault string, at time.Time) bool {
	h := f.History
	split, floor := at, 2
	if fault == "" {
		split, floor = h.Start.Add(h.End.Sub(h.Start)/2), 1
	}
	before, after := 0, 0
	for _, iv := range h.Intervals {
		switch {
		case iv.Start.Before(split):
			before++
		case !iv.Start.After(h.End):
			after++
		}
	}
	return before >= floor && after >= floor
}

// heldFaults are the faults the catalog holds for a TTL and a half, so
// that a lease with that TTL has certainly expired under them.
var heldFaults = map[string]bool{"FREEZE_LEADER": true, "PARTITION_LEADER": true, "DELAY_LEADER": true, "PGBOUNCER_PAUSE": true, "PRIMARY_FAILOVER_LOSSY": true}

// newerTermHolds: a fenced run under a held fault can show an accepted
// stale write only if some replica was granted, once the fault began, a
// token above every token granted before it; where every token is 0, only
// if a replica other than the struck leader worked once it began.
func newerTermHolds(f file, fault, target string, at time.Time) bool {
	if f.Scenario.Expect != "fenced" || fault == "" || !heldFaults[f.Scenario.Fault] {
		return true
	}
	h := f.History
	before, after, anyToken := int64(0), int64(-1), false
	for _, g := range h.Grants {
		anyToken = anyToken || g.Token != 0
		if g.At.Before(at) {
			before = max(before, g.Token)
		} else {
			after = max(after, g.Token)
		}
	}
	if anyToken {
		return after > before
	}
	for _, iv := range h.Intervals {
		if iv.Replica != target && !iv.Start.Before(at) {
			return true
		}
	}
	return false
}
