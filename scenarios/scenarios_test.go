package scenarios_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// short keeps a scenario's measurement brief for tests.
func short(sc Scenario) Scenario {
	sc.Duration = 2 * time.Second
	return sc
}

// runScenario runs sc, shortened, on the shared stack, and checks that
// each replica ran the binary Run should start for it (reexec.Executable):
// this test binary, or for a built-in strategy the stand-in make test
// builds, when it names one.
func runScenario(t *testing.T, sc Scenario) *Report {
	t.Helper()
	s := stacktest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var exes []string
	opts := WithReplicaHook(RunOptions{Stack: s, OutDir: t.TempDir()}, func(pid int) {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		mu.Lock()
		defer mu.Unlock()
		exes = append(exes, exe+fmt.Sprint(err))
	})
	rep, err := Run(ctx, short(sc), opts)
	require.NoError(t, err)
	t.Log(report.Line(rep))
	reporttest.Save(t, rep)
	want, err := reexec.Executable(StandsIn(sc))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, exes, sc.WithDefaults().Replicas)
	for _, exe := range exes {
		require.Equal(t, want+"<nil>", exe, "the replicas of %s run %s", sc.Strategy, want)
	}
	return rep
}

// A built-in strategy's replicas may be any doublerun binary (make test's
// stand-in without the race detector); a strategy this binary registered
// runs here alone, and a replica command's keeper too.
func TestStandsIn(t *testing.T) {
	t.Parallel()
	for _, name := range []string{strategy.Advisory, strategy.AdvisoryUnguarded, strategy.AdvisoryWait, strategy.Fenced, strategy.FencedWait, strategy.FencedEpoch} {
		require.True(t, StandsIn(Scenario{Strategy: name}), name)
		require.False(t, StandsIn(Scenario{Strategy: name, Replica: &replica.Command{Command: []string{"true"}}}), "%s as a command", name)
	}
	require.False(t, StandsIn(Scenario{Strategy: "example-row-lease"}), "registered by this test binary")
	require.False(t, StandsIn(Scenario{Strategy: byoLockStrategy}))
}

// requirePathMeasured asserts that the run watched its built-in replicas'
// backends and saw every replica's arrive through its proxy or a bouncer
// of the run: the traffic-path condition measured, not assumed.
func requirePathMeasured(t *testing.T, rep *Report) {
	t.Helper()
	require.True(t, rep.History.PathWatched, "the runner watched the replicas' backends")
	var path oracle.Condition
	for _, c := range rep.Metrics.Validity.Conditions {
		if c.Name == oracle.ConditionPath {
			path = c
		}
	}
	require.True(t, path.Holds, path.Reason)
	require.Contains(t, path.Figure, " connections of 2 replicas, all through their proxies or the run's bouncers")
	seen := map[string]bool{}
	for _, b := range rep.History.Backends {
		require.Contains(t, []string{oracle.ViaProxy, oracle.ViaPgBouncer, oracle.ViaUnverified}, b.Via, "%+v", b)
		seen[b.Replica] = true
	}
	require.Equal(t, map[string]bool{"r1": true, "r2": true}, seen, "a backend of each replica")
}

func TestIssue556Reproduces(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, Issue556)
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	requirePathMeasured(t, rep)
	require.Positive(t, rep.Metrics.DoubleRun.Total, "two leaders at once")
	require.Equal(t, 2, rep.Metrics.MaxConcurrentLeaders)
	pid, who := rep.SharedBackend()
	require.NotZero(t, pid, "both replicas held the lease on one backend: %v", rep.BackendPIDs())
	require.Equal(t, []string{"r1", "r2"}, who)
	require.Zero(t, rep.Metrics.StaleWrites.Accepted, "the fence still refuses the older leader's writes")
}

func TestIssue556PinnedFixHolds(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, Issue556Pinned)
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	requirePathMeasured(t, rep)
	require.Zero(t, rep.Metrics.DoubleRun.Total)
	require.Equal(t, 1, rep.Metrics.MaxConcurrentLeaders)
	require.Positive(t, rep.Metrics.Writes, "the leader's work went through the transaction pool")
}

func TestIssue556FencedFixHolds(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, Issue556Fenced)
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	require.Zero(t, rep.Metrics.StaleWrites.Accepted)
	require.Zero(t, rep.Metrics.DoubleRun.Total)
}

// A lease the user wrote, plugged into a scenario by name.
func TestUserLeaseRunsInAScenario(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, Scenario{Name: "row-lease-transaction", Strategy: "example-row-lease",
		Topology: Topology{Kind: Transaction, PoolSize: 2}, Expect: ExpectSafe})
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	require.Positive(t, len(rep.History.Intervals))
}

func TestReportFilesRoundTrip(t *testing.T) {
	t.Parallel()
	s := stacktest.Shared(t)
	out := t.TempDir()
	rep, err := Run(context.Background(), short(Catalog[0]), RunOptions{Stack: s, OutDir: out})
	require.NoError(t, err)
	dir := filepath.Join(out, Catalog[0].Name)
	_, err = os.Stat(filepath.Join(dir, "report.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "Run returns data; its callers write the files")
	require.NoError(t, report.Write(out, rep))
	for _, f := range []string{"report.json", "report.md", "timeline.svg", "replicas/r1.log", "replicas/r2.log"} {
		info, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		require.Positive(t, info.Size(), f)
	}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, ReportSchema, back.Schema)
	// The report names the servers it ran on, read from them.
	v := s.Versions()
	require.Equal(t, VersionsInfo{Set: v.Set, Postgres: v.Postgres, PgBouncer: v.PgBouncer, Note: s.VersionsNote()}, back.Stack.Versions)
	require.NotEmpty(t, back.Stack.Versions.Postgres)
	require.NotEmpty(t, back.Stack.Versions.PgBouncer)
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| versions | "+back.Stack.Versions.String()+" |")
	// The raw history recomputes every figure, by the oracle and by a
	// reader of the file; the fence was checked and its view is there.
	again, err := report.Recompute(data)
	require.NoError(t, err)
	require.Empty(t, again.Diffs)
	require.Positive(t, again.Figures)
	reporttest.Check(t, filepath.Join(dir, "report.json"))
	require.NotNil(t, back.Metrics.Linearizability, "%s fences its writes", Catalog[0].Strategy)
	require.Equal(t, oracle.LinearizableYes, back.Metrics.Linearizability.Linearizable)
	require.Contains(t, string(md), "[linearizability.html](linearizability.html)")
	_, err = os.Stat(filepath.Join(dir, report.LinearizabilityView))
	require.NoError(t, err)
	reporttest.Save(t, rep)
}

// No replica outlives its run, even when the run is cut short.
func TestReplicasDoNotOutliveACancelledRun(t *testing.T) {
	t.Parallel()
	s := stacktest.Shared(t)
	var mu sync.Mutex
	var pids []int
	ctx, cancel := context.WithCancel(context.Background())
	opts := WithReplicaHook(RunOptions{Stack: s}, func(pid int) {
		mu.Lock()
		defer mu.Unlock()
		pids = append(pids, pid)
		if len(pids) == 2 {
			time.AfterFunc(500*time.Millisecond, cancel)
		}
	})
	sc := Catalog[0]
	sc.Duration = time.Minute
	_, err := Run(ctx, sc, opts)
	require.ErrorIs(t, err, context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, pids, 2)
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "replica %d still running", pid)
	}
}

func TestRunRejectsBadScenarios(t *testing.T) {
	t.Parallel()
	s := stacktest.Shared(t)
	for _, tc := range []struct {
		name string
		sc   Scenario
		want string
	}{
		{"UnknownStrategy", Scenario{Name: "x", Strategy: "zookeeper", Topology: Topology{Kind: Direct}, Expect: ExpectSafe}, `unknown strategy "zookeeper"; valid: `},
		{"UnknownTopology", Scenario{Name: "x", Strategy: "fenced", Topology: Topology{Kind: "mesh"}, Expect: ExpectSafe}, `unknown topology "mesh"`},
		{"UnknownExpectation", Scenario{Name: "x", Strategy: "fenced", Topology: Topology{Kind: Direct}, Expect: "maybe"}, `unknown expectation "maybe"`},
		{"UnknownFault", Scenario{Name: "x", Strategy: "fenced", Topology: Topology{Kind: Direct}, Expect: ExpectSafe, Fault: "METEOR"}, `unknown fault "METEOR"`},
		{"NegativeReplicas", Scenario{Name: "x", Strategy: "fenced", Topology: Topology{Kind: Direct}, Expect: ExpectSafe, Replicas: -1}, `field "replicas": -1 is below 1: a run needs a replica to lead; use 1 to 8`},
		{"TooManyReplicas", Scenario{Name: "x", Strategy: "fenced", Topology: Topology{Kind: Direct}, Expect: ExpectSafe, Replicas: MaxReplicas + 1}, `field "replicas": 9 is above 8: more can exhaust the PgBouncer session pool`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.sc, RunOptions{Stack: s})
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := Lookup("issue-557")
	require.ErrorContains(t, err, `unknown scenario "issue-557"; valid: advisory-direct, `)
}

// fenceReasons are the reasons a verdict gives for the fence's check.
var fenceReasons = map[string]string{
	"NoLegalOrderFailsWhateverTheWindowsSay":  "the fence's history is not linearizable: its 9 grants, renewals and fenced writes have no legal order (see linearizability.html)",
	"AnUnfinishedCheckFails":                  "the linearizability check of the fence's 9 operations did not finish in time: the fence is unproven",
	"RegressesWithARegressionAndNoLegalOrder": "regressed: 1 token regressions, the first token 2 granted to r2 again, after r2 was granted it; 0 stale writes accepted; the fence's history of 9 operations: linearizable no",
	"RegressesBelow":                          "regressed: 1 token regressions, the first r1 granted token 1, below token 2 of r2; 0 stale writes accepted; the fence's history of 9 operations: linearizable yes",
}

func TestJudgeFailsInEitherDirection(t *testing.T) {
	t.Parallel()
	valid := oracle.Validity{Valid: true}
	double := oracle.Metrics{DoubleRun: oracle.Window{Episodes: 1, Total: oracle.Duration(time.Second)}, Validity: valid}
	stale := oracle.Metrics{StaleWrites: oracle.StaleWrites{Accepted: 1}, Validity: valid}
	clean := oracle.Metrics{Validity: valid}
	orphan := oracle.Metrics{Orphaned: oracle.Orphaned{Window: oracle.Window{Episodes: 1, Total: oracle.Duration(time.Second)}}, Validity: valid}
	regressed := oracle.Metrics{Validity: valid, Loss: &oracle.Loss{TokenRegressions: []oracle.TokenRegression{{
		Grant: oracle.Grant{Replica: "r2", Token: 2}, Earlier: oracle.Grant{Replica: "r2", Token: 2}, Why: oracle.RegressionReissued}}}}
	lostNothing := oracle.Metrics{Validity: valid, Loss: &oracle.Loss{}}
	withFence := func(m oracle.Metrics, verdict string) oracle.Metrics {
		m.Linearizability = &oracle.Linearizability{Linearizable: verdict, Operations: 9}
		return m
	}
	for _, tc := range []struct {
		name   string
		expect Expectation
		m      oracle.Metrics
		pieces int
		pass   bool
	}{
		{"SafeAndClean", ExpectSafe, clean, 5, true},
		{"SafeButDoubleRun", ExpectSafe, double, 5, false},
		{"SafeButStaleWriteAccepted", ExpectSafe, stale, 5, false},
		{"ReproducesAndDoubleRun", ExpectReproduces, double, 5, true},
		{"ReproducesButClean", ExpectReproduces, clean, 5, false},
		{"FencedWithOverlapOnly", ExpectFenced, double, 5, true},
		{"FencedButStaleWriteAccepted", ExpectFenced, stale, 5, false},
		{"NoLeaderWorkFailsSafe", ExpectSafe, clean, 0, false},
		{"NoLeaderWorkFailsFenced", ExpectFenced, clean, 0, false},
		{"ReproducesOrOrphansAndDoubleRun", ExpectReproducesOrOrphans, double, 5, true},
		{"ReproducesOrOrphansAndOrphaned", ExpectReproducesOrOrphans, orphan, 5, true},
		{"ReproducesOrOrphansFailsWhenTheRunIsClean", ExpectReproducesOrOrphans, clean, 5, false},
		{"ReproducesOrOrphansFailsWithAStaleWriteOnly", ExpectReproducesOrOrphans, stale, 5, false},
		{"SafeAndLinearizable", ExpectSafe, withFence(clean, oracle.LinearizableYes), 5, true},
		{"NoLegalOrderFailsWhateverTheWindowsSay", ExpectReproduces, withFence(double, oracle.LinearizableNo), 5, false},
		{"NoLegalOrderFailsAFencedRun", ExpectFenced, withFence(double, oracle.LinearizableNo), 5, false},
		{"AnUnfinishedCheckFails", ExpectSafe, withFence(clean, oracle.LinearizableUnknown), 5, false},
		{"RegressesWithARegressionAndNoLegalOrder", ExpectRegresses, withFence(regressed, oracle.LinearizableNo), 5, true},
		{"RegressesBelow", ExpectRegresses, withFence(oracle.Metrics{Validity: valid, Loss: &oracle.Loss{TokenRegressions: []oracle.TokenRegression{{
			Grant: oracle.Grant{Replica: "r1", Token: 1}, Earlier: oracle.Grant{Replica: "r2", Token: 2}, Why: oracle.RegressionBelow}}}}, oracle.LinearizableYes), 5, true},
		{"RegressesFailsWithoutARegression", ExpectRegresses, withFence(lostNothing, oracle.LinearizableYes), 5, false},
		{"RegressesFailsWithNothingReadBack", ExpectRegresses, double, 5, false},
		{"RegressesFailsWithoutLeaderWork", ExpectRegresses, regressed, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := Judge(tc.expect, tc.m, tc.pieces)
			require.Equal(t, tc.pass, v.Pass, v.Reason)
			if why, ok := fenceReasons[tc.name]; ok {
				require.Equal(t, why, v.Reason)
			}
			require.NotEmpty(t, v.Reason)
		})
	}
}

// A run that could not have shown a double-run is neither a PASS nor a
// FAIL for want of one; what it did measure still fails it.
func TestJudgeInconclusive(t *testing.T) {
	t.Parallel()
	invalid := oracle.Validity{Conditions: []oracle.Condition{
		{Name: oracle.ConditionContention, Holds: true, Figure: "2 of 2"},
		{Name: oracle.ConditionStruck, Reason: "KILL_LEADER killed no replica"},
	}}
	double := oracle.Metrics{DoubleRun: oracle.Window{Episodes: 1, Total: oracle.Duration(time.Second)}, Validity: invalid}
	stale := oracle.Metrics{StaleWrites: oracle.StaleWrites{Accepted: 1}, Validity: invalid}
	clean := oracle.Metrics{Validity: invalid}
	regressedNoOrder := oracle.Metrics{Validity: invalid, Linearizability: &oracle.Linearizability{Linearizable: oracle.LinearizableNo, Operations: 9},
		Loss: &oracle.Loss{TokenRegressions: []oracle.TokenRegression{{Grant: oracle.Grant{Replica: "r2", Token: 2}, Why: oracle.RegressionReissued}}}}
	t.Run("AnInvalidRunNeverPasses", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			expect Expectation
			m      oracle.Metrics
		}{{ExpectSafe, clean}, {ExpectFenced, double}, {ExpectReproduces, double}, {ExpectReproduces, clean}, {ExpectReproducesOrOrphans, clean},
			// A regression measured on a run that could not have shown one
			// (its failover lost no grant) is no pass, and no legal order
			// is what it expects, not a fail.
			{ExpectRegresses, regressedNoOrder}, {ExpectRegresses, clean}} {
			v := Judge(tc.expect, tc.m, 5)
			require.False(t, v.Pass, tc.expect)
			require.True(t, v.Inconclusive, tc.expect)
			require.Equal(t, "INCONCLUSIVE", v.Status())
			require.Equal(t, "fault struck: KILL_LEADER killed no replica", v.Reason)
			require.EqualError(t, v.Err(), "INCONCLUSIVE: fault struck: KILL_LEADER killed no replica")
		}
	})
	t.Run("AFailStaysAFail", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			expect Expectation
			m      oracle.Metrics
		}{{ExpectSafe, double}, {ExpectSafe, stale}, {ExpectFenced, stale}} {
			v := Judge(tc.expect, tc.m, 5)
			require.False(t, v.Pass, tc.expect)
			require.False(t, v.Inconclusive, "%s: a double-run measured on an invalid run is still one", tc.expect)
			require.Equal(t, "FAIL", v.Status())
		}
	})
	t.Run("NoConditionIsNoPass", func(t *testing.T) {
		t.Parallel()
		v := Judge(ExpectSafe, oracle.Metrics{}, 5)
		require.True(t, v.Inconclusive)
		require.Contains(t, v.Reason, "no validity condition was computed")
	})
	require.Equal(t, "PASS", Judge(ExpectSafe, oracle.Metrics{Validity: oracle.Validity{Valid: true}}, 5).Status())
}

func TestParseTopologies(t *testing.T) {
	t.Parallel()
	ts, err := ParseTopologies(" pinned,direct,pinned ")
	require.NoError(t, err)
	require.Equal(t, []TopologyKind{Pinned, Direct}, ts)
	_, err = ParseTopologies("direct,mesh")
	require.EqualError(t, err, `unknown topology "mesh"; valid: direct, session, transaction, pinned, alias`)
	_, err = ParseTopologies(" , ")
	require.EqualError(t, err, `no topology in " , "; valid: direct, session, transaction, pinned, alias`)
	for _, k := range Topologies {
		require.Equal(t, k != Direct, k.Pooled(), k)
	}
}

// What the fault catalog learns of a scenario: its strategy's traits, the
// topology's shape and the timings, defaults applied.
func TestFaultSetting(t *testing.T) {
	t.Parallel()
	lock := lease.DefaultAdvisoryLock
	for _, tc := range []struct {
		sc   Scenario
		want fault.Setting
	}{
		{Scenario{Strategy: strategy.Advisory, Topology: Topology{Kind: Pinned}},
			fault.Setting{ReportsBackendPID: true, AdvisoryLock: &lock, Pooled: true, TTL: 2 * time.Second, Work: 200 * time.Millisecond}},
		{Scenario{Strategy: strategy.AdvisoryUnguarded, Topology: Topology{Kind: Direct}, TTL: time.Second, Work: time.Minute},
			fault.Setting{ReportsBackendPID: true, AdvisoryLock: &lock, TTL: time.Second, Work: time.Minute}},
		{Scenario{Strategy: strategy.Fenced, Topology: Topology{Kind: Session}},
			fault.Setting{Pooled: true, TTL: 2 * time.Second, Work: 200 * time.Millisecond}},
		{Scenario{Strategy: "not-registered", Topology: Topology{Kind: Transaction}},
			fault.Setting{Pooled: true, TTL: 2 * time.Second, Work: 200 * time.Millisecond}},
	} {
		require.Equal(t, tc.want, tc.sc.FaultSetting(), tc.sc.Strategy)
	}
}
