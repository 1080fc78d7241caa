package reporttest_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }

// randomHistory is a run's history with every kind of record, on a grid of
// grain µs so that instants often coincide: pieces of work, grants,
// faults and deaths, lock samples and claims, and a fence whose grants,
// renewals and writes follow a lease in most histories and are shuffled
// out of any legal order in the rest.
func randomHistory(rng *rand.Rand, grain int) oracle.History {
	n := func(below int) int { return grain * rng.IntN(max(1, below/grain)) }
	replicas := []string{"r1", "r2", "r3"}
	h := oracle.History{Start: at(n(20000)), End: at(100000 + n(20000))}
	for range rng.IntN(12) {
		from := n(120000)
		h.Intervals = append(h.Intervals, oracle.Interval{Replica: replicas[rng.IntN(3)], Token: int64(1 + rng.IntN(4)),
			Start: at(from), End: at(from + grain + n(20000))})
	}
	for _, r := range replicas {
		h.Events = append(h.Events, oracle.Event{Kind: oracle.EventReplicaStarted, Replica: r, At: t0})
	}
	kinds := []string{oracle.EventFault, oracle.EventHealed, oracle.EventInjected, oracle.EventReplicaKilled, oracle.EventReplicaStopped, oracle.EventChaos}
	for range rng.IntN(6) {
		h.Events = append(h.Events, oracle.Event{Kind: kinds[rng.IntN(len(kinds))], Replica: replicas[rng.IntN(3)], At: at(n(120000))})
	}
	// Replicas claim backends and let go of them; samples show the lock
	// held on a backend for stretches, longer than the claims at times.
	pids := []int32{7, 8, 9}
	for range rng.IntN(12) {
		from := n(110000)
		replica := replicas[rng.IntN(3)]
		h.Events = append(h.Events, oracle.Event{Kind: oracle.EventLockClaim, Replica: replica,
			Detail: oracle.ClaimDetail(pids[rng.IntN(3)], 271, 1), At: at(from)})
		if rng.IntN(4) > 0 {
			h.Events = append(h.Events, oracle.Event{Kind: oracle.EventLockClaim, Replica: replica,
				Detail: oracle.ClaimDetail(0, 271, 1), At: at(from + n(30000))})
		}
	}
	held := map[int32]*bool{}
	for now := n(5000); now < 130000; now += grain + n(8000) {
		for _, p := range pids {
			_, was := held[p]
			if rng.IntN(5) == 0 {
				was = !was
			}
			if !was {
				delete(held, p)
				continue
			}
			var linked *bool
			if rng.IntN(2) == 0 {
				v := rng.IntN(2) == 0
				linked = &v
			}
			held[p] = linked
		}
		s := oracle.LockSample{At: at(now)}
		for _, p := range pids {
			if linked, ok := held[p]; ok {
				s.Held = append(s.Held, oracle.LockHolding{PID: p, ClientLinked: linked})
			}
		}
		h.Locks = append(h.Locks, s)
	}
	// A lease: grants raise the token, the holder renews and writes; a
	// deposed holder's late write is refused.
	token, holder, now := int64(0), "", n(5000)
	for range rng.IntN(8) {
		width := grain + n(3000)
		if rng.IntN(3) == 0 || token == 0 {
			token++
			holder = replicas[rng.IntN(3)]
			h.Grants = append(h.Grants, oracle.Grant{Replica: holder, Token: token, At: at(now + width)})
			h.TokenOps = append(h.TokenOps, oracle.TokenOp{Kind: oracle.TokenGrant, Replica: holder, Token: token, Call: at(now), Return: at(now + width)})
		} else if rng.IntN(2) == 0 {
			h.TokenOps = append(h.TokenOps, oracle.TokenOp{Kind: oracle.TokenRenewal, Replica: holder, Token: token, Call: at(now), Return: at(now + width)})
		}
		for range rng.IntN(3) {
			t := token - int64(rng.IntN(2))
			w := oracle.Write{Replica: holder, Token: t, Call: at(now - n(4000)), At: at(now + n(4000)), Accepted: t == token, Fenced: rng.IntN(8) > 0}
			h.Writes = append(h.Writes, w)
		}
		now += width + n(6000)
	}
	whole(rng, &h, grain)
	if rng.IntN(3) == 0 && len(h.Writes) > 0 { // a fence that lied
		w := &h.Writes[rng.IntN(len(h.Writes))]
		w.Accepted = !w.Accepted
	}
	if rng.IntN(6) == 0 && len(h.TokenOps) > 0 { // a token granted twice
		h.TokenOps = append(h.TokenOps, h.TokenOps[rng.IntN(len(h.TokenOps))])
		h.TokenOps[len(h.TokenOps)-1].Kind = oracle.TokenGrant
	}
	// The replicas' backends as the runner watched them, in most
	// histories: each replica's seen through its path, one around it, or
	// one never seen.
	if h.PathWatched = rng.IntN(4) > 0; h.PathWatched {
		vias := []string{oracle.ViaProxy, oracle.ViaPgBouncer, oracle.ViaUnverified, oracle.ViaProxy, oracle.ViaOther}
		for _, r := range replicas[:2+rng.IntN(2)] {
			h.Backends = append(h.Backends, oracle.Backend{At: h.Start, Replica: r, PID: int32(100 + rng.IntN(50)), Via: vias[rng.IntN(len(vias))]})
		}
	}
	return h
}

// whole makes h a history a run could have written, which `doublerun
// check` refuses to recompute otherwise (report.ErrEvidence): a replica
// works one piece at a time, so its overlapping pieces are moved to begin
// where the one before ended; a grant has a piece of its replica under
// its token, and a write lands in a piece of its replica, so a piece is
// added after the replica's last one where none is there. Pieces of
// different replicas still overlap at random: those are the double-runs.
func whole(rng *rand.Rand, h *oracle.History, grain int) {
	n := func(below int) int { return grain * rng.IntN(max(1, below/grain)) }
	slices.SortStableFunc(h.Intervals, func(a, b oracle.Interval) int { return a.Start.Compare(b.Start) })
	last := map[string]time.Time{}
	for i := range h.Intervals {
		iv := &h.Intervals[i]
		if end, ok := last[iv.Replica]; ok && iv.Start.Before(end) {
			iv.Start, iv.End = end, end.Add(iv.End.Sub(iv.Start))
		}
		last[iv.Replica] = iv.End
	}
	piece := func(replica string, token int64, from time.Time) oracle.Interval {
		if end, ok := last[replica]; ok && from.Before(end) {
			from = end
		}
		iv := oracle.Interval{Replica: replica, Token: token, Start: from, End: from.Add(time.Duration(grain+n(3000)) * time.Microsecond)}
		h.Intervals = append(h.Intervals, iv)
		last[replica] = iv.End
		return iv
	}
	for _, g := range h.Grants {
		if !slices.ContainsFunc(h.Intervals, func(iv oracle.Interval) bool { return iv.Replica == g.Replica && iv.Token == g.Token }) {
			piece(g.Replica, g.Token, g.At)
		}
	}
	for i := range h.Writes {
		w := &h.Writes[i]
		if slices.ContainsFunc(h.Intervals, func(iv oracle.Interval) bool {
			return iv.Replica == w.Replica && !w.At.Before(iv.Start) && !w.At.After(iv.End)
		}) {
			continue
		}
		iv := piece(w.Replica, w.Token, w.At)
		w.At = iv.Start
		if w.Call.After(w.At) {
			w.Call = w.At
		}
	}
	slices.SortStableFunc(h.Intervals, func(a, b oracle.Interval) int { return a.Start.Compare(b.Start) })
}

// reportOf is the report a run with history h would write.
func reportOf(t *testing.T, h oracle.History, expect scenarios.Expectation, gap, orphan time.Duration) []byte {
	t.Helper()
	return reportOfFault(t, h, expect, "", gap, orphan)
}

// reportOfFault is the report of a run of fault, whose name h's fault
// and heal events then carry too.
func reportOfFault(t *testing.T, h oracle.History, expect scenarios.Expectation, fault string, gap, orphan time.Duration) []byte {
	t.Helper()
	if fault != "" {
		h.Events = slices.Clone(h.Events)
		for i, e := range h.Events {
			if e.Kind == oracle.EventFault || e.Kind == oracle.EventHealed {
				h.Events[i].Detail = fault
			}
		}
	}
	rep := scenarios.Report{Schema: scenarios.ReportSchema, Scenario: scenarios.Scenario{Name: "random", Expect: expect, Fault: fault},
		GapTolerance: oracle.Duration(gap), OrphanTolerance: oracle.Duration(orphan), CheckTimeout: oracle.Duration(time.Minute), History: h}
	rep.Metrics = oracle.Analyze(h, rep.Analysis())
	rep.Verdict = scenarios.Judge(expect, rep.Metrics, rep.Pieces())
	js, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	return js
}

// The figures this package recomputes from report.json agree with the
// oracle's over random histories, linearizability included, and so does
// `doublerun check`'s path: two implementations of every definition that
// share no code, and neither may go quiet: the histories make both legal
// and illegal fences, double-runs and orphans.
func TestRecomputeAgreesWithTheOracle(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(26, 1))
	expects := []scenarios.Expectation{scenarios.ExpectSafe, scenarios.ExpectReproduces, scenarios.ExpectFenced, scenarios.ExpectReproducesOrOrphans}
	seen := map[string]int{}
	for trial := range 400 {
		grain := []int{1, 1000, 10000}[trial%3]
		h := randomHistory(rng, grain)
		// Every expectation meets a fault held to outlast the lease, one
		// that acts once, and a history whose faults are unnamed.
		fault := []string{"", "FREEZE_LEADER", "PGBOUNCER_PAUSE", "KILL_LEADER"}[trial/4%4]
		if fault != "" && !slices.ContainsFunc(h.Events, func(e oracle.Event) bool { return e.Kind == oracle.EventFault }) {
			h.Events = append(h.Events, oracle.Event{Kind: oracle.EventFault, Replica: "r1", At: h.Start.Add(h.End.Sub(h.Start) / 8)})
		}
		data := reportOfFault(t, h, expects[trial%4], fault, time.Duration(rng.IntN(40))*time.Millisecond-5*time.Millisecond,
			time.Duration(rng.IntN(30))*time.Millisecond)
		diffs, err := reporttest.Recompute(data)
		require.NoError(t, err)
		require.Empty(t, diffs, "trial %d:\n%s", trial, data)
		again, err := report.Recompute(data)
		require.NoError(t, err)
		require.Empty(t, again.Diffs, "trial %d", trial)
		var rep scenarios.Report
		require.NoError(t, json.Unmarshal(data, &rep))
		m := rep.Metrics
		if l := m.Linearizability; l != nil {
			seen["linearizable "+l.Linearizable]++
		}
		if m.DoubleRun.Episodes > 0 {
			seen["double-run"]++
		}
		if m.Orphaned.Episodes > 0 {
			seen["orphaned"]++
		}
		if m.Orphaned.Reentries > 0 {
			seen["re-entered"]++
		}
		if len(m.Orphaned.LeftHeld) > 0 {
			seen["left held"]++
		}
		if m.FailoverLatency != nil {
			seen["failover"]++
		}
		if c := m.Validity.Conditions[2]; c.Name == oracle.ConditionPath && !c.Holds {
			seen["path around"]++
		} else if rep.History.PathWatched {
			seen["path watched"]++
		}
		if c := m.Validity.Conditions[4]; c.Name == oracle.ConditionNewerTerm && strings.HasPrefix(c.Figure, "no newer term") {
			seen["no newer term"]++
		} else if strings.Contains(c.Figure, "was granted token") {
			seen["newer term"]++
		}
	}
	for _, k := range []string{"linearizable yes", "linearizable no", "double-run", "orphaned", "re-entered", "left held", "failover", "path around", "path watched"} {
		require.Greater(t, seen[k], 20, "%s in %v", k, seen)
	}
	// Only the 50 trials judged by stale writes alone under a held fault
	// judge the newer term.
	for _, k := range []string{"no newer term", "newer term"} {
		require.Greater(t, seen[k], 5, "%s in %v", k, seen)
	}
}

// A figure that does not follow from the history is named, whichever
// figure it is; so is one whose source the history lacks.
func TestRecomputeNamesWhatDiffers(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(26, 2))
	var data []byte
	var rep map[string]any
	for { // a passing history with a double-run, an orphan and a legal fence
		data = reportOf(t, randomHistory(rng, 1000), scenarios.ExpectFenced, 10*time.Millisecond, 10*time.Millisecond)
		var r scenarios.Report
		require.NoError(t, json.Unmarshal(data, &r))
		m := r.Metrics
		if r.Verdict.Pass && m.DoubleRun.Episodes > 0 && m.Orphaned.Episodes > 0 && m.Linearizability != nil && m.Linearizability.Holds() && m.Validity.Valid &&
			slices.ContainsFunc(r.History.Writes, func(w oracle.Write) bool { return w.Accepted && w.Fenced }) {
			break
		}
	}
	edit := func(change func(rep map[string]any)) []string {
		require.NoError(t, json.Unmarshal(data, &rep))
		change(rep)
		js, err := json.Marshal(rep)
		require.NoError(t, err)
		diffs, err := reporttest.Recompute(js)
		require.NoError(t, err)
		return diffs
	}
	metrics := func(rep map[string]any) map[string]any { return rep["metrics"].(map[string]any) }
	sub := func(m map[string]any, k string) map[string]any { return m[k].(map[string]any) }

	diffs := edit(func(rep map[string]any) { sub(metrics(rep), "double_run")["total"] = 1e6 })
	require.Len(t, diffs, 1)
	require.True(t, strings.HasPrefix(diffs[0], "metrics.double_run.total: report 1000000, recomputed "), diffs[0])
	diffs = edit(func(rep map[string]any) { sub(metrics(rep), "linearizability")["linearizable"] = "no" })
	require.Equal(t, []string{"metrics.linearizability.linearizable: report no, recomputed yes"}, diffs)
	diffs = edit(func(rep map[string]any) { sub(rep, "verdict")["pass"] = false })
	require.Equal(t, []string{"verdict.pass: report false, recomputed true"}, diffs)
	diffs = edit(func(rep map[string]any) { delete(metrics(rep), "terms") })
	require.Len(t, diffs, 1)
	require.Contains(t, diffs[0], "metrics.terms: report none, recomputed ")
	// Without the lock samples the orphaned-lock window cannot be
	// recomputed.
	diffs = edit(func(rep map[string]any) { delete(sub(rep, "history"), "locks") })
	require.NotEmpty(t, diffs)
	for _, d := range diffs {
		require.True(t, strings.HasPrefix(d, "metrics.orphaned."), d)
	}
	// Writes moved before every grant: an accepted one has no legal
	// place any more.
	diffs = edit(func(rep map[string]any) {
		for _, w := range sub(rep, "history")["writes"].([]any) {
			w.(map[string]any)["call"], w.(map[string]any)["at"] = t0.Add(-time.Hour), t0.Add(-time.Hour)
		}
	})
	require.Contains(t, diffs, "metrics.linearizability.linearizable: report yes, recomputed no")

	for _, bad := range []string{`{}`, `[]`, `not json`, `{"metrics": {}, "verdict": {}, "gap_tolerance_ms": 1, "orphan_tolerance_ms": 1}`} {
		_, err := reporttest.Recompute([]byte(bad))
		require.Error(t, err, bad)
	}
}

// Reports of real runs, saved from make chaos and make test: every figure
// recomputes from each one's history, by this package's code and by
// `doublerun check`'s.
func TestSavedReportsRecompute(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "reports", "*", "report.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 3, "the saved reports are in testdata/reports")
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			t.Parallel()
			reporttest.Check(t, p)
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			r, err := report.Recompute(data)
			require.NoError(t, err)
			require.Empty(t, r.Diffs)
		})
	}
}

// Save keeps the files where DOUBLERUN_TEST_REPORTS says, under the test
// binary's and the test's names, and writes nothing anywhere else when it
// is unset.
func TestDir(t *testing.T) {
	root := t.TempDir()
	t.Setenv(reporttest.EnvReports, root)
	require.Equal(t, filepath.Join(root, "reporttest", "TestDir"), reporttest.Dir(t))
	t.Run("Sub test/with odd:chars", func(t *testing.T) {
		require.Equal(t, filepath.Join(root, "reporttest", "TestDir", "Sub_test", "with_odd_chars"), reporttest.Dir(t))
	})
	t.Setenv(reporttest.EnvReports, "")
	require.NotContains(t, reporttest.Dir(t), root)
}
