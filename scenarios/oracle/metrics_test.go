package oracle

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func iv(replica string, token int64, from, to int) Interval {
	return Interval{Replica: replica, Token: token, Start: at(from), End: at(to)}
}

func ms(n int) Duration { return Duration(time.Duration(n) * time.Millisecond) }

func TestAnalyzeDoubleRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		intervals []Interval
		episodes  int
		total     Duration
		longest   Duration
		most      int
	}{
		{"OneLeaderNeverDoubleRuns", []Interval{iv("a", 1, 0, 100), iv("a", 1, 110, 200)}, 0, 0, 0, 1},
		{"TwoLeadersOverlapOnce", []Interval{iv("a", 1, 0, 100), iv("b", 2, 50, 150)}, 1, ms(50), ms(50), 2},
		{"TouchingIntervalsDoNotOverlap", []Interval{iv("a", 1, 0, 100), iv("b", 2, 100, 200)}, 0, 0, 0, 1},
		{"AReplicaCannotDoubleRunWithItself", []Interval{iv("a", 1, 0, 100), iv("a", 1, 50, 150)}, 0, 0, 0, 1},
		{"ThreeWayOverlapIsOneEpisode", []Interval{iv("a", 1, 0, 100), iv("b", 1, 20, 80), iv("c", 1, 40, 60)}, 1, ms(60), ms(60), 3},
		{"SeparateEpisodesAreCounted", []Interval{
			iv("a", 1, 0, 100), iv("b", 1, 90, 110), // 10 ms
			iv("a", 1, 200, 300), iv("b", 1, 250, 330), // 50 ms
		}, 2, ms(60), ms(50), 2},
		{"OverlapsWithOneLeaderBetweenAreTwoEpisodes", []Interval{iv("a", 1, 0, 100), iv("b", 1, 50, 200), iv("c", 1, 150, 250)}, 2, ms(100), ms(50), 2},
		{"HandOffAtOneInstantIsOneEpisode", []Interval{iv("a", 1, 0, 200), iv("b", 1, 50, 100), iv("c", 1, 100, 150)}, 1, ms(100), ms(100), 2},
		{"ThirdLeaderJoiningIsTheSameEpisode", []Interval{iv("a", 1, 0, 100), iv("b", 1, 20, 100), iv("c", 1, 50, 120)}, 1, ms(80), ms(80), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Analyze(History{Intervals: tc.intervals}, Options{})
			require.Equal(t, tc.episodes, m.DoubleRun.Episodes, "episodes")
			require.Equal(t, tc.total, m.DoubleRun.Total, "total")
			require.Equal(t, tc.longest, m.DoubleRun.Longest, "longest")
			require.Equal(t, tc.most, m.MaxConcurrentLeaders, "most at once")
			require.Len(t, m.DoubleRun.Spans, tc.episodes)
		})
	}
}

func TestAnalyzeLeaderless(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		h          History
		tolerance  time.Duration
		episodes   int
		total      Duration
		longestGap Duration
	}{
		{"GapsWithinToleranceAreLeadership",
			History{Intervals: []Interval{iv("a", 1, 0, 100), iv("a", 1, 120, 200)}}, 50 * time.Millisecond, 0, 0, 0},
		{"GapBeyondToleranceIsLeaderless",
			History{Intervals: []Interval{iv("a", 1, 0, 100), iv("b", 2, 400, 500)}}, 50 * time.Millisecond, 1, ms(300), ms(300)},
		{"SpanEdgesCount",
			History{Start: at(0), End: at(1000), Intervals: []Interval{iv("a", 1, 200, 800)}}, 50 * time.Millisecond, 2, ms(400), ms(200)},
		{"NoWorkAtAllIsAllLeaderless",
			History{Start: at(0), End: at(1000)}, 50 * time.Millisecond, 1, ms(1000), ms(1000)},
		{"GapOfExactlyTheToleranceIsLeadership",
			History{Start: at(0), End: at(300), Intervals: []Interval{iv("a", 1, 0, 100), iv("b", 2, 150, 250)}}, 50 * time.Millisecond, 0, 0, 0},
		{"NegativeToleranceCountsEveryGapButNoEmptyOne",
			History{Start: at(0), End: at(300), Intervals: []Interval{iv("a", 1, 0, 100), iv("b", 2, 100, 200), iv("a", 3, 201, 300)}}, -time.Millisecond, 1, ms(1), ms(1)},
		{"OverlapsAreNotGaps",
			History{Intervals: []Interval{iv("a", 1, 0, 100), iv("b", 2, 50, 300), iv("a", 3, 350, 400)}}, 10 * time.Millisecond, 1, ms(50), ms(50)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Analyze(tc.h, Options{GapTolerance: tc.tolerance})
			require.Equal(t, tc.episodes, m.Leaderless.Episodes, "episodes")
			require.Equal(t, tc.total, m.Leaderless.Total, "total")
			require.Equal(t, tc.longestGap, m.Leaderless.Longest, "longest")
		})
	}
}

func TestAnalyzeClipsToTheMeasuredSpan(t *testing.T) {
	t.Parallel()
	h := History{Start: at(100), End: at(200), Intervals: []Interval{iv("a", 1, 0, 150), iv("b", 2, 120, 400)}}
	m := Analyze(h, Options{})
	require.Equal(t, ms(30), m.DoubleRun.Total)
	require.Equal(t, Duration(0), m.Leaderless.Total)
}

func TestAnalyzeStaleWrites(t *testing.T) {
	t.Parallel()
	h := History{
		Grants: []Grant{{"a", 1, at(0)}, {"b", 2, at(500)}, {"a", 3, at(900)}},
		Writes: []Write{
			{Replica: "a", Token: 1, At: at(100), Accepted: true}, // token 1 is newest: fine
			{Replica: "a", Token: 1, At: at(600), Accepted: true}, // token 2 granted at 500: accepted stale
			{Replica: "a", Token: 1, At: at(700)},                 // the fence refused it
			{Replica: "b", Token: 2, At: at(800), Accepted: true}, // fine
			{Replica: "b", Token: 2, At: at(950), Accepted: true}, // token 3 granted at 900: accepted stale
		},
	}
	m := Analyze(h, Options{})
	require.Equal(t, StaleWrites{Accepted: 2, Rejected: 1}, m.StaleWrites)
	require.Equal(t, 4, m.Writes)
	require.Equal(t, 3, m.Terms)
	require.Equal(t, 2, m.LeadershipChanges)
}

func TestAnalyzeTerms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		grants  []Grant
		terms   int
		changes int
	}{
		{"NoGrantsNoTerms", nil, 0, 0},
		{"OneHolderNeverChanges", []Grant{{"a", 1, at(0)}, {"a", 2, at(100)}}, 2, 0},
		// Tokens are not always granted in time order: a replica can log
		// its grant late. The holder sequence is the one in time.
		{"ChangesFollowTimeNotTokens", []Grant{{"b", 2, at(200)}, {"a", 3, at(100)}, {"a", 1, at(0)}}, 3, 1},
		{"GrantsAtOneInstantGoInTokenOrder", []Grant{{"a", 1, at(0)}, {"b", 3, at(100)}, {"a", 2, at(100)}}, 3, 1},
		{"ATokenGrantedTwiceIsOneTerm", []Grant{{"a", 1, at(0)}, {"b", 1, at(100)}}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Analyze(History{Grants: tc.grants}, Options{})
			require.Equal(t, tc.terms, m.Terms, "terms")
			require.Equal(t, tc.changes, m.LeadershipChanges, "leadership changes")
		})
	}
}

func TestAnalyzeFailoverLatency(t *testing.T) {
	t.Parallel()
	fault := func(ms int) Event { return Event{Kind: EventFault, Replica: "a", At: at(ms)} }
	injected := func(ms int) Event { return Event{Kind: EventInjected, Replica: "a", At: at(ms)} }
	killed := func(replica string, ms int) Event {
		return Event{Kind: EventReplicaKilled, Replica: replica, At: at(ms)}
	}
	healed := func(ms int) Event { return Event{Kind: EventHealed, At: at(ms)} }
	grants := []Grant{{"a", 1, at(0)}, {"b", 2, at(1200)}}
	const inj, flt = FailoverFromInjection, FailoverFromFault
	for _, tc := range []struct {
		name      string
		intervals []Interval
		events    []Event
		want      *Duration // nil: no failover
		from      string
	}{
		{"FromTheFaultToTheNewTermsWork",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, []Event{fault(1000)}, new(ms(250)), flt},
		{"NoFaultNoFailover",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, nil, nil, ""},
		{"NoTermGrantedAfterTheFaultNoFailover",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, []Event{fault(1500)}, nil, ""},
		// The old leader working on under its token is not the service
		// coming back.
		{"WorkUnderTheOldTermIsNoFailover",
			[]Interval{iv("a", 1, 0, 1000), iv("a", 1, 1100, 1150), iv("b", 2, 1250, 2000)}, []Event{fault(1000)}, new(ms(250)), flt},
		{"TheFirstFaultCounts",
			[]Interval{iv("a", 1, 0, 900), iv("b", 2, 1250, 2000)},
			[]Event{healed(500), fault(1100), fault(1000)}, new(ms(250)), flt},
		{"TheEarliestNewWorkCounts",
			[]Interval{iv("a", 1, 0, 1000), iv("c", 3, 1400, 2000), iv("b", 2, 1250, 1300)}, []Event{fault(1000)}, new(ms(250)), flt},
		// The fault waits for its moment before it acts; that wait is not
		// failover.
		{"FromTheInjectionNotTheStrikeWait",
			[]Interval{iv("a", 1, 0, 1100), iv("b", 2, 1250, 2000)}, []Event{fault(900), injected(1100)}, new(ms(150)), inj},
		{"AKillIsAnInjection",
			[]Interval{iv("a", 1, 0, 1100), iv("b", 2, 1250, 2000)}, []Event{fault(900), killed("a", 1150)}, new(ms(100)), inj},
		{"TheFirstInjectionCounts",
			[]Interval{iv("a", 1, 0, 1100), iv("b", 2, 1250, 2000)}, []Event{fault(900), injected(1150), injected(1100)}, new(ms(150)), inj},
		// A replica killed at the end of the run, after the fault healed,
		// is no injection; neither is an event before the fault.
		{"AKillAfterTheHealIsNoInjection",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, []Event{fault(1000), healed(1100), killed("b", 1200)}, new(ms(250)), flt},
		{"AnInjectionAtTheHealCounts",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, []Event{fault(1000), healed(1100), injected(1100)}, new(ms(150)), inj},
		{"AnInjectionBeforeTheFaultIsNone",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, []Event{injected(800), fault(1000)}, new(ms(250)), flt},
		// A term granted between the fault event and the injection is not
		// a failover from the injection.
		{"ATermGrantedBeforeTheInjectionIsNoFailover",
			[]Interval{iv("a", 1, 0, 1000), iv("b", 2, 1250, 2000)}, []Event{fault(1000), injected(1200)}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Analyze(History{Grants: grants, Intervals: tc.intervals, Events: tc.events}, Options{})
			require.Equal(t, tc.want, m.FailoverLatency)
			require.Equal(t, tc.from, m.FailoverFrom)
		})
	}
}

func TestDurationJSONRoundTrips(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(ms(1500) + Duration(250*time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, "1500.250", string(b))
	var d Duration
	require.NoError(t, json.Unmarshal(b, &d))
	require.Equal(t, ms(1500)+Duration(250*time.Microsecond), d)
	require.NoError(t, json.Unmarshal([]byte("1.005"), &d))
	require.Equal(t, Duration(1005*time.Microsecond), d, "to the nanosecond")
	require.Error(t, json.Unmarshal([]byte(`"1ms"`), &d))
}
