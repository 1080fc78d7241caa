package chaos_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The reproductions of known limitations, in the style of etcd's
// robustness regressions. Each runs a scenario and checks the property the
// limitation breaks, so it FAILS, with a line starting "REPRODUCED:", when
// the limitation shows. chaos/run.sh repro NAME (make repro-NAME) loops one
// with -count N -failfast and prints "Successful reproduction" or "Failed
// to reproduce". They run only with DOUBLERUN_REPRO=1, because in the
// normal suite they would fail by design; the matrix cells they come from
// run in the normal suite with the matching expectation.

const envRepro = "DOUBLERUN_REPRO"

// reproduce runs sc and reports REPRODUCED when broken finds the
// limitation in its report. The report is kept under DOUBLERUN_REPRO_OUT
// (default: a doublerun-repro directory in the temp dir).
func reproduce(t *testing.T, sc scenarios.Scenario, broken func(*scenarios.Report) (bool, string)) {
	if os.Getenv(envRepro) != "1" {
		t.Skipf("a reproduction fails when it reproduces; run it with chaos/run.sh repro NAME (or %s=1)", envRepro)
	}
	out := os.Getenv("DOUBLERUN_REPRO_OUT")
	if out == "" {
		out = filepath.Join(os.TempDir(), "doublerun-repro")
	}
	out = filepath.Join(out, time.Now().Format("20060102-150405.000"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := scenarios.Run(ctx, sc, scenarios.RunOptions{Stack: stacktest.Shared(t), OutDir: out})
	require.NoError(t, err, "the reproduction could not run")
	require.NoError(t, report.Write(out, rep))
	reporttest.Check(t, filepath.Join(out, filepath.FromSlash(sc.Name), "report.json"))
	require.NotEmpty(t, rep.History.Intervals, "no replica ever led")
	if bad, why := broken(rep); bad {
		t.Errorf("REPRODUCED: %s\n%s\nreport: %s", why, report.Line(rep), filepath.Join(out, filepath.FromSlash(sc.Name), "report.md"))
		return
	}
	t.Logf("did not reproduce this time: %s", report.Line(rep))
}

func cell(t *testing.T, strategy string, topology scenarios.TopologyKind, faultName string) scenarios.Scenario {
	t.Helper()
	sc, err := chaos.Cell{Strategy: strategy, Topology: topology, Fault: faultName}.Scenario()
	require.NoError(t, err)
	return sc
}

// doubleRun finds two replicas doing leader work at once.
func doubleRun(rep *scenarios.Report) (bool, string) {
	dr := rep.Metrics.DoubleRun
	return dr.Total > 0, fmt.Sprintf("double-run of %s in %d episodes (longest %s)", dr.Total, dr.Episodes, dr.Longest)
}

// Issue #556: the advisory lease through a transaction pool of one gives
// two leaders on one backend, with no fault at all.
func TestReproduceIssue556(t *testing.T) {
	reproduce(t, cell(t, "advisory", scenarios.Transaction, fault.None), func(rep *scenarios.Report) (bool, string) {
		bad, why := doubleRun(rep)
		if pid, who := rep.SharedBackend(); pid != 0 {
			why += fmt.Sprintf("; replicas %s were leader on the same backend %d", strings.Join(who, " and "), pid)
		}
		return bad, why
	})
}

// A leader that loses its lease's backend in the middle of a piece of work
// learns of it only at its next poll; meanwhile the lock is free and the
// other replica leads too. The fence refuses the old leader's late write.
func TestReproduceBackendLoss(t *testing.T) {
	reproduce(t, cell(t, "advisory", scenarios.Pinned, fault.TerminateLeaderBackend.Name()), doubleRun)
}

// The paused holder (Kleppmann): a leader frozen in the middle of its work
// for longer than the TTL resumes and writes under a lease that was
// granted to another replica meanwhile. Without the fence the write is
// accepted; TestFaultsInScenarios/FREEZE_LEADER shows the fence refusing
// it.
func TestReproducePausedHolder(t *testing.T) {
	sc := cell(t, "fenced", scenarios.Transaction, fault.FreezeLeader.Name())
	sc.Name += "-unfenced"
	sc.Unfenced = true
	reproduce(t, sc, func(rep *scenarios.Report) (bool, string) {
		sw := rep.Metrics.StaleWrites
		return sw.Accepted > 0, fmt.Sprintf("%d stale writes accepted without the fence", sw.Accepted)
	})
}
