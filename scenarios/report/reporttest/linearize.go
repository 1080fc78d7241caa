package reporttest

import (
	"slices"
	"sort"
	"time"
)

// linearizable decides, without porcupine, whether the fence's history
// has a legal order: how many operations it has (0 when it has no fenced
// write or no recorded token, and is not checked), and whether it does.
// The grants are the server's record and, after a failover, the
// acknowledged grants it lost.
//
// Grants must take effect in the order of their tokens, each token once
// and above 0, so the grants cut the order into epochs: epoch 0 before the
// first grant (token 0, never granted), epoch i after the i-th. Each operation gets a key (epoch, phase): a grant
// (i, 0), a renewal or an accepted write of the i-th token (i, 1); a
// rejected write goes to any epoch but its own token's, phase 1. Operations
// with one key can go in any order (none changes the token), so an order
// exists exactly when the keys can be chosen so that an operation that
// returned before another was called never has the greater key. The fixed
// keys are checked pair by pair; each rejected write, in the order of
// their calls, takes the lowest epoch its predecessors allow, which leaves
// the most room to the ones after it.
func linearizable(h *history) (int, bool) {
	type op struct {
		call, ret time.Time
		epoch     int
		phase     int // 0 grant, 1 anything else
		token     int64
		accepted  bool
	}
	var fenced []op
	for _, w := range h.Writes {
		if w.Fenced {
			fenced = append(fenced, op{call: w.Call, ret: w.At, phase: 1, token: w.Token, accepted: w.Accepted})
		}
	}
	if len(fenced) == 0 || len(h.TokenOps) == 0 {
		return 0, false
	}
	// A grant a failover lost (lostGrants) was made somewhere between the
	// first call of the history and its acknowledgement: a grant whose
	// interval begins before every other operation's.
	lost := lostGrants(h)
	count := len(fenced) + len(h.TokenOps) + len(lost)
	var tokens []int64
	for _, t := range h.TokenOps {
		if t.Kind == "grant" {
			tokens = append(tokens, t.Token)
		}
	}
	for _, g := range lost {
		tokens = append(tokens, g.token)
	}
	slices.Sort(tokens)
	if len(slices.Compact(slices.Clone(tokens))) != len(tokens) || (len(tokens) > 0 && tokens[0] <= 0) {
		return count, false // a token granted twice, or one that raises nothing
	}
	// Epoch 0 is the state before any grant, token 0.
	epochOf := func(token int64) int {
		if token == 0 {
			return 0
		}
		i, found := slices.BinarySearch(tokens, token)
		if !found {
			return -1
		}
		return i + 1
	}
	var fixed, rejected []op
	for _, t := range h.TokenOps {
		o := op{call: t.Call, ret: t.Return, epoch: epochOf(t.Token), phase: 1, token: t.Token}
		if t.Kind == "grant" {
			o.phase = 0
		}
		if o.epoch < 0 {
			return count, false // renewed a token never granted
		}
		fixed = append(fixed, o)
	}
	for _, g := range lost {
		fixed = append(fixed, op{call: time.Time{}, ret: g.at, epoch: epochOf(g.token), phase: 0, token: g.token})
	}
	for _, o := range fenced {
		if !o.accepted {
			rejected = append(rejected, o)
			continue
		}
		if o.epoch = epochOf(o.token); o.epoch < 0 {
			return count, false // accepted under a token never granted
		}
		fixed = append(fixed, o)
	}
	before := func(a, b op) bool { return a.ret.Before(b.call) }
	less := func(a, b op) bool { return a.epoch < b.epoch || (a.epoch == b.epoch && a.phase < b.phase) }
	for _, a := range fixed {
		for _, b := range fixed {
			if before(a, b) && less(b, a) {
				return count, false
			}
		}
	}
	sort.SliceStable(rejected, func(i, j int) bool { return rejected[i].call.Before(rejected[j].call) })
	for k, w := range rejected {
		lowest, highest := 0, len(tokens)
		for _, a := range fixed {
			if before(a, w) {
				lowest = max(lowest, a.epoch)
			}
			if before(w, a) {
				highest = min(highest, a.epoch-1+a.phase)
			}
		}
		for _, v := range rejected[:k] {
			if before(v, w) {
				lowest = max(lowest, v.epoch)
			}
		}
		if lowest == epochOf(w.token) {
			lowest++
		}
		if lowest > highest {
			return count, false
		}
		rejected[k].epoch = lowest
	}
	return count, true
}
