package oracle

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The sweep-line windows agree with brute force on a millisecond grid for
// random histories: every episode, its span, the total and the longest.
// Every other history lies on a 10 ms grid, so that work often starts or
// ends at one instant and gaps often last exactly the tolerance, the
// boundaries where a sweep line goes wrong.
func TestAnalyzeMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 400 {
		grain := 1 + 9*(trial%2)
		n := func(below int) int { return grain * rng.IntN(below/grain) }
		var ivs []Interval
		for range 1 + rng.IntN(8) {
			from := n(1000)
			replica := string(rune('a' + rng.IntN(3)))
			ivs = append(ivs, iv(replica, 1, from, from+grain+n(300)))
		}
		// Below zero counts every gap: a report judged again by hand
		// can carry any tolerance.
		tolerance := n(60) - 10
		start, end := n(200), 1100+n(200)
		h := History{Start: at(start), End: at(end), Intervals: ivs}
		m := Analyze(h, Options{GapTolerance: time.Duration(tolerance) * time.Millisecond})

		// Brute force: the distinct replicas working in each ms slot of
		// the measured span.
		working := make([]int, end-start)
		for i := range working {
			who := map[string]bool{}
			for _, v := range ivs {
				if slot := at(start + i); !slot.Before(v.Start) && slot.Before(v.End) {
					who[v.Replica] = true
				}
			}
			working[i] = len(who)
		}
		double := slotRuns(working, start, 0, func(k int) bool { return k >= 2 })
		idle := slotRuns(working, start, tolerance, func(k int) bool { return k == 0 })
		require.Equal(t, double, m.DoubleRun, "trial %d double-run: %+v", trial, ivs)
		require.Equal(t, idle, m.Leaderless, "trial %d leaderless (tolerance %d ms): %+v", trial, tolerance, ivs)
		require.Equal(t, slices.Max(working), m.MaxConcurrentLeaders, "trial %d most at once: %+v", trial, ivs)
	}
}

// slotRuns is the window of the maximal runs of ms slots in which cond
// holds, counting only runs longer than longerThan ms. Slot i is the
// millisecond starting at first+i.
func slotRuns(slots []int, first, longerThan int, cond func(int) bool) Window {
	var w Window
	from := -1
	for i := 0; i <= len(slots); i++ {
		if i < len(slots) && cond(slots[i]) {
			if from < 0 {
				from = i
			}
			continue
		}
		if from >= 0 && i-from > longerThan {
			w.Episodes++
			w.Total += ms(i - from)
			w.Longest = max(w.Longest, ms(i-from))
			w.Spans = append(w.Spans, Span{Start: at(first + from), End: at(first + i)})
		}
		from = -1
	}
	return w
}

// The failover latency agrees with brute force for random histories: scan
// the events in their given order for the fault, the heal and the
// injection, then walk the ms grid from there to the first slot in which
// a replica works under a term newer than every term granted by then, in
// a piece it began after it. Every other history lies on a 10 ms grid, so grants, events
// and work often fall on one instant.
func TestFailoverMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	kinds := []string{EventFault, EventHealed, EventInjected, EventReplicaKilled, EventChaos, EventReplicaStarted}
	for trial := range 400 {
		grain := 1 + 9*(trial%2)
		n := func(below int) int { return grain * rng.IntN(below/grain) }
		var ivs []Interval
		var grants []Grant
		for k := range 1 + rng.IntN(6) {
			replica := string(rune('a' + rng.IntN(3)))
			token := int64(1 + k)
			granted := n(1000)
			grants = append(grants, Grant{Replica: replica, Token: token, At: at(granted)})
			for range rng.IntN(3) {
				from := granted + n(200)
				ivs = append(ivs, iv(replica, token, from, from+grain+n(200)))
			}
		}
		var events []Event
		for range rng.IntN(6) {
			events = append(events, Event{Kind: kinds[rng.IntN(len(kinds))], At: at(n(1200))})
		}
		m := Analyze(History{Intervals: ivs, Grants: grants, Events: events}, Options{})

		// Brute force.
		fault, healed, injected := -1, -1, -1
		for _, e := range events {
			if ms := int(e.At.Sub(t0) / time.Millisecond); e.Kind == EventFault && (fault < 0 || ms < fault) {
				fault = ms
			}
		}
		for _, e := range events {
			if ms := int(e.At.Sub(t0) / time.Millisecond); e.Kind == EventHealed && fault >= 0 && ms >= fault && (healed < 0 || ms < healed) {
				healed = ms
			}
		}
		for _, e := range events {
			ms := int(e.At.Sub(t0) / time.Millisecond)
			mark := e.Kind == EventInjected || e.Kind == EventReplicaKilled
			if mark && fault >= 0 && ms >= fault && (healed < 0 || ms <= healed) && (injected < 0 || ms < injected) {
				injected = ms
			}
		}
		from, kind := injected, FailoverFromInjection
		if injected < 0 {
			from, kind = fault, FailoverFromFault
		}
		var want *Duration
		wantKind := ""
		if from >= 0 {
			for slot := from; slot < 2000 && want == nil; slot++ {
				for _, v := range ivs {
					// A term is new when its token is above every token
					// granted by then: a grant logged late does not make
					// an old term new.
					old := slices.ContainsFunc(grants, func(g Grant) bool { return g.Token >= v.Token && !g.At.After(at(from)) })
					began := !v.Start.Before(at(from))
					if !old && began && !at(slot).Before(v.Start) && at(slot).Before(v.End) {
						d := ms(slot - from)
						want, wantKind = &d, kind
						break
					}
				}
			}
		}
		require.Equal(t, want, m.FailoverLatency, "trial %d: events %+v grants %+v work %+v", trial, events, grants, ivs)
		require.Equal(t, wantKind, m.FailoverFrom, "trial %d", trial)
	}
}
