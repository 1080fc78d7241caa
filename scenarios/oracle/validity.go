package oracle

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The validity of a run: whether it could have shown a double-run at all,
// or, judged by its stale writes alone, a stale write. A run with one
// contender left, a fault that never reached its target, traffic that
// bypassed the harness's proxies, too little work on one side of the
// fault or, for a run judged by its stale writes, no newer term granted
// after the fault measured nothing it was meant to, whatever its windows
// say. Like Jepsen's `:valid? :unknown` and etcd's robustness
// tests, which refuse to judge a run below a minimal rate, the verdict of
// such a run is INCONCLUSIVE (package scenarios). Every condition is
// computed from the history alone, so `doublerun check` recomputes it.

// The names of the validity conditions, in the order a report lists them.
const (
	ConditionContention = "contention"
	ConditionStruck     = "fault struck"
	ConditionPath       = "traffic path"
	ConditionWork       = "enough work"
	ConditionNewerTerm  = "newer term"
	ConditionLostGrant  = "grant lost"
)

// MinPieces is the floor of the work condition: pieces of leader work
// begun before the fault, and as many after it (before and after the
// middle of a run without one). A double-run across a fault needs a piece
// on each side of it to overlap; the piece a fault strikes and the one
// before it show a leader in its steady cycle rather than one just
// elected, and two after it show work resumed and going on. A run at the
// default poll interval (100ms) and work (200ms) begins about three pieces
// a second, so a 5s run has some fifteen: two on a side is a floor a
// healthy run clears several times over even on a loaded machine, and
// one it misses only when it did not contend.
const MinPieces = 2

// MinPiecesUnfaulted is the floor in each half of a run without a fault:
// nothing interrupts its work, so a double-run may come anywhere in it,
// and a piece in each half shows that the run held work over its span.
// A 2s run of a fenced lease through a transaction pool began only four
// pieces on a loaded machine, one in its second half.
const MinPiecesUnfaulted = 1

// Validity is whether a run could have shown a double-run: every
// condition must hold.
type Validity struct {
	Valid      bool        `json:"valid"`
	Conditions []Condition `json:"conditions"`
}

// Condition is one validity condition: what was measured (Figure) and,
// when it does not hold, one line naming what failed and the fix.
type Condition struct {
	Name   string `json:"name"`
	Holds  bool   `json:"holds"`
	Figure string `json:"figure"`
	Reason string `json:"reason,omitempty"`
}

// Failed is the first condition that does not hold, if any.
func (v Validity) Failed() (Condition, bool) {
	for _, c := range v.Conditions {
		if !c.Holds {
			return c, true
		}
	}
	return Condition{}, false
}

// Backend is a server connection of a replica command, as the runner's
// lock watcher saw it in pg_stat_activity by its application_name, with
// the path it arrived by.
type Backend struct {
	At      time.Time `json:"at"`
	Replica string    `json:"replica"`
	PID     int32     `json:"pid"`
	// Client is the backend's client address and port as Postgres sees
	// them.
	Client string `json:"client"`
	// Via is how it arrived: ViaProxy, ViaPgBouncer, ViaUnverified, or
	// ViaOther when it came around the harness's path.
	Via string `json:"via"`
}

// The paths a Backend may arrive by.
const (
	// ViaProxy: its client is a socket of the runner's own proxies.
	ViaProxy = "proxy"
	// ViaPgBouncer: it is a server connection of one of the run's
	// bouncers (SHOW SERVERS).
	ViaPgBouncer = "pgbouncer"
	// ViaUnverified: its client is not on this host's loopback (a
	// container's port proxy stands in front of Postgres, as on Docker
	// Desktop; a Linux engine's docker stack shares the host's network),
	// so no socket of this host can be matched to it.
	ViaUnverified = "unverified"
	// ViaOther: its client is a socket on this host that is neither.
	ViaOther = "other"
)

// validity computes the conditions of h.
func validity(h History, opts Options) Validity {
	f := faultOf(h)
	conds := []Condition{contention(h, opts, f), struck(h, opts, f), path(h, opts), enoughWork(h, f), newerTerm(h, opts, f)}
	if opts.Regression {
		// Only then, so that every other report keeps its conditions.
		conds = append(conds, lostGrant(h))
	}
	v := Validity{Valid: true, Conditions: conds}
	for _, c := range conds {
		v.Valid = v.Valid && c.Holds
	}
	return v
}

// lives is each replica's start and, if it died, its death, from the
// events: a replica is alive from its start to its first death.
type life struct{ start, death time.Time }

func lives(h History) (ids []string, by map[string]life) {
	by = map[string]life{}
	for _, e := range h.Events {
		l, seen := by[e.Replica]
		if e.Kind == EventReplicaStarted && !seen {
			ids = append(ids, e.Replica)
			by[e.Replica] = life{start: e.At}
		} else if (e.Kind == EventReplicaKilled || e.Kind == EventReplicaStopped) && seen && l.death.IsZero() {
			l.death = e.At
			by[e.Replica] = l
		}
	}
	return ids, by
}

func (l life) aliveAt(t time.Time) bool {
	return !l.start.After(t) && (l.death.IsZero() || l.death.After(t))
}

// contention: two replicas alive when the fault begins and one besides
// its target alive until it healed plus a TTL (the time a lease the fault
// left behind takes to expire), or two alive over the whole run without
// a fault. A replica that exits leaves no one to contend.
func contention(h History, opts Options, f faultSpan) Condition {
	c := Condition{Name: ConditionContention}
	ids, by := lives(h)
	// Without a fault, from a TTL into the run (half of it at most): the
	// replicas start together, but each logs its start once its lease is
	// built, which may come after the first piece of work began the
	// measurement; one that asks for the lease by then contends for every
	// lease granted after, and the TTL is as long as a lease lasts.
	from, to := h.Start.Add(min(opts.TTL, h.End.Sub(h.Start)/2)), h.End
	span := fmt.Sprintf("over the run (%s to its end)", rel(h, from))
	if !f.none() {
		from, to = f.at, f.heal.Add(opts.TTL)
		if to.After(h.End) {
			to = h.End
		}
		span = fmt.Sprintf("from the fault to its heal plus the TTL (%s to %s)", rel(h, from), rel(h, to))
	}
	// The fault's target may die of it (KILL_LEADER, GRACEFUL_HANDOVER):
	// it contended up to the fault.
	var through []string
	for _, id := range ids {
		l := by[id]
		if l.aliveAt(from) && (l.aliveAt(to) || !f.none() && id == f.target) {
			through = append(through, id)
		}
	}
	alive := len(through)
	c.Figure = fmt.Sprintf("%d of %d replicas alive %s", alive, len(ids), span)
	c.Holds = alive >= 2
	if c.Holds {
		return c
	}
	var dead []string
	for _, id := range ids {
		if !slices.Contains(through, id) {
			if l := by[id]; l.start.After(from) {
				dead = append(dead, fmt.Sprintf("%s started only at %s", id, rel(h, l.start)))
			} else {
				dead = append(dead, fmt.Sprintf("%s %s at %s", id, deathWord(h, id), rel(h, l.death)))
			}
		}
	}
	if len(ids) < 2 {
		c.Reason = fmt.Sprintf("only %d replica ran, and a double-run needs two contending for the lease; run 2 or more replicas", len(ids))
	} else {
		c.Reason = fmt.Sprintf("only %d replica left contending %s (%s); see the replica's exit in the events and its log, and fix why it stopped", alive, span, strings.Join(dead, ", "))
	}
	return c
}

func deathWord(h History, id string) string {
	for _, e := range h.Events {
		if e.Replica == id && (e.Kind == EventReplicaKilled || e.Kind == EventReplicaStopped) {
			if e.Detail == "" {
				return e.Kind
			}
			return e.Kind + " (" + e.Detail + ")"
		}
	}
	return "not started"
}

func rel(h History, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := t.Sub(h.Start).Round(time.Millisecond)
	if d < 0 {
		// Before the measurement began: a replica that died at its start.
		return d.String()
	}
	return "+" + d.String()
}

// path: every backend of a replica arrived through its proxy or a bouncer
// of the run. A command may dial its own database URL, which no fault
// reaches; a built-in replica dials what the runner gives it, and the
// runner checks that it did as it checks a command's. Only a report
// written before the runner watched built-in replicas' backends
// (History.PathWatched) keeps its old figure, so that `doublerun check`
// still agrees with it.
func path(h History, opts Options) Condition {
	c := Condition{Name: ConditionPath}
	if !opts.Commands && !h.PathWatched {
		c.Holds, c.Figure = true, "built-in replicas dial the proxies the runner gives them"
		return c
	}
	ids, _ := lives(h)
	by := map[string][]Backend{}
	unverified := 0
	for _, b := range h.Backends {
		by[b.Replica] = append(by[b.Replica], b)
		if b.Via == ViaUnverified {
			unverified++
		}
	}
	for _, id := range ids {
		var other []Backend
		for _, b := range by[id] {
			if b.Via == ViaOther {
				other = append(other, b)
			}
		}
		if len(other) > 0 {
			var pids, clients []string
			for _, b := range other {
				if b.PID != 0 {
					pids = append(pids, fmt.Sprint(b.PID))
				}
				if !slices.Contains(clients, b.Client) {
					clients = append(clients, b.Client)
				}
			}
			c.Figure = fmt.Sprintf("%d of %s's %d connections around its proxy", len(other), id, len(by[id]))
			if len(pids) > 0 {
				c.Reason = fmt.Sprintf("%s's backends %s connect from %s, not through its proxy: connect with `DOUBLERUN_LEASE_DSN`",
					id, andList(pids), strings.Join(clients, ", "))
			} else {
				c.Reason = fmt.Sprintf("%s's connections from %s reach PgBouncer, not through its proxy: connect with `DOUBLERUN_LEASE_DSN`",
					id, strings.Join(clients, ", "))
			}
			return c
		}
	}
	// Only then the replicas never seen: one that dials around its proxy
	// is the likelier cause, and its line names the backends.
	for _, id := range ids {
		if len(by[id]) == 0 {
			c.Figure = fmt.Sprintf("no backend of %s seen", id)
			c.Reason = fmt.Sprintf("%s's backends never showed its application_name in pg_stat_activity, so no fault is known to reach them: connect with `DOUBLERUN_LEASE_DSN` (it sets application_name)", id)
			return c
		}
	}
	c.Holds = true
	c.Figure = fmt.Sprintf("%d connections of %d replicas, all through their proxies or the run's bouncers", len(h.Backends), len(ids))
	if unverified > 0 {
		c.Figure += fmt.Sprintf(" (%d seen through a container's port proxy, where no socket of this host matches them)", unverified)
	}
	return c
}

func andList(xs []string) string {
	if len(xs) <= 1 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// enoughWork: MinPieces begun before the fault and MinPieces after it,
// or MinPiecesUnfaulted in each half of a run without one.
func enoughWork(h History, f faultSpan) Condition {
	c := Condition{Name: ConditionWork}
	split, side, floor := f.at, "the fault", MinPieces
	if f.none() {
		split, side, floor = h.Start.Add(h.End.Sub(h.Start)/2), "the middle of the run", MinPiecesUnfaulted
	}
	var before, after int
	for _, iv := range h.Intervals {
		if iv.Start.Before(split) {
			before++
		} else if !iv.Start.After(h.End) {
			after++
		}
	}
	c.Figure = fmt.Sprintf("%d pieces of leader work before %s, %d after", before, side, after)
	c.Holds = before >= floor && after >= floor
	if !c.Holds {
		c.Reason = fmt.Sprintf("%d pieces of leader work before %s and %d after, under the floor of %d on each side: the run was too short or too quiet to hold work across it; lengthen \"duration\", or shorten \"poll_interval\" or \"work\"",
			before, side, after, floor)
	}
	return c
}

// newerTerm: a run judged by its stale writes alone (Options.StaleWritesOnly,
// the expectation fenced) fails only on an accepted write made under a
// term older than one granted before it (staleWrites). A fault held to
// outlast the lease (Options.FaultHold: FREEZE_LEADER, PARTITION_LEADER,
// DELAY_LEADER, PGBOUNCER_PAUSE) is there to let another replica take
// the lease while the old holder still has a write to make, so such a
// run could have failed only if a term newer than every one granted
// before the fault was granted after it began. Without one the lease
// outlasted the fault (River's 15s against the matrix's 3s), its holder
// stayed the only one, and every write was current. Replicas that report
// no tokens (every grant's token 0) cannot say which term is newer: a
// piece of work begun after the fault by a replica other than its target
// stands in for the newer grant.
//
// A fault that acts once (a kill, a restart) is not held to outlast the
// lease: whether the lease moves across it is up to the run (a Postgres
// restart shorter than the TTL leaves it with its holder), and the
// table's fenced there allows either outcome (finding 4 in
// chaos/FINDINGS.md). Such a run without a newer term could not have
// failed either, but the fix would be a restart held past the TTL, not
// a verdict the default matrix's fenced/transaction/POSTGRES_RESTART
// would get in every run whose restart is quick; it holds the condition,
// and so does a run judged by its double-run too.
func newerTerm(h History, opts Options, f faultSpan) Condition {
	c := Condition{Name: ConditionNewerTerm, Holds: true}
	if !opts.StaleWritesOnly {
		c.Figure = "judged by its double-run too, not by stale writes alone"
		return c
	}
	if f.none() || opts.FaultHold <= 0 {
		c.Figure = "no fault held to outlast the lease"
		return c
	}
	began := fmt.Sprintf("%s began at %s (leader %s)", f.name, rel(h, f.at), f.target)
	var newest int64
	for _, g := range h.Grants {
		if g.At.Before(f.at) {
			newest = max(newest, g.Token)
		}
	}
	tokens := slices.ContainsFunc(h.Grants, func(g Grant) bool { return g.Token != 0 })
	for _, g := range h.Grants {
		if tokens && !g.At.Before(f.at) && g.Token > newest {
			c.Figure = fmt.Sprintf("%s was granted token %d at %s, newer than token %d, the newest before %s", g.Replica, g.Token, rel(h, g.At), newest, began)
			return c
		}
	}
	for _, iv := range h.Intervals {
		if !tokens && !iv.Start.Before(f.at) && iv.Replica != f.target {
			c.Figure = fmt.Sprintf("%s led at %s, after %s; the replicas report no tokens", iv.Replica, rel(h, iv.Start), began)
			return c
		}
	}
	who := fmt.Sprintf("was granted a term newer than token %d", newest)
	if !tokens {
		who = "other than " + f.target + " led"
	}
	c.Holds, c.Figure = false, "no newer term after the fault"
	c.Reason = fmt.Sprintf("no replica %s after %s, held for %s: the lease outlasted the fault, so no write could be stale; hold the fault longer than the lease's own TTL (set the scenario's \"ttl\" to it: the fault holds a TTL and a half)",
		who, began, opts.FaultHold)
	return c
}
