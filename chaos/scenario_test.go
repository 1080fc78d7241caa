package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// runs bounds how many scenarios run at once: each is two replica
// processes and CI has two cores.
var runs = make(chan struct{}, 3)

// runCell runs one cell of the matrix on s and checks that its verdict
// matches the table.
func runCell(t *testing.T, s *stack.Stack, strategy string, topology scenarios.TopologyKind, faultName string) *scenarios.Report {
	t.Helper()
	sc, err := chaos.Cell{Strategy: strategy, Topology: topology, Fault: faultName}.Scenario()
	require.NoError(t, err)
	if faultName == fault.TerminateLeaderBackend.Name() {
		// The backend-loss double-run needs the follower to lead before
		// the old leader's piece ends, and the fault strikes within the
		// piece's first quarter. Under make test's load the chain from
		// the injection to the follower's first piece took up to 300ms
		// (three misses in a row in CI) against the matrix's 200ms piece.
		// With 600ms pieces, beside two CPU hogs and the mutation gate
		// (load average 9 to 10), three runs in a row missed again: the
		// chain took about 450ms, 0.9s and 1.8s (the rest of the piece
		// plus the leaderless gap each report measured). A 2s piece
		// leaves 1.5s after the strike, and of three tries one must win
		// the race. make chaos keeps the matrix's timing.
		sc.Work = 10 * scenarios.DefaultWork
	}
	runs <- struct{}{}
	defer func() { <-runs }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := scenarios.Run(ctx, sc, scenarios.RunOptions{Stack: s, OutDir: t.TempDir()})
	if tokenTableRace(rep, err) {
		// Finding 7: two advisory replicas racing to create the token
		// table; one exits. Not what this test is about: run it again.
		t.Log("a replica lost the token-table race (SQLSTATE 42710); running the cell again")
		rep, err = scenarios.Run(ctx, sc, scenarios.RunOptions{Stack: s, OutDir: t.TempDir()})
	} else if err != nil {
		// Finding 6: a shared PgBouncer 1.18 can crash on a cancel
		// request from any test; if one did, start it again and rerun.
		if notes := s.Repair(ctx); len(notes) > 0 {
			t.Logf("the run failed (%v) with the stack broken: %s; running the cell again", report.FirstLine(err), strings.Join(notes, "; "))
			rep, err = scenarios.Run(ctx, sc, scenarios.RunOptions{Stack: s, OutDir: t.TempDir()})
		}
	}
	// A limitation that needs a race shows in most runs, not all: the
	// backend-loss double-run needs the fault to land mid-piece and the
	// follower to poll before that piece ends, which a loaded machine can
	// miss. One run that shows it proves it; up to three are tried, and
	// every miss is logged.
	for try := 2; err == nil && missedReproduction(rep) && try <= reproduceTries; try++ {
		t.Logf("run %d of at most %d did not reproduce the limitation (%s); running the cell again", try-1, reproduceTries, report.Line(rep))
		rep, err = scenarios.Run(ctx, sc, scenarios.RunOptions{Stack: s, OutDir: t.TempDir()})
	}
	require.NoError(t, err)
	t.Log(report.Line(rep))
	t.Cleanup(func() {
		if t.Failed() {
			dumpRun(t, rep)
		}
	})
	reporttest.Save(t, rep)
	for _, r := range rep.Replicas {
		require.NotContains(t, r.Exit, "exit status", "replica %s failed on its own; log %s", r.ID, r.Log)
	}
	require.True(t, rep.Verdict.Pass, "%s: %s", sc.Name, rep.Verdict.Reason)
	kinds := eventKinds(rep)
	require.Contains(t, kinds, oracle.EventFault)
	require.Contains(t, kinds, oracle.EventHealed, "the fault recovered within the run")
	return rep
}

// reproduceTries bounds the runs of a cell expected to reproduce a
// limitation; see runCell.
const reproduceTries = 3

// missedReproduction reports a run that should have shown a limitation's
// double-run and showed none.
func missedReproduction(rep *scenarios.Report) bool {
	return !rep.Verdict.Pass && rep.Verdict.Expect == scenarios.ExpectReproduces && rep.Metrics.DoubleRun.Episodes == 0
}

// dumpRun logs what a failed run did: its history and the end of each
// replica's log, which goes with the test's temp dir.
func dumpRun(t *testing.T, rep *scenarios.Report) {
	h := rep.History
	for _, e := range h.Events {
		t.Logf("event %s %s %s %s", e.At.Format("05.000"), e.Kind, e.Replica, e.Detail)
	}
	for _, iv := range h.Intervals {
		t.Logf("work  %s-%s %s token %d open=%v", iv.Start.Format("05.000"), iv.End.Format("05.000"), iv.Replica, iv.Token, iv.Open)
	}
	for _, w := range h.Writes {
		t.Logf("write %s %s token %d accepted=%v", w.At.Format("05.000"), w.Replica, w.Token, w.Accepted)
	}
	for _, r := range rep.Replicas {
		data, _ := os.ReadFile(r.Log)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		t.Logf("replica %s (%s) log tail:\n%s", r.ID, r.Exit, data)
	}
}

// tokenTableRace reports whether a replica of the run exited because it
// lost the race to create the advisory lease's token table.
func tokenTableRace(rep *scenarios.Report, err error) bool {
	const race = "SQLSTATE 42710"
	if err != nil {
		return strings.Contains(err.Error(), race)
	}
	for _, r := range rep.Replicas {
		if strings.HasPrefix(r.Exit, "exit status") {
			if data, rerr := os.ReadFile(r.Log); rerr == nil && strings.Contains(string(data), race) {
				return true
			}
		}
	}
	return false
}

func eventKinds(rep *scenarios.Report) []string {
	var kinds []string
	for _, e := range rep.History.Events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// chaosEvents are the details a fault logged about its own steps.
func chaosEvents(rep *scenarios.Report) string {
	var ds []string
	for _, e := range rep.History.Events {
		if e.Kind == oracle.EventChaos {
			ds = append(ds, e.Detail)
		}
	}
	return strings.Join(ds, "; ")
}

// faultedLeader is the replica that led when the fault came.
func faultedLeader(t *testing.T, rep *scenarios.Report) string {
	t.Helper()
	for _, e := range rep.History.Events {
		if e.Kind == oracle.EventFault {
			require.NotEmpty(t, e.Replica)
			return e.Replica
		}
	}
	t.Fatal("no fault event")
	return ""
}

// writesAfter counts the accepted writes after the first event of kind.
func writesAfter(rep *scenarios.Report, kind string) int {
	var at time.Time
	for _, e := range rep.History.Events {
		if e.Kind == kind {
			at = e.At
			break
		}
	}
	n := 0
	for _, w := range rep.History.Writes {
		if w.Accepted && w.At.After(at) {
			n++
		}
	}
	return n
}

func exitOf(rep *scenarios.Report, id string) string {
	for _, r := range rep.Replicas {
		if r.ID == id {
			return r.Exit
		}
	}
	return ""
}

// grantedAfterFault reports whether some replica was granted a term after
// the fault: the lease moved, or was taken again.
func grantedAfterFault(rep *scenarios.Report) bool {
	var fault time.Time
	for _, e := range rep.History.Events {
		if e.Kind == oracle.EventFault {
			fault = e.At
		}
	}
	for _, g := range rep.History.Grants {
		if g.At.After(fault) {
			return true
		}
	}
	return false
}

// Each fault in a real run: the runner injects it at a third of the
// measurement, the fault logs its steps, recovers, and the verdict matches
// the matrix's table. The cells are those where the fault's effect shows
// most plainly in the report.
func TestFaultsInScenarios(t *testing.T) {
	t.Parallel()
	pinned, tx := scenarios.Pinned, scenarios.Transaction
	for _, tc := range []struct {
		strategy string
		topology scenarios.TopologyKind
		fault    string
		check    func(t *testing.T, rep *scenarios.Report)
	}{
		{"advisory", pinned, "TERMINATE_LEADER_BACKEND", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "terminated")
			require.True(t, grantedAfterFault(rep), "losing its backend cost the leader the lock; a new term was granted")
		}},
		{"fenced", tx, "KILL_LEADER", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, exitOf(rep, faultedLeader(t, rep)), "killed")
			require.NotNil(t, rep.Metrics.FailoverLatency, "the survivor took over")
			require.GreaterOrEqual(t, time.Duration(*rep.Metrics.FailoverLatency), rep.Scenario.TTL/2, "after the dead leader's lease ran out")
		}},
		{"fenced", tx, "FREEZE_LEADER", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "SIGSTOP")
			require.Positive(t, rep.Metrics.DoubleRun.Total, "the paused holder's work overlapped its successor's")
			require.Positive(t, rep.Metrics.StaleWrites.Rejected, "the paused holder's late write was refused by the fence")
			require.Zero(t, rep.Metrics.StaleWrites.Accepted)
		}},
		{"advisory", pinned, "PARTITION_LEADER", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "partition removed")
		}},
		{"fenced", tx, "DELAY_LEADER", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "delay removed")
		}},
		// On the pinned topology the pause stalls the old leader's work
		// but not the lease, so the lease fails over while its write
		// waits: a newer term every time (3 of 3 runs, each with its
		// stale write rejected). Through the transaction pool the pause
		// holds the lease's calls too, and whether the old leader or
		// the follower is served first after RESUME is a race: 1 run in
		// 5 had no newer term and was rightly INCONCLUSIVE.
		{"fenced", pinned, "PGBOUNCER_PAUSE", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "took hold")
			require.Contains(t, chaosEvents(rep), "RESUME")
		}},
		{"advisory", pinned, "PGBOUNCER_KILL", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "KILL")
		}},
		{"fenced", tx, "PGBOUNCER_RECONNECT", func(t *testing.T, rep *scenarios.Report) {
			require.Contains(t, chaosEvents(rep), "RECONNECT")
		}},
		{"advisory", pinned, "GRACEFUL_HANDOVER", func(t *testing.T, rep *scenarios.Report) {
			leader := faultedLeader(t, rep)
			require.Equal(t, "exit 0", exitOf(rep, leader), "the leader stopped cleanly")
			require.True(t, grantedAfterFault(rep), "the other replica took over")
			require.NotNil(t, rep.Metrics.FailoverLatency)
		}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			tc.check(t, runCell(t, stacktest.Shared(t), tc.strategy, tc.topology, tc.fault))
		})
	}
}

// The restart cells run on a stack of their own, one after another: a
// restart would cut every other test off the shared stack.
func TestRestarts(t *testing.T) {
	t.Parallel()
	s := stacktest.Own(t)
	t.Run("PGBOUNCER_RESTART", func(t *testing.T) {
		rep := runCell(t, s, "advisory", scenarios.Pinned, "PGBOUNCER_RESTART")
		require.Contains(t, chaosEvents(rep), "started pgbouncer session, transaction")
		require.True(t, grantedAfterFault(rep), "the lease connection died with the bouncer; the lock was taken again")
	})
	t.Run("POSTGRES_RESTART", func(t *testing.T) {
		rep := runCell(t, s, "fenced", scenarios.Direct, "POSTGRES_RESTART")
		require.Contains(t, chaosEvents(rep), "postgres restarted")
		require.Positive(t, writesAfter(rep, oracle.EventHealed), "without a bouncer in the way, work went on after the restart")
	})
}
