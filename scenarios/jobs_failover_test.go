package scenarios_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// The job worker across a promotion that lost the last commits: the
// replicas enqueue and the leader completes while the standby is
// detached, so the new primary lacks some acknowledged enqueues and
// completions. The report counts as lost exactly the acknowledged
// enqueues whose job the new primary does not hold, read back from it
// (history.survivors.jobs), and doublerun check and reporttest's code of
// its own both recompute every figure from the history: the worker's,
// the lease's loss and the failover's validity.
func TestJobsAcrossALossyFailover(t *testing.T) {
	t.Parallel()
	s := stacktest.OwnHA(t, stack.ReplicationAsync)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sc := Scenario{Name: "jobs-failover-lossy", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct},
		Standby: stack.ReplicationAsync, Fault: fault.PrimaryFailoverLossy.Name(), Jobs: true, Expect: ExpectRegresses,
		PollInterval: 50 * time.Millisecond}
	dir := t.TempDir()
	rep, err := Run(ctx, sc, RunOptions{Stack: s, OutDir: dir})
	require.NoError(t, err)
	t.Log(report.Line(rep))
	// The plain fence's token goes back across the loss, as in every run
	// of finding 14: the run shows what it was set up to show.
	require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
	h, l := rep.History, rep.Metrics.Loss
	require.NotNil(t, l)
	require.NotNil(t, h.Survivors)
	require.NotEmpty(t, h.Survivors.Jobs, "the new primary's jobs were read back")
	require.NotEmpty(t, h.JobRuns, "the leader ran jobs and told the oracle")

	// The lost enqueues from the acknowledgements and the survivors, here.
	there := map[string]bool{}
	for _, k := range h.Survivors.Jobs {
		there[k] = true
	}
	var lost, kept []string
	completed := map[string]bool{}
	for _, a := range h.Acks {
		switch {
		case a.Kind == oracle.AckCompleted:
			completed[a.Key] = true
		case a.Kind != oracle.AckEnqueue:
		case there[a.Key]:
			kept = append(kept, a.Key)
		default:
			lost = append(lost, a.Key)
		}
	}
	require.NotEmpty(t, kept, "acknowledged enqueues survived the promotion")
	require.NotEmpty(t, completed, "the leader's completions were acknowledged")
	var counted []string
	for _, a := range l.LostEnqueues {
		counted = append(counted, a.Key)
	}
	require.Equal(t, lost, counted, "every acknowledged enqueue missing from the new primary is counted lost, and no other")
	require.NotEmpty(t, lost, "the replicas enqueued on the primary alone while the standby was detached")

	require.NoError(t, report.Write(dir, rep))
	md, err := os.ReadFile(filepath.Join(dir, sc.Name, "report.md"))
	require.NoError(t, err)
	c := report.CountLoss(h, l)
	require.Contains(t, string(md), "| **acknowledged enqueues lost** | "+strconv.Itoa(len(lost))+" of "+strconv.Itoa(len(lost)+len(kept))+" |")
	require.Contains(t, string(md), "| **completed jobs run again** | "+strconv.Itoa(c.RerunJobs)+" of "+strconv.Itoa(len(completed))+" completed")
	data, err := os.ReadFile(filepath.Join(dir, sc.Name, "report.json"))
	require.NoError(t, err)
	r, err := report.Recompute(data)
	require.NoError(t, err)
	require.Empty(t, r.Diffs, "doublerun check recomputes the report")
	// reporttest's code of its own recomputes the report, the lease's
	// loss and the failover's validity too, and keeps it for make test's
	// doublerun check.
	reporttest.Save(t, rep)
}
