package oracle

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The orphaned-lock window. A session advisory lock lives on the Postgres
// backend that took it. Behind a transaction pool the unlock or the close
// of the holder may never reach that backend, and the lock then stays on a
// pooled server connection that no client owns: nobody can lead through it
// (a leaderless stretch) until a client that is handed that backend
// re-enters the lock (a second leader, #556). Two streams show it:
//
//   - the runner's samples of pg_locks (LockSample), taken through the
//     direct connection, with whether the bouncer linked a client to each
//     holding backend (SHOW SERVERS);
//   - each replica's claims (EventLockClaim): the backend its lease says
//     holds its lock, logged whenever that changes, 0 once it lets go.
//     A replica's death (EventReplicaKilled, EventReplicaStopped) ends its
//     claim too.
//
// A lock is held by backend P from the first sample that shows it there to
// the last of the consecutive samples that do, so a stretch is never
// longer than what was seen. Inside such a stretch the lock is orphaned
// at every instant after a replica first claimed P there at which no
// replica claims P. The time before the first claim is the acquire on its
// way to the replica's log, not an orphan.

// EventLockClaim is the event kind of a replica's claim on the lease's
// lock; see ClaimDetail.
const EventLockClaim = "lock-claim"

// LockSample is what the runner saw of the lease's advisory lock at one
// instant on the one clock: every backend that held it granted.
type LockSample struct {
	At   time.Time     `json:"at"`
	Held []LockHolding `json:"held,omitempty"`
}

// LockHolding is one backend holding the lock in a LockSample.
type LockHolding struct {
	PID int32 `json:"pid"`
	// ClientLinked says whether PgBouncer had a client linked to this
	// backend's server connection (SHOW SERVERS); nil where no bouncer
	// stands between the lease and Postgres, or the console did not answer.
	ClientLinked *bool `json:"client_linked,omitempty"`
}

// Orphan is one stretch during which the lock was held by a backend that
// no replica claimed, after one had.
type Orphan struct {
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	BackendPID int32     `json:"backend_pid"`
	// After is the replica whose claim on the backend ended last before
	// the stretch, and Cause how: "released" (its lease let go) or "died"
	// (it was killed or stopped).
	After string `json:"after"`
	Cause string `json:"cause"`
	// ClientLinkedFor is how much of the stretch the bouncer showed a
	// client linked to the backend's server connection, by the samples in
	// effect during it; nil when there is no bouncer to ask.
	ClientLinkedFor *Duration `json:"client_linked_ms,omitempty"`
	// ReenteredBy is the replica that ended the stretch by claiming the
	// orphaned backend: a re-entrant acquisition of a lock it never took.
	// Empty when the lock went away instead.
	ReenteredBy string `json:"reentered_by,omitempty"`
}

// Orphaned is the orphaned-lock window: the time during which some backend
// held the lease's lock after its holder had let go or died, and each
// stretch of it per backend.
type Orphaned struct {
	Window
	// Orphans are the stretches per backend; they may overlap in time,
	// the Window counts that time once.
	Orphans []Orphan `json:"orphans,omitempty"`
	// Reentries counts the stretches a replica ended by re-entering the
	// lock on the orphaned backend.
	Reentries int `json:"reentries"`
	// LeftHeld are the backends that still held the lock, claimed by no
	// replica, in the last sample, when that sample came after the
	// measured span (the runner takes it once every replica has stopped):
	// locks the run left behind on pooled server connections.
	LeftHeld []int32 `json:"left_held,omitempty"`
}

// ClaimDetail is the detail of an EventLockClaim: the backend the lease
// reports as holding its lock (0 when it holds none) and the lock's keys.
func ClaimDetail(pid int32, key1, key2 int32) string {
	return fmt.Sprintf("backend %d lock %d,%d", pid, key1, key2)
}

// ParseClaim reads a ClaimDetail.
func ParseClaim(detail string) (pid, key1, key2 int32, err error) {
	if _, err := fmt.Sscanf(detail, "backend %d lock %d,%d", &pid, &key1, &key2); err != nil {
		return 0, 0, 0, fmt.Errorf("oracle: lock claim %q: %w", detail, err)
	}
	return pid, key1, key2, nil
}

// claim is one replica's claim on one backend over [from, to).
type claim struct {
	replica  string
	pid      int32
	from, to time.Time
	cause    string // how it ended: "released" or "died"
}

// claims turns the events into spans of claims; a claim still standing at
// the end of the events lasts for ever.
func claims(events []Event) []claim {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b Event) int { return a.At.Compare(b.At) })
	open := map[string]*claim{}
	var out []claim
	end := func(replica string, at time.Time, cause string) {
		if c := open[replica]; c != nil {
			c.to, c.cause = at, cause
			out = append(out, *c)
			delete(open, replica)
		}
	}
	for _, e := range evs {
		switch e.Kind {
		case EventLockClaim:
			pid, _, _, err := ParseClaim(e.Detail)
			if err != nil {
				continue
			}
			if c := open[e.Replica]; c != nil && c.pid == pid {
				continue
			}
			end(e.Replica, e.At, "released")
			if pid != 0 {
				open[e.Replica] = &claim{replica: e.Replica, pid: pid, from: e.At}
			}
		case EventReplicaKilled, EventReplicaStopped:
			end(e.Replica, e.At, "died")
		}
	}
	for _, r := range slices.Sorted(maps.Keys(open)) {
		out = append(out, *open[r])
	}
	return out
}

// claimedAt reports the claim on pid that covers t, if any.
func claimedAt(cs []claim, pid int32, t time.Time) bool {
	for _, c := range cs {
		if c.pid == pid && !t.Before(c.from) && (c.to.IsZero() || t.Before(c.to)) {
			return true
		}
	}
	return false
}

// heldStretch is one maximal run of consecutive samples that show pid
// holding the lock, from the first of them (samples[i]) to the last
// (samples[j]).
type heldStretch struct {
	pid  int32
	i, j int
}

func heldStretches(samples []LockSample) []heldStretch {
	var out []heldStretch
	open := map[int32]int{}
	holds := func(s LockSample, pid int32) bool {
		return slices.ContainsFunc(s.Held, func(h LockHolding) bool { return h.PID == pid })
	}
	for k, s := range samples {
		for _, pid := range slices.Sorted(maps.Keys(open)) {
			if !holds(s, pid) {
				out = append(out, heldStretch{pid, open[pid], k - 1})
				delete(open, pid)
			}
		}
		for _, h := range s.Held {
			if _, ok := open[h.PID]; !ok {
				open[h.PID] = k
			}
		}
	}
	for _, pid := range slices.Sorted(maps.Keys(open)) {
		out = append(out, heldStretch{pid, open[pid], len(samples) - 1})
	}
	return out
}

// orphaned computes the orphaned-lock window of h, clipped to its span;
// stretches no longer than tolerance are left out.
func orphaned(h History, tolerance time.Duration) Orphaned {
	samples := slices.Clone(h.Locks)
	slices.SortStableFunc(samples, func(a, b LockSample) int { return a.At.Compare(b.At) })
	cs := claims(h.Events)
	var out Orphaned
	for _, st := range heldStretches(samples) {
		a, b := samples[st.i].At, samples[st.j].At
		// Every instant at which a claim on pid starts or ends inside the
		// stretch, in order: between two of them the claim state is one.
		cuts := []time.Time{a, b}
		for _, c := range cs {
			if c.pid != st.pid {
				continue
			}
			for _, t := range []time.Time{c.from, c.to} {
				if !t.IsZero() && t.After(a) && t.Before(b) {
					cuts = append(cuts, t)
				}
			}
		}
		slices.SortFunc(cuts, func(x, y time.Time) int { return x.Compare(y) })
		cuts = slices.CompactFunc(cuts, func(x, y time.Time) bool { return x.Equal(y) })
		claimedYet := false
		var cur *Orphan
		for k := 0; k+1 < len(cuts); k++ {
			from, to := cuts[k], cuts[k+1]
			if claimedAt(cs, st.pid, from) {
				if cur != nil {
					// A replica handed the orphaned backend re-entered the lock.
					// Caught by TestAnalyzeOrphaned/ReenteringTheOrphanedBackendEndsItAndIsLabelled.
					cur.End, cur.ReenteredBy = from, claimant(cs, st.pid, from)
					out.Orphans = append(out.Orphans, *cur)
					cur = nil
				}
				claimedYet = true
				continue
			}
			// Before the first claim in the stretch the lock is on its way
			// to a replica that has not logged it yet. Caught by
			// TestAnalyzeOrphaned/TheAcquireBeforeItsClaimIsNoOrphan.
			if !claimedYet {
				continue
			}
			if cur == nil {
				after, cause := lastClaim(cs, st.pid, from)
				cur = &Orphan{Start: from, BackendPID: st.pid, After: after, Cause: cause}
			}
			cur.End = to
		}
		if cur != nil {
			out.Orphans = append(out.Orphans, *cur)
		}
	}
	// Clip to the measured span, and say whether a client was linked.
	kept := out.Orphans[:0]
	for _, o := range out.Orphans {
		if !h.Start.IsZero() && o.Start.Before(h.Start) {
			o.Start = h.Start
		}
		if !h.End.IsZero() && o.End.After(h.End) {
			o.End, o.ReenteredBy = h.End, ""
		}
		// A lock outlives its holder's death by the moment the server
		// takes to notice a closed socket; that is no orphan. Caught by
		// TestAnalyzeOrphaned/AStretchWithinTheToleranceIsLeftOut.
		if !o.End.After(o.Start) || o.End.Sub(o.Start) <= tolerance {
			continue
		}
		o.ClientLinkedFor = linkedFor(samples, o)
		kept = append(kept, o)
	}
	out.Orphans = kept
	slices.SortStableFunc(out.Orphans, func(x, y Orphan) int {
		return cmp.Or(x.Start.Compare(y.Start), cmp.Compare(x.BackendPID, y.BackendPID))
	})
	for _, o := range out.Orphans {
		if o.ReenteredBy != "" {
			out.Reentries++
		}
	}
	out.Window = union(out.Orphans)
	if n := len(samples); n > 0 && !h.End.IsZero() && samples[n-1].At.After(h.End) {
		last := samples[n-1]
		for _, hl := range last.Held {
			if !claimedAt(cs, hl.PID, last.At) {
				out.LeftHeld = append(out.LeftHeld, hl.PID)
			}
		}
	}
	return out
}

// claimant is the replica whose claim on pid covers t.
func claimant(cs []claim, pid int32, t time.Time) string {
	for _, c := range cs {
		if c.pid == pid && !t.Before(c.from) && (c.to.IsZero() || t.Before(c.to)) {
			return c.replica
		}
	}
	return ""
}

// lastClaim is the replica whose claim on pid ended last at or before t,
// and how it ended.
func lastClaim(cs []claim, pid int32, t time.Time) (string, string) {
	var best *claim
	for k, c := range cs {
		if c.pid == pid && !c.to.IsZero() && !c.to.After(t) && (best == nil || c.to.After(best.to)) {
			best = &cs[k]
		}
	}
	if best == nil {
		return "", ""
	}
	return best.replica, best.cause
}

// linkedFor is how long, inside o, the samples in effect showed a client
// linked to its backend. A kept sample stands until the next one (the
// runner keeps every change and the sample before it); nil when none in
// effect could tell.
func linkedFor(samples []LockSample, o Orphan) *Duration {
	var out *Duration
	for k, s := range samples {
		from, to := s.At, o.End
		if k+1 < len(samples) {
			to = samples[k+1].At
		}
		from, to = later(from, o.Start), earlier(to, o.End)
		if !to.After(from) {
			continue
		}
		for _, h := range s.Held {
			if h.PID != o.BackendPID || h.ClientLinked == nil {
				continue
			}
			if out == nil {
				out = new(Duration)
			}
			if *h.ClientLinked {
				*out += Duration(to.Sub(from))
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// union is the window of the time covered by any of the orphans; orphans
// that touch make one episode.
func union(os []Orphan) Window {
	spans := make([]Span, len(os))
	for k, o := range os {
		spans[k] = Span{Start: o.Start, End: o.End}
	}
	slices.SortFunc(spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
	var w Window
	for k := 0; k < len(spans); {
		cur := spans[k]
		for k++; k < len(spans) && !spans[k].Start.After(cur.End); k++ {
			if spans[k].End.After(cur.End) {
				cur.End = spans[k].End
			}
		}
		w.add(cur.Start, cur.End)
	}
	return w
}
