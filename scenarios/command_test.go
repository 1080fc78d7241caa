package scenarios_test

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// envTestCommandStrategy makes this test binary, started as a replica
// command, run that built-in strategy's lease over the SQL protocol.
const envTestCommandStrategy = "SCENARIOS_TEST_COMMAND_STRATEGY"

// runCommand runs sc on the shared stack, and checks that nothing any of
// its replicas started is left running.
func runCommand(t *testing.T, sc Scenario, opts RunOptions) (*Report, error) {
	t.Helper()
	var mu sync.Mutex
	var pids []int
	opts.Stack = stacktest.Shared(t)
	opts.OutDir = t.TempDir()
	opts = WithReplicaHook(opts, func(pid int) {
		mu.Lock()
		defer mu.Unlock()
		pids = append(pids, pid)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, sc, opts)
	mu.Lock()
	defer mu.Unlock()
	for _, pid := range pids {
		require.False(t, GroupAlive(pid), "the process group of replica %d still runs", pid)
	}
	if rep != nil {
		t.Log(report.Line(rep))
		reporttest.Save(t, rep)
	}
	return rep, err
}

// A replica that reports no leader work cannot pass as safe, nor as
// anything else: the verdict says no work was logged.
func TestJudgeSilentReplicaIsNotSafe(t *testing.T) {
	t.Parallel()
	for _, expect := range []Expectation{ExpectSafe, ExpectFenced} {
		v := Judge(expect, oracle.Metrics{}, 0)
		require.False(t, v.Pass, expect)
		require.Contains(t, v.Reason, "no leader work")
	}
}

// A replica command's problems found in the scenario itself: each one
// line naming the field and the fix.
func TestReplicaCommandValidate(t *testing.T) {
	t.Parallel()
	base := Scenario{Name: "x", Strategy: strategy.Advisory, Topology: Topology{Kind: Direct}, Expect: ExpectSafe}
	for _, tc := range []struct {
		name    string
		replica replica.Command
		want    string
	}{
		{"NoCommand", replica.Command{}, `field "replica.command": missing; give the program`},
		{"ProtocolVariable", replica.Command{Command: []string{"x"}, Env: map[string]string{"DOUBLERUN_LEASE_DSN": "y"}},
			`field "replica.env.DOUBLERUN_LEASE_DSN": is the protocol's, set by the runner for each replica; rename it`},
		{"BadRegularExpression", replica.Command{Command: []string{"x"}, Log: &replica.LogPatterns{BecameLeader: "(leader", LostLeadership: "lost"}},
			`field "replica.log.became_leader": "(leader" is not a regular expression (missing closing ): ` + "`(leader`" + `); write Go's RE2 syntax`},
		{"NoPattern", replica.Command{Command: []string{"x"}, Log: &replica.LogPatterns{}}, `field "replica.log": has no pattern`},
		{"HalfAPair", replica.Command{Command: []string{"x"}, Log: &replica.LogPatterns{WorkStarted: "start"}}, `field "replica.log": needs work_started and work_ended together`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := base
			sc.Replica = &tc.replica
			err := sc.Validate()
			require.Error(t, err)
			require.NotContains(t, err.Error(), "\n")
			require.Contains(t, err.Error(), tc.want)
		})
	}
	sc, err := ParseScenario([]byte(`{"strategy": "advisory", "topology": {"kind": "pinned"}, "expect": "safe",
		"replica": {"command": ["/usr/bin/python3", "lease.py"], "env": {"A": "b"}, "log": {"became_leader": "leader", "lost_leadership": "lost"}}}`), "mine")
	require.NoError(t, err)
	require.Equal(t, &replica.Command{Command: []string{"/usr/bin/python3", "lease.py"}, Env: map[string]string{"A": "b"},
		Log: &replica.LogPatterns{BecameLeader: "leader", LostLeadership: "lost"}}, sc.Replica)
	_, err = ParseScenario([]byte(`{"strategy": "advisory", "topology": {"kind": "pinned"}, "expect": "safe", "replica": {"comand": ["x"]}}`), "mine")
	require.EqualError(t, err, `field "replica": unknown field "comand"; valid: command, env, log (with became_leader, lost_leadership, work_started, work_ended)`)
}

// Bad replica commands each end the run with one line naming the problem
// and the fix, and leave nothing running.
func TestCommandReplicaBadInput(t *testing.T) {
	t.Parallel()
	sc := Scenario{Name: "bad-command", Strategy: strategy.Advisory, Topology: Topology{Kind: Direct}, Expect: ExpectSafe, Duration: 2 * time.Second}
	with := func(c replica.Command) Scenario {
		s := sc
		s.Replica = &c
		return s
	}
	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		_, err := runCommand(t, with(replica.Command{Command: []string{"no-such-program-doublerun"}}), RunOptions{})
		require.EqualError(t, err, `replica command "no-such-program-doublerun": not found; install it, or give its full path as the first word of "replica.command"`)
	})
	t.Run("ExitsAtOnce", func(t *testing.T) {
		t.Parallel()
		_, err := runCommand(t, with(replica.Command{Command: []string{"sh", "-c", "echo cannot reach the lease >&2; exit 3"}}), RunOptions{})
		require.Error(t, err)
		require.NotContains(t, err.Error(), "\n")
		require.Contains(t, err.Error(), `replica r`)
		require.Contains(t, err.Error(), `exited before any leader work was reported (exit status 3), its last line: "cannot reach the lease"; fix the command`)
	})
	t.Run("NeverReports", func(t *testing.T) {
		t.Parallel()
		rep, err := runCommand(t, with(replica.Command{Command: []string{"sleep", "600"}}), RunOptions{LeaderWait: 2 * time.Second})
		require.NoError(t, err)
		require.False(t, rep.Verdict.Pass)
		require.Contains(t, rep.Verdict.Reason, "no leader work was reported: in 2s no replica command called doublerun.work_begin")
		again, err := report.Recompute(mustJSON(t, rep))
		require.NoError(t, err)
		require.Empty(t, again.Diffs, "doublerun check agrees with the verdict and its reason")
	})
	t.Run("PrintsLinesThatMatchNoPattern", func(t *testing.T) {
		t.Parallel()
		c := replica.Command{Command: []string{"sh", "-c", "while true; do echo polling; sleep 0.1; done"},
			Log: &replica.LogPatterns{BecameLeader: "^became leader", LostLeadership: "^lost leadership"}}
		rep, err := runCommand(t, with(c), RunOptions{LeaderWait: 2 * time.Second})
		require.NoError(t, err)
		require.False(t, rep.Verdict.Pass)
		require.Regexp(t, `^no leader work was reported: in 2s the replica commands printed \d+ lines and 0 matched a pattern`, rep.Verdict.Reason)
	})
	t.Run("LeavesChildrenBehind", func(t *testing.T) {
		t.Parallel()
		// A child that ignores SIGTERM outlives the command the runner
		// stops; the run says so, fails, and kills it.
		c := replica.Command{Command: []string{"sh", "-c", `(trap "" TERM; exec sleep 600) &
while true; do echo "became leader"; sleep 0.3; done`},
			Log: &replica.LogPatterns{BecameLeader: "^became leader$", LostLeadership: "^lost$"}}
		s := with(c)
		s.Replicas = 1
		rep, err := runCommand(t, s, RunOptions{})
		require.NoError(t, err)
		require.False(t, rep.Verdict.Pass)
		require.Contains(t, rep.Verdict.Reason, "left processes of its group running after it exited")
		require.Equal(t, []string{"r1"}, rep.Protocol.LeftBehind)
	})
}

// A command whose child outlives it fails its run, and the child is
// killed: runCommand finds nothing of its group running.
func TestCommandReplicaLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	c := replica.Command{Command: []string{"sh", "-c", `(trap "" TERM; exec sleep 600) &
while true; do echo "became leader"; sleep 0.3; done`},
		Log: &replica.LogPatterns{BecameLeader: "^became leader$", LostLeadership: "^lost$"}}
	sc := Scenario{Name: "left-behind", Strategy: strategy.Advisory, Topology: Topology{Kind: Direct}, Expect: ExpectSafe,
		Duration: time.Second, Replicas: 1, Replica: &c}
	rep, err := runCommand(t, sc, RunOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, rep.Protocol.LeftBehind)
	require.False(t, rep.Verdict.Pass, "what ran unmeasured cannot pass")
	require.Equal(t, "FAIL", rep.Verdict.Status(), "and is a failure, not a run that could not fail")
}

// The built-in advisory lease run as a replica command, reporting over
// the SQL functions, reproduces #556 as it does in process.
func TestBuiltInLeaseThroughTheCommand(t *testing.T) {
	t.Parallel()
	sc := Issue556
	sc.Duration = 3 * time.Second
	sc.Replica = &replica.Command{Command: []string{os.Args[0], "-test.run=^$"}, Env: map[string]string{envTestCommandStrategy: strategy.Advisory}}
	rep, err := runCommand(t, sc, RunOptions{})
	require.NoError(t, err)
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	require.Equal(t, replica.ModeSQL, rep.Protocol.Mode)
	require.Positive(t, rep.Metrics.DoubleRun.Total)
	pid, who := rep.SharedBackend()
	require.NotZero(t, pid, "both on one backend, as reported through doublerun.work_begin")
	require.Equal(t, []string{"r1", "r2"}, who)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// Replicas that ignore SIGTERM are killed at the one deadline the grace
// period sets, every one of them (a deadline that fired for the first
// alone left the second running until its own end; one per replica would
// kill the second a whole grace later), and the run then ends without
// waiting for anything a grace long. What follows the last kill (the
// events, the watchers' stop, the history's load from the oracle server
// and the report) took 0.26 to 0.38 s in four runs at load average 24,
// 1.07 s beside two CPU hogs and make test's other packages, and 2.2 s at
// load average 16 beside a full mutation gate, with both kills on time
// (4.08 and 4.09 s): that work is CPU, not a wait, so the bound on it is
// the grace, the length of the wait it must not add. (Both replicas say
// they lead, so the verdict is a double-run; it is beside the point here.)
func TestStopKillsEveryReplicaAtOneDeadline(t *testing.T) {
	t.Parallel()
	const grace = 4 * time.Second
	c := replica.Command{Command: []string{"sh", "-c", `trap "" TERM; while true; do echo "became leader"; sleep 0.2; done`},
		Log: &replica.LogPatterns{BecameLeader: "^became leader$", LostLeadership: "^lost$"}}
	sc := Scenario{Name: "ignores-sigterm", Strategy: strategy.Advisory, Topology: Topology{Kind: Direct}, Expect: ExpectSafe,
		Duration: time.Second, Replicas: 2, Replica: &c}
	rep, err := runCommand(t, sc, WithStopGrace(RunOptions{}, grace))
	returned := time.Now()
	require.NoError(t, err)
	var end time.Time
	killed := map[string]time.Time{}
	for _, e := range rep.History.Events {
		switch e.Kind {
		case oracle.EventMeasureEnd:
			end = e.At
		case oracle.EventReplicaKilled:
			require.Equal(t, "did not stop within 4s", e.Detail)
			killed[e.Replica] = e.At
		}
	}
	require.False(t, end.IsZero())
	require.Len(t, killed, 2, "both replicas were killed: %v", rep.History.Events)
	var last time.Time
	for id, at := range killed {
		require.GreaterOrEqual(t, at.Sub(end), grace, "%s was killed before its grace ended", id)
		require.Less(t, at.Sub(end), grace+grace/2, "%s was killed late", id)
		if at.After(last) {
			last = at
		}
	}
	// The oracle's clock is this machine's: the native provider, or a
	// container on it.
	t.Logf("killed %s after the measurement's end, run returned %s after the last kill", killedAfter(killed, end), returned.Sub(last))
	require.Less(t, returned.Sub(last), grace, "the run ended %s after its last kill", returned.Sub(last))
}

// killedAfter is how long after end each replica was killed.
func killedAfter(killed map[string]time.Time, end time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for id, at := range killed {
		out[id] = at.Sub(end)
	}
	return out
}
