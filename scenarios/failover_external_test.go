package scenarios_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// external exports s as an external stack, with extra variables set.
func external(t *testing.T, s *stack.Stack, extra map[string]string) *stack.Stack {
	t.Helper()
	env := map[string]string{}
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	ext, err := stack.Start(context.Background(), stack.Options{Provider: stack.ProviderExternal,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ext.Close(context.Background()) })
	return ext
}

var externalFailover = Scenario{Name: "external-failover", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct},
	Standby: stack.ReplicationSync, Fault: fault.PrimaryFailover.Name(), Expect: ExpectFenced}

// Your own cluster, for real: doublerun's own HA stack exported as an
// external one, failed over by a shell command (stack.EnvFailoverCommand)
// that asks this test, through a pipe, to kill the primary, promote the
// standby and repoint the address, as a user's `patronictl failover`
// would ask Patroni. The run times each step a client sees, and the
// oracle, on the stack's third server (stack.EnvOracleDSN), keeps the
// history across it.
func TestExternalFailover(t *testing.T) {
	t.Parallel()
	t.Run("TimesTheStepsOfTheUsersFailover", func(t *testing.T) {
		t.Parallel()
		ha := stacktest.OwnHA(t, stack.ReplicationSync)
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
		require.NoError(t, syscall.Mkfifo(in, 0o600))
		require.NoError(t, syscall.Mkfifo(out, 0o600))
		go func() {
			f, err := os.Open(in) // blocks until the command writes
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(f).ReadString('\n')
			f.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			answer := "ok"
			for _, step := range []func(context.Context) error{ha.KillPrimary, ha.Promote, ha.Repoint} {
				if err := step(ctx); err != nil {
					answer = "failed: " + err.Error()
					break
				}
			}
			_ = os.WriteFile(out, []byte(answer+"\n"), 0o600)
		}()
		cmd := fmt.Sprintf(`echo failover > %s && read r < %s && echo "failover: $r" && [ "$r" = ok ]`, in, out)
		ext := external(t, ha, map[string]string{stack.EnvFailoverCommand: cmd, stack.EnvOracleDSN: ha.Oracle().DSN})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		rep, err := Run(ctx, externalFailover, RunOptions{Stack: ext})
		require.NoError(t, err)
		t.Log(report.Line(rep))
		steps := strings.Join(report.FailoverSteps(rep.History), "\n")
		t.Log(steps)
		for _, want := range []string{"failover command started: echo failover", "first failed statement through",
			`failover command exited: exit 0`, `its last line: "failover: ok"`, "the server behind postgres promoted, timeline 2 (was 1)", "first statement on the new primary through"} {
			require.Contains(t, steps, want)
		}
		require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
		reporttest.Save(t, rep)
	})
	// Caught by the check in externalFailOver (package fault).
	t.Run("ACommandThatFailsFailsTheRun", func(t *testing.T) {
		t.Parallel()
		ha := stacktest.OwnHA(t, stack.ReplicationSync)
		ext := external(t, ha, map[string]string{stack.EnvFailoverCommand: `echo "patronictl: cluster doublerun not found" >&2; exit 3`,
			stack.EnvOracleDSN: ha.Oracle().DSN})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err := Run(ctx, externalFailover, RunOptions{Stack: ext})
		require.ErrorContains(t, err, `DOUBLERUN_FAILOVER_COMMAND exit status 3 (its last line: "patronictl: cluster doublerun not found"); the failover did not happen as asked`)
	})
}

// An external failover without a server for the oracle is refused before
// anything runs, in one line that names the variable to set.
func TestExternalFailoverNeedsAnOracle(t *testing.T) {
	t.Parallel()
	ext := external(t, stacktest.Shared(t), map[string]string{stack.EnvFailoverCommand: "patronictl failover --force"})
	_, err := Run(context.Background(), externalFailover, RunOptions{Stack: ext})
	require.EqualError(t, err, "the failover faults on the external provider need DOUBLERUN_ORACLE_DSN: a Postgres server your failover does not touch, where the oracle keeps the run's history")
}
