package oracle

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// faultSpan is the fault of a run as its events show it: when it began
// (the runner's fault event), when it healed, and the replica it struck.
type faultSpan struct {
	name     string
	at, heal time.Time
	target   string
}

func (f faultSpan) none() bool { return f.name == "" }

func faultOf(h History) faultSpan {
	var f faultSpan
	// If and else rather than a switch: gremlins v0.6.0 never counts a
	// case's condition as covered.
	for _, e := range h.Events {
		if e.Kind == EventFault && f.name == "" {
			f.name, f.at, f.target = e.Detail, e.At, e.Replica
		} else if e.Kind == EventHealed && f.name != "" && f.heal.IsZero() {
			f.heal = e.At
		} else if f.name != "" && f.heal.IsZero() && e.Replica != "" && (e.Kind == EventInjected || e.Kind == EventReplicaKilled || e.Kind == EventChaos) {
			// The fault's own events name the replica it struck, which
			// may have become leader since the fault event.
			f.target = e.Replica
		}
	}
	if f.name != "" && f.heal.IsZero() {
		f.heal = h.End
	}
	return f
}

// struck: the evidence, by fault family, that the fault reached what it
// acts on. A run without a fault holds it trivially.
func struck(h History, opts Options, f faultSpan) Condition {
	c := Condition{Name: ConditionStruck}
	if f.none() {
		c.Holds, c.Figure = true, "no fault"
		return c
	}
	chaos := func(replica, prefix string) (Event, bool) {
		for _, e := range h.Events {
			if e.Kind == EventChaos && !e.At.Before(f.at) && (replica == "" || e.Replica == replica) && strings.HasPrefix(e.Detail, prefix) {
				return e, true
			}
		}
		return Event{}, false
	}
	chaosHas := func(substr string) bool {
		return slices.ContainsFunc(h.Events, func(e Event) bool {
			return e.Kind == EventChaos && !e.At.Before(f.at) && strings.Contains(e.Detail, substr)
		})
	}
	working := func(id string, at time.Time) bool {
		return slices.ContainsFunc(h.Intervals, func(iv Interval) bool {
			return iv.Replica == id && !iv.Start.After(at) && !iv.End.Before(at)
		})
	}
	event := func(kind, id string) (Event, bool) {
		for _, e := range h.Events {
			if e.Kind == kind && e.Replica == id && !e.At.Before(f.at) {
				return e, true
			}
		}
		return Event{}, false
	}
	l := f.target
	switch f.name {
	case "KILL_LEADER":
		k, ok := event(EventReplicaKilled, l)
		switch {
		case !ok:
			c.Reason = fmt.Sprintf("KILL_LEADER killed no replica: the leader %q was never killed", l)
		case !working(l, k.At):
			c.Reason = fmt.Sprintf("KILL_LEADER killed %s at %s while it did no leader work: it was not leading", l, rel(h, k.At))
		default:
			c.Holds, c.Figure = true, fmt.Sprintf("SIGKILL to leader %s at %s, mid-work", l, rel(h, k.At))
		}
	case "FREEZE_LEADER":
		stop, ok := chaos(l, "SIGSTOP")
		switch {
		case !ok:
			c.Reason = fmt.Sprintf("FREEZE_LEADER froze no replica: no SIGSTOP of the leader %q", l)
		case chaosHas("without waiting"):
			c.Reason = fmt.Sprintf("FREEZE_LEADER froze %s without waiting for a piece of work: it was not working, so it had no write to make late; give the replicas steady work (poll interval below the TTL)", l)
		case !working(l, stop.At):
			c.Reason = fmt.Sprintf("FREEZE_LEADER froze %s at %s while it did no leader work: it was not leading", l, rel(h, stop.At))
		default:
			c.Holds, c.Figure = true, fmt.Sprintf("SIGSTOP to leader %s at %s, mid-work", l, rel(h, stop.At))
		}
	case "TERMINATE_LEADER_BACKEND":
		if e, ok := chaos(l, "backend "); ok && strings.Contains(e.Detail, " terminated") {
			c.Holds, c.Figure = true, fmt.Sprintf("%s of leader %s at %s", e.Detail, l, rel(h, e.At))
		} else {
			c.Reason = fmt.Sprintf("TERMINATE_LEADER_BACKEND ended no backend of the leader %q: its lease had no backend to end; make the lease call doublerun.work_begin with its backend_pid, or connect with DOUBLERUN_LEASE_DSN so its backends carry its application_name", l)
		}
	case "PARTITION_LEADER", "DELAY_LEADER":
		label := map[string]string{"PARTITION_LEADER": "partition", "DELAY_LEADER": "delay"}[f.name]
		on, okOn := chaos(l, label+" map[") // "partition map[timeout:0] on 2 proxies, for 3s"
		off, okOff := chaos(l, label+" removed")
		if !okOn || !okOff {
			c.Reason = fmt.Sprintf("%s put no toxic on the leader %q's proxies", f.name, l)
			break
		}
		before := slices.ContainsFunc(h.Intervals, func(iv Interval) bool { return iv.Replica == l && iv.Start.Before(f.at) })
		stall := longestIdle(h.Intervals, l, on.At, off.At)
		if !before {
			c.Reason = fmt.Sprintf("%s struck %s, which did no leader work before it: its proxied connections carried no lease traffic", f.name, l)
		} else if stall <= opts.GapTolerance {
			c.Reason = fmt.Sprintf("%s on %s's proxies never stalled its work (longest pause %s, tolerance %s): its lease calls do not go through DOUBLERUN_LEASE_DSN; connect with it", f.name, l, stall.Round(time.Millisecond), opts.GapTolerance)
		} else {
			c.Holds, c.Figure = true, fmt.Sprintf("leader %s worked before it; its work stalled %s under the %s (%s to %s)", l, stall.Round(time.Millisecond), label, rel(h, on.At), rel(h, off.At))
		}
	case "PGBOUNCER_PAUSE":
		c.Holds = chaosHas("PAUSE ") && chaosHas("RESUME ")
		c.Figure, c.Reason = "PAUSE and RESUME on the bouncer", "PGBOUNCER_PAUSE logged no PAUSE and RESUME"
	case "PGBOUNCER_KILL":
		c.Holds = chaosHas("KILL ")
		c.Figure, c.Reason = "KILL on the bouncer, its pool reopened", "PGBOUNCER_KILL logged no KILL"
	case "PGBOUNCER_RECONNECT":
		c.Holds = chaosHas("RECONNECT ")
		c.Figure, c.Reason = "RECONNECT on the bouncer", "PGBOUNCER_RECONNECT logged no RECONNECT"
	case "PGBOUNCER_RESTART":
		c.Holds = chaosHas("stopped pgbouncer") && chaosHas("started pgbouncer")
		c.Figure, c.Reason = "the bouncer stopped and started again", "PGBOUNCER_RESTART did not both stop and start the bouncer"
	case "POSTGRES_RESTART":
		c.Holds = chaosHas("postgres restarted")
		c.Figure, c.Reason = "Postgres stopped and came back", "POSTGRES_RESTART never logged Postgres back up"
	case "GRACEFUL_HANDOVER":
		term, okTerm := event(EventInjected, l)
		exit, okExit := event(EventReplicaStopped, l)
		switch {
		case !okTerm:
			c.Reason = fmt.Sprintf("GRACEFUL_HANDOVER sent no SIGTERM to the leader %q", l)
		case !working(l, term.At):
			c.Reason = fmt.Sprintf("GRACEFUL_HANDOVER sent SIGTERM to %s while it did no leader work: it was not leading", l)
		case !okExit:
			c.Reason = fmt.Sprintf("GRACEFUL_HANDOVER's SIGTERM never made %s exit: it did not release", l)
		default:
			c.Holds, c.Figure = true, fmt.Sprintf("SIGTERM to leader %s at %s, mid-work; it released and exited at %s", l, rel(h, term.At), rel(h, exit.At))
		}
	case "PRIMARY_FAILOVER", "SWITCHOVER":
		// Caught by TestValidityStruck/failover and its failures.
		missing, shown := failoverMissing(chaosHas)
		c.Holds = missing == ""
		c.Figure, c.Reason = shown, f.name+" never logged "+missing
	case "PRIMARY_FAILOVER_LOSSY":
		stop, ok := chaos(l, "SIGSTOP")
		switch {
		case !chaosHas(" detached"):
			c.Reason = "PRIMARY_FAILOVER_LOSSY never detached the standby: nothing was lost on purpose"
		case !ok || !working(l, stop.At):
			c.Reason = fmt.Sprintf("PRIMARY_FAILOVER_LOSSY froze no leader mid-work: no SIGSTOP of %q while it worked, so no grant was made on the primary alone", l)
		case lossyMissing(chaosHas) != "":
			c.Reason = "PRIMARY_FAILOVER_LOSSY never logged " + lossyMissing(chaosHas)
		default:
			c.Holds, c.Figure = true, fmt.Sprintf("standby detached, leader %s frozen mid-work at %s, the standby promoted", l, rel(h, stop.At))
		}
	default:
		c.Reason = fmt.Sprintf("fault %s has no evidence this doublerun knows of", f.name)
	}
	if c.Holds {
		c.Reason = ""
	} else {
		c.Figure = "not shown"
	}
	return c
}

// longestIdle is the longest stretch in [from, to] during which replica
// began no piece of work.
func longestIdle(ivs []Interval, replica string, from, to time.Time) time.Duration {
	last, longest := from, time.Duration(0)
	for _, iv := range ivs {
		if iv.Replica != replica || iv.Start.Before(from) || iv.Start.After(to) {
			continue
		}
		longest = max(longest, iv.Start.Sub(last))
		last = iv.Start
	}
	return max(longest, to.Sub(last))
}
