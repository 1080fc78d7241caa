package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestFailoverBadInputGetsOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ZeroTrials", []string{"--trials", "0"}, "doublerun failover: --trials must be from 1 to 1000, not 0"},
		{"TooManyTrials", []string{"--trials", "5000"}, "doublerun failover: --trials must be from 1 to 1000, not 5000"},
		{"TrialsNotANumber", []string{"--trials", "many"}, `doublerun failover: --trials "many" is not a whole number`},
		{"UnknownStrategy", []string{"--strategy", "advisory,zookeeper"},
			`doublerun failover: --strategy: unknown strategy "zookeeper"; valid: advisory, advisory-unguarded, advisory-wait, fenced, fenced-epoch, fenced-wait`},
		{"UnknownFault", []string{"--fault", "METEOR"},
			`doublerun failover: --fault: unknown fault "METEOR"; valid: KILL_LEADER, TERMINATE_LEADER_BACKEND, GRACEFUL_HANDOVER`},
		{"TransactionTopology", []string{"--topology", "transaction"},
			`doublerun failover: --topology: unknown topology "transaction"; valid: direct, session (the waiting advisory lease refuses transaction pooling)`},
		{"EmptyList", []string{"--strategy", " , "}, "doublerun failover: --strategy is empty; leave it out for all"},
		{"ZeroPoll", []string{"--poll", "0s"}, "doublerun failover: --poll must be from 1ms to 10s, not 0s"},
		{"BadTTL", []string{"--ttl", "soon"}, `doublerun failover: --ttl "soon" is not a duration; use one such as 30s, 2m or 1h30m`},
		{"OutIsAFile", []string{"--out", "failover_test.go"}, "doublerun failover: --out failover_test.go is a file, not a directory; pass a directory (it is created if missing)"},
		{"UnexpectedArgument", []string{"now"}, `doublerun failover: unexpected argument "now"; this command takes only the flags listed below`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, nil, append([]string{"failover"}, tc.args...)...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			first, _, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tc.want, first)
		})
	}
}

// A short run prints a progress line per cell, then the table, and writes
// it with every trial's figure.
func TestFailoverPrintsTheTable(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	stdout, stderr, code := cli(t, stacktest.ShareEnv(), "failover", "--trials", "2", "--strategy", "advisory-wait", "--fault", "GRACEFUL_HANDOVER,KILL_LEADER",
		"--topology", "direct", "--out", out)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "failover: 2 cell(s) × 2 trials on direct; poll 100ms, fenced TTL 2s\n")
	require.Contains(t, stdout, "[1/2] direct   advisory-wait  GRACEFUL_HANDOVER ")
	require.Contains(t, stdout, "[2/2] direct   advisory-wait  KILL_LEADER ")
	require.Contains(t, stdout, "| endpoint | strategy | fault | p50 | p99 | max | n |")
	require.Contains(t, stdout, "| direct | advisory-wait | KILL_LEADER | ")
	md, err := os.ReadFile(filepath.Join(out, "failover.md"))
	require.NoError(t, err)
	require.Contains(t, stdout, string(md))
	raw, err := os.ReadFile(filepath.Join(out, "failover.json"))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(raw), `"samples_ns"`))
}

// Ctrl-C mid-trial exits 130 with one line, and the trial's leader
// process and the stack's servers are gone.
func TestFailoverInterruptedCleansUp(t *testing.T) {
	t.Parallel()
	cmd := cliCommand(t, nil, "failover", "--trials", "20", "--strategy", "fenced", "--fault", "KILL_LEADER", "--topology", "direct", "--out", "")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer // written by the child while the test reads it
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "stderr: %s", stderr.String())
	require.Equal(t, "failover: 1 cell(s) × 20 trials on direct; poll 100ms, fenced TTL 2s", sc.Text())
	// A trial's leader is the CLI's binary started again: wait until one
	// runs.
	var children []proc
	require.Eventually(t, func() bool {
		children = descendants(t, cmd.Process.Pid)
		for _, p := range children {
			if strings.Contains(p.cmdline, filepath.Base(cmd.Path)) {
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "no leader process started")

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("failover did not exit after SIGINT")
	}
	require.Equal(t, 130, cmd.ProcessState.ExitCode(), "stderr: %s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	require.Equal(t, "doublerun failover: interrupted after 0 of 1 cells; the table above covers those", lines[len(lines)-1])
	for _, p := range children {
		require.False(t, p.alive(), "process %d (%s) outlived the command", p.pid, p.cmdline)
	}
}
