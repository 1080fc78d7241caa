package chaos_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// RunSets runs the cells on each set's stack, placed on the set its
// servers make up, and writes what a merge reads back to the character; a
// set whose stack runs servers that already ran (the native provider's,
// whatever is asked) is skipped. It tests RunSets' plumbing, so its cell
// is one whose verdict load cannot flip: advisory/direct/none holds its
// lock on one session, while fenced/direct/none overlapped for 225 ms
// beside two CPU hogs (a starved leader's renewal came after its TTL;
// FINDINGS.md, finding 14).
func TestRunSetsSkipsServersThatRanAndWritesWhatMergeReads(t *testing.T) {
	t.Parallel()
	s := stacktest.Shared(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	asked := []string{"pg15-pgbouncer1.18", "pg17-pgbouncer1.24"}
	var starts []chaos.SetStart
	var lines []string
	res, err := chaos.RunSets(ctx, []chaos.Cell{{Strategy: strategy.Advisory, Topology: scenarios.Direct, Fault: fault.None}}, chaos.RunConfig{
		Sets: asked, Replicas: 3, OutDir: out,
		// Every set gets the one shared stack, as the native provider
		// gives its own servers whatever set is asked.
		Start: func(context.Context, string, stack.ReplicationMode) (*stack.Stack, func(), error) {
			return s, func() {}, nil
		},
		OnSet:    func(st chaos.SetStart) { starts = append(starts, st) },
		OnResult: func(done, total int, r chaos.CellResult) { lines = append(lines, r.Line()) },
	})
	require.NoError(t, err)
	have := s.Versions().Set
	require.Len(t, starts, 2)
	require.Equal(t, chaos.SetStart{Asked: asked[0], Stack: s, Cells: 1, Total: 1, Replicas: 3, Dir: filepath.Join(out, asked[0])}, starts[0])
	require.Equal(t, chaos.SetStart{Asked: asked[1], Stack: s, RanFor: asked[0]}, starts[1], "the same servers do not run twice")
	require.Len(t, lines, 1)
	require.Len(t, res.Results, 1)
	require.Equal(t, 1, res.Planned)
	r := res.Results[0]
	require.NoError(t, r.Err)
	require.Equal(t, have, r.Versions)
	require.Equal(t, 3, r.Report.Scenario.Replicas, "--replicas reaches the run")
	require.Equal(t, "advisory/direct/none", r.Scenario.Name)
	require.True(t, res.Verdict().Pass, "%s: %s", res.Verdict().Reason, r.Report.Verdict.Reason)

	m, err := chaos.MergeDirs(out)
	require.NoError(t, err)
	require.Equal(t, res.Summary(), m.Summary(), "a merge of what RunSets wrote is what it returned")
	written, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	require.Equal(t, res.Summary(), string(written), "several sets: the summary of all beside theirs")
	_, err = os.Stat(filepath.Join(out, asked[0], "advisory/direct/none/report.json"))
	require.NoError(t, err)
}

// A cell that cannot run is refused before any stack starts.
func TestRunSetsRefusesABadCellBeforeAnyStack(t *testing.T) {
	t.Parallel()
	start := func(context.Context, string, stack.ReplicationMode) (*stack.Stack, func(), error) {
		t.Error("a stack was started for cells that cannot run")
		return nil, nil, context.Canceled
	}
	for _, tc := range []struct {
		cell     chaos.Cell
		replicas int
		want     string
	}{
		{chaos.Cell{Strategy: strategy.Fenced, Topology: scenarios.Transaction, Fault: fault.TerminateLeaderBackend.Name()}, 0,
			`cell fenced/transaction/TERMINATE_LEADER_BACKEND: field "fault": TERMINATE_LEADER_BACKEND does not apply`},
		{chaos.Cell{Strategy: strategy.Advisory, Topology: scenarios.Transaction, Fault: fault.None}, 1,
			`cell advisory/transaction/none: field "replicas": 1 is too few for expect reproduces`},
	} {
		_, err := chaos.RunSets(context.Background(), []chaos.Cell{tc.cell}, chaos.RunConfig{Replicas: tc.replicas, Start: start})
		require.ErrorContains(t, err, tc.want)
	}
}

// A failover cell runs after the others, on a stack of its own standby
// mode that Start is asked for, and the summary gives its failover
// figures: the plumbing of --standby, on real servers. Both cells are the
// advisory lease's, whose verdicts do not hang on the machine's load:
// without a fault its lock excludes the follower however slowly either
// runs, and across a failover it may overlap. The fenced cells' "no
// double-run" rests on each leader ending its piece before its term's
// TTL, which a loaded machine broke twice in make test: a 248 ms overlap
// in fenced-epoch/direct/SWITCHOVER beside two CPU hogs, and one in
// fenced/direct/none beside two hogs and two more test binaries (load
// average 33), each with every stale write refused. make chaos, run on a
// machine of its own, keeps their expectations (16 of 16 fenced sync
// failover cells safe at load averages 2 to 10).
func TestRunSetsRunsAFailoverCellOnAStackOfItsMode(t *testing.T) {
	t.Parallel()
	shared := stacktest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The cell as --standby gives it.
	const name = "advisory/direct/SWITCHOVER"
	i := slices.IndexFunc(chaos.StandbyMatrix(), func(c chaos.Cell) bool { return c.Name() == name })
	require.GreaterOrEqual(t, i, 0)
	var modes []stack.ReplicationMode
	res, err := chaos.RunSets(ctx, []chaos.Cell{
		chaos.StandbyMatrix()[i],
		{Strategy: strategy.Advisory, Topology: scenarios.Direct, Fault: fault.None},
	}, chaos.RunConfig{
		Start: func(_ context.Context, _ string, standby stack.ReplicationMode) (*stack.Stack, func(), error) {
			modes = append(modes, standby)
			if standby == "" {
				return shared, func() {}, nil
			}
			return stacktest.OwnHA(t, standby), func() {}, nil
		},
	})
	require.NoError(t, err)
	require.Equal(t, []stack.ReplicationMode{"", stack.ReplicationSync}, modes, "the plain cell on a stack without a standby, then SWITCHOVER's on a sync one")
	require.Len(t, res.Results, 2)
	fo := res.Results[1]
	require.NoError(t, fo.Err)
	require.Equal(t, name, fo.Scenario.Name)
	require.Equal(t, stack.ReplicationSync, fo.Report.Scenario.Standby)
	require.True(t, fo.Report.Metrics.Validity.Valid, fo.Report.Verdict.Reason)
	require.True(t, res.Verdict().Pass, "%s: %s", res.Verdict().Reason, fo.Report.Verdict.Reason)
	require.Contains(t, res.Summary(), "## Failover cells")
	require.Contains(t, res.Summary(), "| advisory | SWITCHOVER (sync standby) | direct |")
}
