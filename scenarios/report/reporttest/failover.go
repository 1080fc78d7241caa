package reporttest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// What a primary failover cost, and whether a failover fault struck, from
// the definitions in package oracle's documentation ("Across a primary
// failover", loss.go, validity_failover.go, validity_loss.go). Only a
// history read back from the pair after a failover (history.survivors)
// has a loss.

// acked is a grant as a replica acknowledged it (history.grants).
type acked struct {
	replica string
	token   int64
	at      time.Time
}

// acknowledged is the grants in the order the oracle learnt of them; at
// one instant the lower token first, then the replica's name.
func acknowledged(h *history) []acked {
	var out []acked
	for _, g := range h.Grants {
		out = append(out, acked{g.Replica, g.Token, g.At})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		if a.token != b.token {
			return a.token < b.token
		}
		return a.replica < b.replica
	})
	return out
}

// failoverLoss puts under metrics.loss the token regressions, the lost
// writes, and the worker's lost enqueues and reruns (jobs.go).
func failoverLoss(h *history, got figures) {
	if h.Survivors == nil {
		return
	}
	regressions(h, got)
	there := map[string]bool{}
	for _, k := range h.Survivors.Writes {
		there[k] = true
	}
	lost := 0
	for _, a := range h.Acks {
		if a.Kind == "write" && !there[a.Key] {
			got.ack(fmt.Sprintf("metrics.loss.lost_writes[%d]", lost), a)
			lost++
		}
	}
	jobLoss(h, got)
}

// regressions: tokens only rise, so a token went back where
//   - the replicas acknowledged one token to two of them: each
//     acknowledgement after the token's first, by another replica, is
//     "reissued", against that first one;
//   - the server recorded a grant or a renewal (history.token_ops) in a
//     statement that began strictly after some replica had acknowledged a
//     higher token ("below"), or a grant of a token acknowledged before
//     the statement began ("reissued"); it is named at the statement's
//     start, against the earliest such acknowledgement.
//
// Each token is named once: the first way it went back, the replicas'
// acknowledgements before the server's record, the record in its order.
func regressions(h *history, got figures) {
	acks := acknowledged(h)
	named := map[int64]bool{}
	n := 0
	put := func(replica string, token int64, at time.Time, earlier acked, why string) {
		p := fmt.Sprintf("metrics.loss.token_regressions[%d].", n)
		got[p+"grant.replica"], got[p+"grant.token"], got[p+"grant.at"] = replica, strconv.FormatInt(token, 10), stamp(at)
		got[p+"earlier.replica"], got[p+"earlier.token"], got[p+"earlier.at"] = earlier.replica, strconv.FormatInt(earlier.token, 10), stamp(earlier.at)
		got[p+"why"] = why
		named[token] = true
		n++
	}
	firstAck := map[int64]int{}
	for i, a := range acks {
		k, ok := firstAck[a.token]
		if !ok {
			firstAck[a.token] = i
			continue
		}
		if acks[k].replica != a.replica {
			put(a.replica, a.token, a.at, acks[k], "reissued")
		}
	}
	for _, op := range h.TokenOps {
		if named[op.Token] {
			continue
		}
		for _, a := range acks {
			if !a.at.Before(op.Call) {
				continue
			}
			if a.token > op.Token {
				put(op.Replica, op.Token, op.Call, a, "below")
				break
			}
			if a.token == op.Token && op.Kind == "grant" {
				put(op.Replica, op.Token, op.Call, a, "reissued")
				break
			}
		}
	}
}

// lostGrants: after a failover, a grant the replicas acknowledged is lost
// when the new primary's record (history.token_ops) has no grant of its
// token, to its replica or to no one named (a table without a holder
// column), in a statement begun before the acknowledgement. A later grant
// of the same token to the same replica is the new primary's own, not the
// lost one.
func lostGrants(h *history) []acked {
	if h.Survivors == nil {
		return nil
	}
	var out []acked
	for _, g := range h.Grants {
		kept := false
		for _, op := range h.TokenOps {
			if op.Kind == "grant" && op.Token == g.Token && (op.Replica == g.Replica || op.Replica == "") && op.Call.Before(g.At) {
				kept = true
				break
			}
		}
		if !kept {
			out = append(out, acked{g.Replica, g.Token, g.At})
		}
	}
	return out
}

// failoverStruck: a failover fault (PRIMARY_FAILOVER, SWITCHOVER,
// PRIMARY_FAILOVER_LOSSY) struck when every step of it shows in a chaos
// event at or after the fault began, the primary down, the standby
// promoted, the address repointed and a first statement on the new
// primary (for the user's own command: it exited 0, a new timeline, a
// first statement); the lossy one besides detached the standby and
// froze its target (a chaos event of the target's beginning "SIGSTOP",
// the first since the fault) while the target was at work.
func failoverStruck(f file, fault, target string, at time.Time) bool {
	h := f.History
	var since []string
	stop, stopped := time.Time{}, false
	for _, e := range h.Events {
		if e.Kind != "chaos" || e.At.Before(at) {
			continue
		}
		since = append(since, e.Detail)
		if !stopped && e.Replica == target && strings.HasPrefix(e.Detail, "SIGSTOP") {
			stop, stopped = e.At, true
		}
	}
	shows := func(text string) bool {
		for _, d := range since {
			if strings.Contains(d, text) {
				return true
			}
		}
		return false
	}
	steps := shows(" down, ") && shows(" promoted, timeline ") && shows("address leads to ") && shows("first statement on the new primary")
	if shows("failover command exited: ") {
		// The user's own command (the external provider): doublerun sees
		// it exit 0, the server's new timeline and a statement after.
		steps = shows("failover command exited: exit 0") && shows(" promoted, timeline ") && shows("first statement on the new primary")
	}
	if fault != "PRIMARY_FAILOVER_LOSSY" {
		return steps
	}
	working := false
	for _, iv := range h.Intervals {
		if iv.Replica == target && !iv.Start.After(stop) && !iv.End.Before(stop) {
			working = true
		}
	}
	return shows(" detached") && stopped && working && steps
}

// grantLostHolds is the sixth condition, only of a run that expects a
// token regression: its failover lost a grant the replicas acknowledged,
// without which no token could go back.
func grantLostHolds(h *history) bool {
	return len(lostGrants(h)) > 0
}
