package reporttest_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
)

// failoverSteps are the chaos events a failover fault logs, by a piece of
// each (scenarios/fault/failover.go), in their order.
var failoverSteps = []string{
	"primary pg1 down, 12ms after the SIGKILL",
	"pg2 promoted, timeline 2, 80ms after the SIGKILL",
	"address leads to pg2, 81ms after the SIGKILL",
	"first statement on the new primary through direct, 95ms after the SIGKILL",
}

// externalFailoverSteps are the chaos events a failover made by the
// user's own command logs (scenarios/fault/failover_external.go).
var externalFailoverSteps = []string{
	`failover command exited: exit 0, 540ms after its start; its last line: "ok"`,
	"the server behind direct promoted, timeline 2 (was 1), 600ms after the command's start",
	"first statement on the new primary through direct, 650ms after the command's start",
}

// detached is the lossy fault's event of the standby it detached.
func detached(e oracle.Event) bool {
	return e.Kind == oracle.EventChaos && strings.Contains(e.Detail, " detached")
}

// failoverHistory is randomHistory's with its lease run across a primary
// failover, and the failover's records: the fault begins at a random
// instant; the pair's commits from a random instant before it until the
// promotion after it are lost (none, at times), so the new primary's
// token table goes back to the last token committed before then, which
// it grants again or its holder renews; the replicas' acknowledgements
// of grants, writes, enqueues and completions, the jobs' starts, and what
// the new primary held. Its steps show as chaos events, each missing at
// times, some before the fault; so do the lossy fault's detach and
// freeze. A token table without a holder column (lease.Advisory's) names
// no replica in some histories.
func failoverHistory(rng *rand.Rand, grain int) oracle.History {
	n := func(below int) int { return grain * rng.IntN(max(1, below/grain)) }
	replicas := []string{"r1", "r2", "r3"}
	h := randomHistory(rng, grain)
	h.Grants, h.TokenOps, h.Writes = nil, nil, nil
	struck := 20000 + n(40000)
	lostFrom, promoted := struck-n(20000), struck+grain+n(15000)
	if rng.IntN(5) == 0 { // a synchronous standby: nothing lost
		lostFrom = promoted
	}
	// Half the failovers are clean runs: every step in its place, no other
	// fault or death, every backend through its path. The rest miss steps
	// or show them before the fault, besides randomHistory's noise.
	clean := rng.IntN(2) == 0
	if clean {
		h.Events = slices.DeleteFunc(h.Events, func(e oracle.Event) bool {
			return e.Kind != oracle.EventReplicaStarted && e.Kind != oracle.EventLockClaim
		})
		h.Backends = nil
		for _, r := range replicas {
			h.Backends = append(h.Backends, oracle.Backend{At: h.Start, Replica: r, PID: int32(100 + rng.IntN(50)), Via: oracle.ViaProxy})
		}
	}
	target := replicas[rng.IntN(3)]
	h.Events = append(h.Events, oracle.Event{Kind: oracle.EventFault, Replica: target, At: at(struck)})
	shows := func() bool { return clean || rng.IntN(6) > 0 }
	when := func(from int) time.Time {
		if clean {
			return at(from + n(5000))
		}
		return at(from + n(10000) - n(5000))
	}
	steps := failoverSteps
	if rng.IntN(4) == 0 { // the user's own command, on the external provider
		steps = slices.Clone(externalFailoverSteps)
		if !clean && rng.IntN(3) == 0 {
			steps[0] = `failover command exited: exit 3, 5ms after its start; its last line: "no leader"`
		}
	}
	for i, step := range steps {
		if shows() {
			h.Events = append(h.Events, oracle.Event{Kind: oracle.EventChaos, Detail: step, At: when(promoted + 1000*i)})
		}
	}
	if shows() {
		h.Events = append(h.Events, oracle.Event{Kind: oracle.EventChaos, Detail: "standby pg2 detached: from here on the primary alone has the commits", At: when(struck)})
	}
	holderless := rng.IntN(4) == 0
	recorded := func(replica string) string {
		if holderless {
			return ""
		}
		return replica
	}

	// The lease: server is the token the pair's table holds, kept the
	// newest one committed before the loss and keeper its holder.
	server, kept, holder, keeper, now := int64(0), int64(0), "", "", n(5000)
	back := false
	writes := 0
	survivors := oracle.Survivors{Writes: []string{}, Jobs: []string{}}
	// At most some 25 operations: porcupine's search of an illegal fence
	// whose lost grants overlap every other operation grows fast with
	// them (3 s for 40 on an idle machine).
	for end := promoted + n(12000); now < end && len(h.TokenOps)+len(h.Writes) < 22; {
		width := grain + n(3000)
		if !back && now >= promoted {
			server, holder, back = kept, keeper, true
		}
		lost := now >= lostFrom && now < promoted
		if rng.IntN(3) == 0 || server == 0 {
			server++
			holder = replicas[rng.IntN(3)]
			h.Grants = append(h.Grants, oracle.Grant{Replica: holder, Token: server, At: at(now + width + n(1000))})
			if !lost {
				h.TokenOps = append(h.TokenOps, oracle.TokenOp{Kind: oracle.TokenGrant, Replica: recorded(holder), Token: server, Call: at(now), Return: at(now + width)})
			}
			if now < lostFrom {
				kept, keeper = server, holder
			}
		} else if rng.IntN(2) == 0 && !lost {
			h.TokenOps = append(h.TokenOps, oracle.TokenOp{Kind: oracle.TokenRenewal, Replica: recorded(holder), Token: server, Call: at(now), Return: at(now + width)})
		}
		for range rng.IntN(3) {
			t := server - int64(rng.IntN(2))
			w := oracle.Write{Replica: holder, Token: t, Call: at(now - n(4000)), At: at(now + n(4000)), Accepted: t == server, Fenced: rng.IntN(8) > 0}
			h.Writes = append(h.Writes, w)
			if !w.Accepted {
				continue
			}
			writes++
			key := fmt.Sprintf("w%d", writes)
			if rng.IntN(8) > 0 {
				h.Acks = append(h.Acks, oracle.Ack{Kind: oracle.AckWrite, Replica: holder, Key: key, Token: t, At: w.At.Add(time.Duration(grain+n(2000)) * time.Microsecond)})
			}
			if !lost && rng.IntN(10) > 0 {
				survivors.Writes = append(survivors.Writes, key)
			}
		}
		now += width + n(6000)
	}
	// The worker's jobs: enqueued, completed, started, some lost.
	for j := range rng.IntN(6) {
		key, when := fmt.Sprintf("job-%d", j), n(110000)
		lost := when >= lostFrom && when < promoted
		h.Acks = append(h.Acks, oracle.Ack{Kind: oracle.AckEnqueue, Replica: replicas[rng.IntN(3)], Key: key, At: at(when)})
		if !lost || rng.IntN(4) == 0 {
			survivors.Jobs = append(survivors.Jobs, key)
		}
		for range rng.IntN(3) {
			h.JobRuns = append(h.JobRuns, oracle.JobRun{Replica: replicas[rng.IntN(3)], Key: key, At: at(when + n(20000))})
		}
		if rng.IntN(2) == 0 {
			h.Acks = append(h.Acks, oracle.Ack{Kind: oracle.AckCompleted, Replica: replicas[rng.IntN(3)], Key: key, At: at(when + n(10000))})
		}
	}
	h.Survivors = &survivors
	whole(rng, &h, grain)
	// The lossy fault freezes its target, in a piece of work of its begun
	// since the fault when there is one.
	if shows() {
		stop := when(struck)
		for _, iv := range h.Intervals {
			if clean && iv.Replica == target && !iv.Start.Before(at(struck)) {
				stop = iv.Start
				break
			}
		}
		h.Events = append(h.Events, oracle.Event{Kind: oracle.EventChaos, Replica: target, Detail: "SIGSTOP pid 41 in the middle of its work", At: stop})
	}
	return h
}

// Across a failover too, the figures this package recomputes agree with
// the oracle's and with `doublerun check`'s: the loss (token regressions,
// lost writes, lost enqueues, reruns), the failover faults' evidence that
// they struck, the lost grant a run expecting a regression needs, and the
// fence's check with the lost grants in it. None of them goes quiet.
func TestRecomputeAgreesWithTheOracleAcrossAFailover(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(32, 1))
	faults := []string{"PRIMARY_FAILOVER", "PRIMARY_FAILOVER_LOSSY", "SWITCHOVER"}
	// A third of the runs expect a regression, the one expectation with a
	// sixth condition.
	expects := []scenarios.Expectation{scenarios.ExpectRegresses, scenarios.ExpectFenced, scenarios.ExpectRegresses, scenarios.ExpectSafe,
		scenarios.ExpectRegresses, scenarios.ExpectReproduces, scenarios.ExpectReproducesOrOrphans, scenarios.ExpectFenced, scenarios.ExpectRegresses}
	seen := map[string]int{}
	for trial := range 360 {
		grain := []int{1, 1000, 10000}[trial%3]
		h := failoverHistory(rng, grain)
		fault, expect := faults[trial/3%3], expects[trial/9%len(expects)]
		gap, orphan := time.Duration(rng.IntN(40))*time.Millisecond-5*time.Millisecond, time.Duration(rng.IntN(30))*time.Millisecond
		data := reportOfFault(t, h, expect, fault, gap, orphan)
		// The same lossy history without its standby detached, which no
		// random noise removes often enough to be judged every run: both
		// must find that the fault did not strike.
		if fault == "PRIMARY_FAILOVER_LOSSY" && slices.ContainsFunc(h.Events, detached) {
			undetached := h
			undetached.Events = slices.DeleteFunc(slices.Clone(h.Events), detached)
			again := reportOfFault(t, undetached, expect, fault, gap, orphan)
			diffs, err := reporttest.Recompute(again)
			require.NoError(t, err)
			require.Empty(t, diffs, "trial %d without the detach:\n%s", trial, again)
			var rep scenarios.Report
			require.NoError(t, json.Unmarshal(again, &rep))
			require.False(t, rep.Metrics.Validity.Conditions[1].Holds, "trial %d: a lossy failover that never detached its standby did not strike", trial)
			seen["lossy without its detach"]++
		}
		diffs, err := reporttest.Recompute(data)
		require.NoError(t, err)
		require.Empty(t, diffs, "trial %d:\n%s", trial, data)
		again, err := report.Recompute(data)
		require.NoError(t, err)
		require.Empty(t, again.Diffs, "trial %d", trial)

		var rep scenarios.Report
		require.NoError(t, json.Unmarshal(data, &rep))
		m := rep.Metrics
		require.NotNil(t, m.Loss)
		for _, r := range m.Loss.TokenRegressions {
			seen["token regression "+r.Why]++
		}
		if len(m.Loss.LostWrites) > 0 {
			seen["lost write"]++
		}
		if len(m.Loss.LostEnqueues) > 0 {
			seen["lost enqueue"]++
		}
		if len(m.Loss.RerunJobs) > 0 {
			seen["rerun"]++
		}
		external := slices.ContainsFunc(rep.History.Events, func(e oracle.Event) bool {
			return strings.HasPrefix(e.Detail, "failover command exited: ")
		})
		if c := m.Validity.Conditions[1]; c.Holds {
			seen["failover struck"]++
			if external {
				seen["external failover struck"]++
			}
		} else {
			seen["failover not struck "+fault]++
			if external {
				seen["external failover not struck"]++
			}
		}
		if expect == scenarios.ExpectRegresses {
			c := m.Validity.Conditions[5]
			require.Equal(t, oracle.ConditionLostGrant, c.Name)
			seen[map[bool]string{true: "grant lost", false: "no grant lost"}[c.Holds]]++
			seen[fmt.Sprintf("regresses pass %v", rep.Verdict.Pass)]++

		} else {
			require.Len(t, m.Validity.Conditions, 5)
		}
		if l := m.Linearizability; l != nil {
			fenced, ops := 0, len(h.TokenOps)
			for _, w := range h.Writes {
				if w.Fenced {
					fenced++
				}
			}
			if l.Operations > fenced+ops {
				seen["fence with a lost grant "+l.Linearizable]++
			}
		}
		if fault == "PRIMARY_FAILOVER_LOSSY" && expect == scenarios.ExpectFenced {
			seen[fmt.Sprintf("newer term after the lossy fault %v", m.Validity.Conditions[4].Holds)]++
		}
	}
	for _, k := range []string{"token regression reissued", "token regression below", "lost write", "lost enqueue", "rerun",
		"failover struck", "grant lost", "fence with a lost grant yes", "fence with a lost grant no", "external failover struck", "external failover not struck",
		"lossy without its detach"} {
		require.Greater(t, seen[k], 20, "%s in %v", k, seen)
	}
	for _, k := range []string{"failover not struck PRIMARY_FAILOVER", "failover not struck PRIMARY_FAILOVER_LOSSY", "failover not struck SWITCHOVER",
		"no grant lost", "regresses pass true", "regresses pass false", "newer term after the lossy fault true", "newer term after the lossy fault false"} {
		require.Greater(t, seen[k], 3, "%s in %v", k, seen)
	}
}

// A loss figure or a failover condition that does not follow from the
// history is named, by this package's code and by `doublerun check`'s: a
// token regression, a lost write or a lost enqueue taken out, a
// regression's reason changed, a failover's struck or lost-grant
// condition turned, and a history whose acknowledgements were taken out.
func TestRecomputeNamesATamperedLoss(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(32, 2))
	var data []byte
	for tries := 0; ; tries++ {
		require.Less(t, tries, 5000, "no history with every kind of loss")
		data = reportOfFault(t, failoverHistory(rng, 1000), scenarios.ExpectRegresses, "PRIMARY_FAILOVER_LOSSY", 10*time.Millisecond, 10*time.Millisecond)
		var r scenarios.Report
		require.NoError(t, json.Unmarshal(data, &r))
		l := r.Metrics.Loss
		if r.Verdict.Pass && len(l.TokenRegressions) > 0 && len(l.LostWrites) > 0 && len(l.LostEnqueues) > 0 && len(l.RerunJobs) > 0 {
			break
		}
	}
	diffs, err := reporttest.Recompute(data)
	require.NoError(t, err)
	require.Empty(t, diffs)

	sub := func(m any, path ...any) any {
		for _, k := range path {
			if i, ok := k.(int); ok {
				m = m.([]any)[i]
			} else {
				m = m.(map[string]any)[k.(string)]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		change func(rep map[string]any)
		named  string
	}{
		{"TokenRegressionsEmptied", func(rep map[string]any) { sub(rep, "metrics", "loss").(map[string]any)["token_regressions"] = []any{} },
			"metrics.loss.token_regressions"},
		{"ARegressionsReasonChanged", func(rep map[string]any) {
			r := sub(rep, "metrics", "loss", "token_regressions", 0).(map[string]any)
			r["why"] = map[string]string{"reissued": "below", "below": "reissued"}[r["why"].(string)]
		}, "metrics.loss.token_regressions[0].why"},
		{"ALostWriteRemoved", func(rep map[string]any) {
			l := sub(rep, "metrics", "loss").(map[string]any)
			l["lost_writes"] = l["lost_writes"].([]any)[1:]
		}, "metrics.loss.lost_writes"},
		{"ALostEnqueueRemoved", func(rep map[string]any) {
			l := sub(rep, "metrics", "loss").(map[string]any)
			l["lost_enqueues"] = l["lost_enqueues"].([]any)[1:]
		}, "metrics.loss.lost_enqueues"},
		{"TheFailoverNeverStruck", func(rep map[string]any) {
			sub(rep, "metrics", "validity", "conditions", 1).(map[string]any)["holds"] = false
		}, "metrics.validity.conditions[1].holds"},
		{"NoGrantLost", func(rep map[string]any) {
			sub(rep, "metrics", "validity", "conditions", 5).(map[string]any)["holds"] = false
		}, "metrics.validity.conditions[5].holds"},
		{"TheAcknowledgementsTakenOut", func(rep map[string]any) { delete(sub(rep, "history").(map[string]any), "acks") },
			"metrics.loss.lost_writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rep map[string]any
			require.NoError(t, json.Unmarshal(data, &rep))
			tc.change(rep)
			js, err := json.Marshal(rep)
			require.NoError(t, err)
			diffs, err := reporttest.Recompute(js)
			require.NoError(t, err)
			require.True(t, slices.ContainsFunc(diffs, func(d string) bool { return strings.HasPrefix(d, tc.named) }), "reporttest: %v", diffs)
			r, err := report.Recompute(js)
			require.NoError(t, err)
			require.True(t, slices.ContainsFunc(r.Diffs, func(d string) bool { return strings.HasPrefix(d, tc.named) }), "doublerun check: %v", r.Diffs)
		})
	}
}
