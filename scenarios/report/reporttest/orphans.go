package reporttest

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"
)

// claim is a replica's claim on a backend from its lock-claim event until
// its next claim of another backend ("released") or its death ("died");
// to is zero for a claim still standing at the end.
type claim struct {
	replica, cause string
	pid            int32
	from, to       time.Time
}

// covers says whether c is the claim on pid at t.
func (c claim) covers(pid int32, t time.Time) bool {
	return c.pid == pid && !t.Before(c.from) && (c.to.IsZero() || t.Before(c.to))
}

// claimsOf reads the claims from the events, in time order (events at one
// instant in the order the file lists them). The list has closed claims
// in the order they closed, then the ones still standing by replica.
func claimsOf(h *history) []claim {
	type event struct {
		kind, replica, detail string
		at                    time.Time
	}
	var evs []event
	for _, e := range h.Events {
		evs = append(evs, event{e.Kind, e.Replica, e.Detail, e.At})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	standing := map[string]claim{}
	var out []claim
	stop := func(replica string, at time.Time, cause string) {
		if c, ok := standing[replica]; ok {
			c.to, c.cause = at, cause
			out = append(out, c)
			delete(standing, replica)
		}
	}
	for _, e := range evs {
		if e.kind == "replica-killed" || e.kind == "replica-stopped" {
			stop(e.replica, e.at, "died")
			continue
		}
		if e.kind != "lock-claim" {
			continue
		}
		var pid, k1, k2 int32
		if _, err := fmt.Sscanf(e.detail, "backend %d lock %d,%d", &pid, &k1, &k2); err != nil {
			continue
		}
		if c, ok := standing[e.replica]; ok && c.pid == pid {
			continue
		}
		stop(e.replica, e.at, "released")
		if pid != 0 {
			standing[e.replica] = claim{replica: e.replica, pid: pid, from: e.at}
		}
	}
	var names []string
	for r := range standing {
		names = append(names, r)
	}
	slices.Sort(names)
	for _, r := range names {
		out = append(out, standing[r])
	}
	return out
}

type orphan struct {
	pid                       int32
	from, to                  time.Time
	after, cause, reenteredBy string
	linked                    *time.Duration
}

// orphanedFigures: a backend holds the lock from the first of a run of
// consecutive samples showing it to the last of them. Cut that stretch at
// every claim on the backend that starts or ends inside it: a cut no
// replica claims is orphaned once some replica has claimed the backend in
// the stretch; a claimed cut after orphaned ones ends them, re-entered by
// its claimant. Orphans are clipped to the measured span and kept when
// longer than the tolerance.
func orphanedFigures(h *history, tolerance time.Duration, got figures) {
	type sample struct {
		at   time.Time
		held map[int32]*bool
	}
	var samples []sample
	for _, s := range h.Locks {
		held := map[int32]*bool{}
		for _, x := range s.Held {
			held[x.PID] = x.ClientLinked
		}
		samples = append(samples, sample{s.At, held})
	}
	sort.SliceStable(samples, func(i, j int) bool { return samples[i].at.Before(samples[j].at) })
	claims := claimsOf(h)
	claimant := func(pid int32, t time.Time) string {
		for _, c := range claims {
			if c.covers(pid, t) {
				return c.replica
			}
		}
		return ""
	}

	pids := map[int32]bool{}
	for _, s := range samples {
		for p := range s.held {
			pids[p] = true
		}
	}
	var orphans []orphan
	for pid := range pids {
		for i := 0; i < len(samples); i++ {
			if _, ok := samples[i].held[pid]; !ok {
				continue
			}
			j := i
			for j+1 < len(samples) {
				if _, ok := samples[j+1].held[pid]; !ok {
					break
				}
				j++
			}
			a, b := samples[i].at, samples[j].at
			cuts := []time.Time{a, b}
			for _, c := range claims {
				for _, t := range []time.Time{c.from, c.to} {
					if c.pid == pid && t.After(a) && t.Before(b) {
						cuts = append(cuts, t)
					}
				}
			}
			sort.Slice(cuts, func(x, y int) bool { return cuts[x].Before(cuts[y]) })
			cuts = slices.CompactFunc(cuts, func(x, y time.Time) bool { return x.Equal(y) })
			seen := false
			var cur *orphan
			for k := 0; k+1 < len(cuts); k++ {
				if who := claimant(pid, cuts[k]); who != "" {
					if cur != nil {
						cur.to, cur.reenteredBy = cuts[k], who
						orphans = append(orphans, *cur)
						cur = nil
					}
					seen = true
					continue
				}
				if !seen {
					continue
				}
				if cur == nil {
					cur = &orphan{pid: pid, from: cuts[k]}
					// The claim on the backend that ended last, at or
					// before the orphan began.
					var last *claim
					for n, c := range claims {
						if c.pid == pid && !c.to.IsZero() && !c.to.After(cuts[k]) && (last == nil || c.to.After(last.to)) {
							last = &claims[n]
						}
					}
					if last != nil {
						cur.after, cur.cause = last.replica, last.cause
					}
				}
				cur.to = cuts[k+1]
			}
			if cur != nil {
				orphans = append(orphans, *cur)
			}
			i = j
		}
	}

	var kept []orphan
	for _, o := range orphans {
		if !h.Start.IsZero() && o.from.Before(h.Start) {
			o.from = h.Start
		}
		if !h.End.IsZero() && o.to.After(h.End) {
			o.to, o.reenteredBy = h.End, ""
		}
		if !o.to.After(o.from) || o.to.Sub(o.from) <= tolerance {
			continue
		}
		// Each sample stands until the next one, the last one until the
		// orphan ends.
		for k, s := range samples {
			linked, ok := s.held[o.pid]
			if !ok || linked == nil {
				continue
			}
			from, to := s.at, o.to
			if k+1 < len(samples) {
				to = samples[k+1].at
			}
			if from.Before(o.from) {
				from = o.from
			}
			if to.After(o.to) {
				to = o.to
			}
			if !to.After(from) {
				continue
			}
			if o.linked == nil {
				o.linked = new(time.Duration)
			}
			if *linked {
				*o.linked += to.Sub(from)
			}
		}
		kept = append(kept, o)
	}
	sort.SliceStable(kept, func(i, j int) bool {
		if !kept[i].from.Equal(kept[j].from) {
			return kept[i].from.Before(kept[j].from)
		}
		return kept[i].pid < kept[j].pid
	})
	reentries := 0
	var spans []span
	for n, o := range kept {
		p := fmt.Sprintf("metrics.orphaned.orphans[%d].", n)
		got[p+"start"], got[p+"end"] = stamp(o.from), stamp(o.to)
		got[p+"backend_pid"] = strconv.Itoa(int(o.pid))
		got[p+"after"], got[p+"cause"] = o.after, o.cause
		if o.linked != nil {
			got[p+"client_linked_ms"] = ms(*o.linked)
		}
		if o.reenteredBy != "" {
			got[p+"reentered_by"] = o.reenteredBy
			reentries++
		}
		// Orphans of different backends may overlap; the window counts
		// their time once.
		if n := len(spans); n > 0 && !o.from.After(spans[n-1].to) {
			if o.to.After(spans[n-1].to) {
				spans[n-1].to = o.to
			}
			continue
		}
		spans = append(spans, span{o.from, o.to})
	}
	got.window("metrics.orphaned", spans)
	got["metrics.orphaned.reentries"] = strconv.Itoa(reentries)
	if n := len(samples); n > 0 && !h.End.IsZero() && samples[n-1].at.After(h.End) {
		// Held in the last sample, taken after the span, and claimed by no
		// replica then.
		last, k := samples[n-1].at, 0
		for _, pid := range lastHeld(h, last) {
			if claimant(pid, last) == "" {
				got[fmt.Sprintf("metrics.orphaned.left_held[%d]", k)] = strconv.Itoa(int(pid))
				k++
			}
		}
	}
}

// lastHeld is the backends of the last sample, in the order the file
// lists them.
func lastHeld(h *history, at time.Time) []int32 {
	var out []int32
	for _, s := range h.Locks {
		if s.At.Equal(at) {
			out = out[:0]
			for _, x := range s.Held {
				out = append(out, x.PID)
			}
		}
	}
	return out
}
