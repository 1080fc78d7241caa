package oracle

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// held is a lock sample at ms showing the backends pids, no bouncer.
func held(ms int, pids ...int32) LockSample {
	s := LockSample{At: at(ms)}
	for _, p := range pids {
		s.Held = append(s.Held, LockHolding{PID: p})
	}
	return s
}

// heldLinked is a sample with one backend and what the bouncer said of it.
func heldLinked(ms int, pid int32, linked bool) LockSample {
	return LockSample{At: at(ms), Held: []LockHolding{{PID: pid, ClientLinked: &linked}}}
}

func claimEv(replica string, ms int, pid int32) Event {
	return Event{Kind: EventLockClaim, Replica: replica, Detail: ClaimDetail(pid, 271, 1), At: at(ms)}
}

func TestAnalyzeOrphaned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		h       History
		want    []Orphan
		episode int
		total   Duration
	}{
		{"ALockReleasedCleanlyIsNoOrphan", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 0)},
			Locks:  []LockSample{held(0, 7), held(90, 7), held(110)},
		}, nil, 0, 0},
		{"TheAcquireBeforeItsClaimIsNoOrphan", History{
			Events: []Event{claimEv("a", 30, 7)},
			Locks:  []LockSample{held(0, 7), held(100, 7)},
		}, nil, 0, 0},
		{"ALockLeftAfterTheReleaseIsOrphaned", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 0)},
			Locks:  []LockSample{held(0, 7), held(300, 7), held(310)},
		}, []Orphan{{Start: at(100), End: at(300), BackendPID: 7, After: "a", Cause: "released"}}, 1, ms(200)},
		{"ALockLeftByADeadHolderIsOrphaned", History{
			Events: []Event{claimEv("a", 5, 7), {Kind: EventReplicaKilled, Replica: "a", At: at(200)}},
			Locks:  []LockSample{held(0, 7), held(500, 7)},
		}, []Orphan{{Start: at(200), End: at(500), BackendPID: 7, After: "a", Cause: "died"}}, 1, ms(300)},
		{"ReenteringTheOrphanedBackendEndsItAndIsLabelled", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 0), claimEv("b", 250, 7)},
			Locks:  []LockSample{held(0, 7), held(400, 7)},
		}, []Orphan{{Start: at(100), End: at(250), BackendPID: 7, After: "a", Cause: "released", ReenteredBy: "b"}}, 1, ms(150)},
		{"AHolderMovingToAnotherBackendOrphansTheFirst", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 8)},
			Locks:  []LockSample{held(0, 7), held(105, 7, 8), held(200, 7, 8), held(210, 8)},
		}, []Orphan{{Start: at(100), End: at(200), BackendPID: 7, After: "a", Cause: "released"}}, 1, ms(100)},
		{"ASharedBackendIsNotOrphanedWhileOneClaimStands", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("b", 10, 7), claimEv("a", 100, 0), claimEv("b", 200, 0)},
			Locks:  []LockSample{held(0, 7), held(250, 7), held(260)},
		}, []Orphan{{Start: at(200), End: at(250), BackendPID: 7, After: "b", Cause: "released"}}, 1, ms(50)},
		{"TheBouncerSaysWhetherAClientWasLinked", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 0)},
			Locks:  []LockSample{heldLinked(0, 7, true), heldLinked(95, 7, true), heldLinked(100, 7, false), heldLinked(300, 7, false)},
		}, []Orphan{{Start: at(100), End: at(300), BackendPID: 7, After: "a", Cause: "released", ClientLinkedFor: new(ms(0))}}, 1, ms(200)},
		{"EachSampleStandsUntilTheNext", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 0)},
			Locks:  []LockSample{heldLinked(0, 7, true), heldLinked(150, 7, false), heldLinked(260, 7, true), heldLinked(300, 7, true)},
		}, []Orphan{{Start: at(100), End: at(300), BackendPID: 7, After: "a", Cause: "released", ClientLinkedFor: new(ms(90))}}, 1, ms(200)},
		{"AStretchWithinTheToleranceIsLeftOut", History{
			Events: []Event{claimEv("a", 5, 7), {Kind: EventReplicaKilled, Replica: "a", At: at(100)}, claimEv("b", 200, 8), claimEv("b", 300, 0)},
			Locks:  []LockSample{held(0, 7), held(120, 7), held(130), held(210, 8), held(400, 8)},
		}, []Orphan{{Start: at(300), End: at(400), BackendPID: 8, After: "b", Cause: "released"}}, 1, ms(100)},
		{"ItIsClippedToTheMeasuredSpan", History{
			Start: at(150), End: at(250),
			Events: []Event{claimEv("a", 5, 7), claimEv("a", 100, 0), claimEv("b", 300, 7)},
			Locks:  []LockSample{held(0, 7), held(400, 7)},
		}, []Orphan{{Start: at(150), End: at(250), BackendPID: 7, After: "a", Cause: "released"}}, 1, ms(100)},
		{"TwoBackendsAtOnceCountTheirTimeOnce", History{
			Events: []Event{claimEv("a", 5, 7), claimEv("b", 5, 8), claimEv("a", 100, 0), claimEv("b", 150, 0)},
			Locks:  []LockSample{held(0, 7, 8), held(300, 7, 8)},
		}, []Orphan{
			{Start: at(100), End: at(300), BackendPID: 7, After: "a", Cause: "released"},
			{Start: at(150), End: at(300), BackendPID: 8, After: "b", Cause: "released"},
		}, 1, ms(200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Analyze(tc.h, Options{OrphanTolerance: 20 * time.Millisecond})
			require.Equal(t, tc.want, m.Orphaned.Orphans)
			require.Equal(t, tc.episode, m.Orphaned.Episodes, "episodes")
			require.Equal(t, tc.total, m.Orphaned.Total, "total")
			reentries := 0
			for _, o := range tc.want {
				if o.ReenteredBy != "" {
					reentries++
				}
			}
			require.Equal(t, reentries, m.Orphaned.Reentries, "re-entries")
		})
	}
}

// A lock still held, unclaimed, in a sample taken after the measured span
// (once every replica stopped) was left behind; one a replica still
// claims, or one seen inside the span, was not.
func TestOrphanedLeftHeld(t *testing.T) {
	t.Parallel()
	h := History{Start: at(0), End: at(1000),
		Events: []Event{claimEv("a", 5, 7), claimEv("b", 5, 8), claimEv("a", 1100, 0)},
		Locks:  []LockSample{held(0, 7, 8), held(1200, 7, 8)},
	}
	require.Equal(t, []int32{7}, Analyze(h, Options{}).Orphaned.LeftHeld)
	h.End = at(1300)
	require.Empty(t, Analyze(h, Options{}).Orphaned.LeftHeld)
}

func TestClaimDetailRoundTrips(t *testing.T) {
	t.Parallel()
	pid, k1, k2, err := ParseClaim(ClaimDetail(1234, 271, -1))
	require.NoError(t, err)
	require.Equal(t, []int32{1234, 271, -1}, []int32{pid, k1, k2})
	_, _, _, err = ParseClaim("backend x")
	require.Error(t, err)
}

// The orphaned-lock window agrees with brute force on a millisecond grid
// for random histories of lock samples, claims and deaths: per slot, a
// backend holds the lock when the last sample at or before it and the
// next one both show it, and the slot is orphaned when some backend holds
// it unclaimed after a claim earlier in the same run of held slots.
func TestOrphanedMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	pids := []int32{7, 8, 9}
	for trial := range 400 {
		grain := 1 + 9*(trial%2)
		n := func(below int) int { return grain * rng.IntN(below/grain) }
		var h History
		for k, now := 0, 0; k < 2+rng.IntN(20); k++ {
			now += grain + n(120)
			var in []int32
			for _, p := range pids {
				if rng.IntN(3) > 0 {
					in = append(in, p)
				}
			}
			h.Locks = append(h.Locks, held(now, in...))
		}
		for range rng.IntN(12) {
			replica := string(rune('a' + rng.IntN(3)))
			if rng.IntN(6) == 0 {
				h.Events = append(h.Events, Event{Kind: EventReplicaKilled, Replica: replica, At: at(n(1200))})
				continue
			}
			pid := int32(0)
			if rng.IntN(3) > 0 {
				pid = pids[rng.IntN(len(pids))]
			}
			h.Events = append(h.Events, claimEv(replica, n(1200), pid))
		}
		h.Start, h.End = at(n(200)), at(1000+n(400))
		tolerance := n(40)
		m := Analyze(h, Options{OrphanTolerance: time.Duration(tolerance) * time.Millisecond})

		first, last := int(h.Start.Sub(t0).Milliseconds()), int(h.End.Sub(t0).Milliseconds())
		slots := make([]int, last-first)
		heldMs, claimedMs := heldSlots(h.Locks, 1500), claimedSlots(h.Events, 1500)
		for _, p := range pids {
			// This backend's orphaned slots in the span, then its runs
			// longer than the tolerance into the union.
			mine := make([]int, last-first)
			claimedBefore := false
			for ms := range 1500 {
				if !heldMs[ms][p] {
					claimedBefore = false
					continue
				}
				if claimedMs[ms][p] {
					claimedBefore = true
				} else if claimedBefore && ms >= first && ms < last {
					mine[ms-first] = 1
				}
			}
			for _, sp := range slotRuns(mine, first, tolerance, func(k int) bool { return k > 0 }).Spans {
				for ms := sp.Start; ms.Before(sp.End); ms = ms.Add(time.Millisecond) {
					slots[int(ms.Sub(t0).Milliseconds())-first] = 1
				}
			}
		}
		want := slotRuns(slots, first, 0, func(k int) bool { return k > 0 })
		got := m.Orphaned.Window
		require.Equal(t, want, got, "trial %d (tolerance %d ms): locks %+v events %+v", trial, tolerance, h.Locks, h.Events)
		var sum Duration
		for _, o := range m.Orphaned.Orphans {
			require.True(t, o.End.After(o.Start), "trial %d: empty orphan %+v", trial, o)
			sum += Duration(o.End.Sub(o.Start))
		}
		require.GreaterOrEqual(t, sum, got.Total, "trial %d: the orphans cover the window", trial)
	}
}

// heldSlots says per ms slot which backends hold the lock: those that the
// last sample at or before the slot and the one after it both show.
func heldSlots(samples []LockSample, slots int) []map[int32]bool {
	out := make([]map[int32]bool, slots)
	k := -1
	for ms := range slots {
		for k+1 < len(samples) && !samples[k+1].At.After(at(ms)) {
			k++
		}
		out[ms] = map[int32]bool{}
		if k < 0 || k+1 >= len(samples) {
			continue
		}
		for _, h := range samples[k].Held {
			if slices.ContainsFunc(samples[k+1].Held, func(n LockHolding) bool { return n.PID == h.PID }) {
				out[ms][h.PID] = true
			}
		}
	}
	return out
}

// claimedSlots says per ms slot which backends some replica claims: its
// latest claim or death at or before the slot (a claim and a death at one
// instant in the order given) names it.
func claimedSlots(events []Event, slots int) []map[int32]bool {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b Event) int { return a.At.Compare(b.At) })
	out := make([]map[int32]bool, slots)
	state := map[string]int32{}
	k := 0
	for ms := range slots {
		for ; k < len(evs) && !evs[k].At.After(at(ms)); k++ {
			switch e := evs[k]; e.Kind {
			case EventLockClaim:
				p, _, _, _ := ParseClaim(e.Detail)
				state[e.Replica] = p
			case EventReplicaKilled:
				state[e.Replica] = 0
			}
		}
		out[ms] = map[int32]bool{}
		for _, p := range state {
			if p != 0 {
				out[ms][p] = true
			}
		}
	}
	return out
}
