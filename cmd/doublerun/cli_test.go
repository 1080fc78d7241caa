package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// noStack makes any stack the CLI tries to start fail at once (exit 1),
// so a usage error that is not caught before the stack starts shows as a
// wrong exit code instead of a run.
var noStack = []string{"DOUBLERUN_PROVIDER=native", "DOUBLERUN_PGBOUNCER_BIN=/nonexistent/pgbouncer"}

func TestHelpGoesToStdout(t *testing.T) {
	t.Parallel()
	top, _, code := cli(t, nil)
	require.Zero(t, code)
	require.Contains(t, top, "Usage: doublerun <command> [flags]")
	for _, tc := range []struct {
		name string
		args []string
		want string // the start of stdout
	}{
		{"Help", []string{"help"}, top},
		{"DashHelp", []string{"--help"}, top},
		{"HelpRun", []string{"help", "run"}, "Usage: doublerun run --scenario NAME|--file FILE"},
		{"RunDashHelp", []string{"run", "--help"}, "Usage: doublerun run --scenario NAME|--file FILE"},
		{"RunDashH", []string{"run", "-h"}, "Usage: doublerun run --scenario NAME|--file FILE"},
		{"HelpChaos", []string{"help", "chaos"}, "Usage: doublerun chaos "},
		{"ChaosDashHelp", []string{"chaos", "--help"}, "Usage: doublerun chaos "},
		{"HelpStack", []string{"help", "stack"}, "Usage:\n  doublerun stack up"},
		{"StackDashHelp", []string{"stack", "--help"}, "Usage:\n  doublerun stack up"},
		{"HelpStackUp", []string{"help", "stack", "up"}, "Usage:\n  doublerun stack up"},
		{"StackUpDashHelp", []string{"stack", "up", "--help"}, "Usage:\n  doublerun stack up"},
		{"HelpMutationGate", []string{"help", "mutation", "gate"}, "Usage:\n  doublerun mutation ci"},
		{"MutationDashHelp", []string{"mutation", "--help"}, "Usage:\n  doublerun mutation ci"},
		{"HelpRepro", []string{"help", "repro"}, "Usage: doublerun repro 556"},
		{"ReproDashHelp", []string{"repro", "--help"}, "Usage: doublerun repro 556"},
		{"Repro556DashHelp", []string{"repro", "556", "--help"}, "Usage: doublerun repro 556"},
		{"HelpFailover", []string{"help", "failover"}, "Usage: doublerun failover [--trials N]"},
		{"FailoverDashHelp", []string{"failover", "--help"}, "Usage: doublerun failover [--trials N]"},
		{"HelpList", []string{"help", "list"}, "Usage: doublerun list"},
		{"HelpVersion", []string{"help", "version"}, "Usage: doublerun version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, noStack, tc.args...)
			require.Zero(t, code, "stderr: %s", stderr)
			require.Empty(t, stderr)
			require.True(t, strings.HasPrefix(stdout, tc.want), "stdout: %q\nwant prefix: %q", stdout, tc.want)
		})
	}

	// help CMD prints what CMD --help prints, flags included.
	viaHelp, _, _ := cli(t, nil, "help", "run")
	viaFlag, _, _ := cli(t, nil, "run", "--help")
	require.Equal(t, viaFlag, viaHelp)
	require.Contains(t, viaHelp, "\nFlags:\n")
	require.Contains(t, viaHelp, "-replicas int")
	viaHelp, _, _ = cli(t, nil, "help", "stack", "up")
	require.Contains(t, viaHelp, "-tx-pool-size value")
}

// Usage errors exit 2 with one line that names what is wrong and what to
// do, then the usage; none of them starts a stack.
func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "afile")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	badScenario := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(badScenario, []byte(`{"strategy": "fenced", "topology": {"kind": "mesh"}, "expect": "safe"}`), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"UnknownScenario", []string{"run", "--scenario", "nope"},
			`doublerun run: unknown scenario "nope"; valid: ` + strings.Join(scenarios.Names(), ", ")},
		{"MissingScenario", []string{"run"}, "doublerun run: --scenario or --file is required; `doublerun list` shows the names, testdata/scenarios has files"},
		{"ScenarioAndFile", []string{"run", "--scenario", "issue-556", "--file", file}, "doublerun run: --scenario and --file both given; give one"},
		{"FileMissing", []string{"run", "--file", file + ".nope"},
			"doublerun run: --file: open " + file + ".nope: no such file or directory; give the path of a scenario JSON file, such as testdata/scenarios/alias-reconnect.json"},
		{"FileBadField", []string{"run", "--file", badScenario},
			"doublerun run: " + badScenario + `: field "topology.kind": unknown topology "mesh"; valid: direct, session, transaction, pinned, alias`},
		{"ScenarioWithoutValue", []string{"run", "--scenario"}, "doublerun run: --scenario needs a value"},
		{"PositionalScenario", []string{"run", "issue-556"},
			`doublerun run: unexpected argument "issue-556"; this command takes only the flags listed below`},
		{"UnknownFlag", []string{"run", "--scenaro", "issue-556"}, "doublerun run: unknown flag --scenaro; the flags are listed below"},
		{"NegativeDuration", []string{"run", "--scenario", "issue-556", "--duration", "-5s"},
			"doublerun run: --duration -5s is below 1s: a shorter run holds too few pieces of work to judge (5 at the default 200ms), and its fault comes at a third of it; use 1s to 1h"},
		{"ZeroDuration", []string{"run", "--scenario", "issue-556", "--duration", "0"},
			"doublerun run: --duration 0s is not a duration to measure; leave it out for the scenario's own (5s)"},
		{"NotADuration", []string{"run", "--scenario", "issue-556", "--duration", "5"},
			`doublerun run: --duration "5" is not a duration; use one such as 30s, 2m or 1h30m`},
		{"ShortLeaderWait", []string{"run", "--scenario", "issue-556", "--leader-wait", "500ms"},
			"doublerun run: --leader-wait 500ms is shorter than any replica takes to start; use 1s or more, or leave it out for 30s"},
		{"NotABool", []string{"run", "--json=maybe", "--scenario", "issue-556"}, `doublerun run: --json takes true or false, not "maybe"`},
		{"ZeroReplicas", []string{"run", "--scenario", "issue-556", "--replicas", "0"},
			"doublerun run: --replicas 0 is not a number of replicas; use 1 to 8, or leave it out for the scenario's own (2)"},
		{"TooManyReplicas", []string{"run", "--scenario", "issue-556", "--replicas", "9"},
			"doublerun run: --replicas 9 is above 8: " + scenarios.MaxReplicasWhy + "; use 1 to 8"},
		{"ReplicasNotANumber", []string{"run", "--scenario", "issue-556", "--replicas", "four"}, `doublerun run: --replicas "four" is not a whole number`},
		{"OutIsAFile", []string{"run", "--scenario", "issue-556", "--out", file},
			"doublerun run: --out " + file + " is a file, not a directory; pass a directory (it is created if missing)"},
		{"ChaosTooManyReplicas", []string{"chaos", "--replicas", "100"},
			"doublerun chaos: --replicas 100 is above 8: " + scenarios.MaxReplicasWhy + "; use 1 to 8"},
		{"ChaosNegativeReplicas", []string{"chaos", "--replicas", "-1"},
			"doublerun chaos: --replicas -1 is below 1: a run needs a replica to lead; use 1 to 8"},
		{"ChaosOutIsAFile", []string{"chaos", "--fault", "none", "--strategy", "fenced", "--topology", "direct", "--out", file},
			"doublerun chaos: --out " + file + " is a file, not a directory; pass a directory (it is created if missing)"},
		{"ReproOutIsAFile", []string{"repro", "556", "--out", file},
			"doublerun repro: --out " + file + " is a file, not a directory; pass a directory (it is created if missing)"},
		{"NegativeTxPoolSize", []string{"stack", "up", "--tx-pool-size", "-1"},
			`doublerun stack: --tx-pool-size="-1" is not a pool size from 1 to 16 (` + stack.MaxPoolSizeWhy + `); leave it out or set one such as 1`},
		{"ZeroTxPoolSize", []string{"stack", "up", "--tx-pool-size", "0"},
			`doublerun stack: --tx-pool-size="0" is not a pool size from 1 to 16 (` + stack.MaxPoolSizeWhy + `); leave it out or set one such as 1`},
		{"TxPoolSizeNotANumber", []string{"stack", "up", "--tx-pool-size", "one"},
			`doublerun stack: --tx-pool-size="one" is not a pool size from 1 to 16 (` + stack.MaxPoolSizeWhy + `); leave it out or set one such as 1`},
		{"UnknownProviderFlag", []string{"stack", "up", "--provider", "kubernetes"},
			`doublerun stack: unknown provider "kubernetes"; valid: auto, docker, native`},
		{"MinEfficacyAbove100", []string{"mutation", "gate", "--report", "x.json", "--min-efficacy", "150"},
			"doublerun mutation: --min-efficacy must be a percentage from 0 to 100, not 150"},
		{"MutationCIUngatedPackage", []string{"mutation", "ci", "--packages", "lease,pgbouncer"},
			`doublerun mutation: --packages: "pgbouncer" is not a gated package; choose from lease, worker, scenarios/oracle`},
		{"MutationCIRecordOfSomePackages", []string{"mutation", "ci", "--packages", "lease", "--write-record"},
			"doublerun mutation: --write-record needs every gated package: a record's base covers all of them"},
		{"HelpUnknownCommand", []string{"help", "nope"},
			`doublerun help: unknown command "nope"; valid commands: bench, chaos, check, failover, list, mutation, replica, repro, run, stack, version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, noStack, tc.args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			first, rest, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tc.want, first)
			if tc.args[0] != "help" {
				require.True(t, strings.HasPrefix(rest, "\nUsage:"), "the usage follows the line: %q", rest)
			}
		})
	}
	// The pool-size flag says what DOUBLERUN_TRANSACTION_POOL_SIZE says,
	// and a bad variable is a usage error too, on one line.
	_, stderr, code := cli(t, append([]string{"DOUBLERUN_TRANSACTION_POOL_SIZE=-1"}, noStack...), "stack", "up")
	require.Equal(t, 2, code)
	require.Equal(t, `doublerun stack: DOUBLERUN_TRANSACTION_POOL_SIZE="-1" is not a pool size from 1 to 16 (`+stack.MaxPoolSizeWhy+`); unset it or set one such as 1`+"\n", stderr)
}

// --replicas reaches the runner: a run with 4 replicas starts 4 replica
// processes and its report lists them.
func TestRunWithReplicas(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	stdout, stderr, code := cli(t, stacktest.ShareEnv(), "run", "--scenario", "issue-556", "--replicas", "4", "--duration", "3s", "--json", "--out", out)
	require.Zero(t, code, "stderr: %s", stderr)
	var rep scenarios.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Equal(t, 4, rep.Scenario.Replicas)
	require.Len(t, rep.Replicas, 4)
	pids := map[int]bool{}
	for i, r := range rep.Replicas {
		require.Equal(t, "r"+strconv.Itoa(i+1), r.ID)
		require.Positive(t, r.PID)
		pids[r.PID] = true
		info, err := os.Stat(filepath.Join(out, "issue-556", "replicas", r.ID+".log"))
		require.NoError(t, err)
		require.Positive(t, info.Size(), "replica %s logged", r.ID)
	}
	require.Len(t, pids, 4, "four processes")
	require.NoError(t, rep.Verdict.Err(), "issue 556 reproduces with 4 replicas too")
	reporttest.Keep(t, out)
}

// --replicas reaches every cell of chaos. The cell is the advisory lease
// on a direct endpoint without a fault, which no load can turn into a
// double-run: the lock belongs to one session. (The fenced lease's cell
// measured a 294ms double-run at load average 19, a replica starved past
// its trust deadline before it logged its work's end: that cell's
// verdict is about the host, not about --replicas.)
func TestChaosWithReplicas(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	stdout, stderr, code := cli(t, append(stacktest.ShareEnv(), "CHAOS_TOPOLOGIES="),
		"chaos", "--fault", "none", "--strategy", "advisory", "--topology", "direct", "--replicas", "3", "--out", out)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "chaos: 1 cell(s), 3 replicas each, reports in "+out)
	data, err := os.ReadFile(filepath.Join(out, "advisory", "direct", "none", "report.json"))
	require.NoError(t, err)
	var rep scenarios.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, 3, rep.Scenario.Replicas)
	require.Len(t, rep.Replicas, 3)
	reporttest.Keep(t, out)
}

// Ctrl-C during a run exits 130 with one line, and everything the run
// started is gone: the replicas, the servers (child processes with the
// native provider) and the stack's temp dir.
func TestRunInterruptedCleansUp(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	cmd := cliCommand(t, nil, "run", "--scenario", "issue-556", "--duration", "2m", "--out", out)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var log, lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log = append(log, sc.Text())
		if strings.Contains(sc.Text(), "msg=measuring") {
			break
		}
	}
	require.Contains(t, strings.Join(log, "\n"), "msg=measuring", "the run never started measuring")
	children := descendants(t, cmd.Process.Pid)
	require.GreaterOrEqual(t, len(children), 2, "at least the two replicas run")
	var dirs []string // the native provider's temp dirs, from postgres -D
	for _, p := range children {
		args := strings.Split(strings.TrimRight(p.cmdline, "\x00"), "\x00")
		for i, a := range args {
			if a == "-D" && i+1 < len(args) {
				dirs = append(dirs, filepath.Dir(args[i+1]))
			}
		}
	}

	if slices.ContainsFunc(children, func(p proc) bool { return strings.Contains(p.cmdline, "postgres") }) {
		require.NotEmpty(t, dirs, "the native provider's postgres runs with -D: %v", children)
	}

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not exit after SIGINT")
	}
	require.Equal(t, 130, cmd.ProcessState.ExitCode(), "stderr: %s", strings.Join(lines, "\n"))
	require.NotEmpty(t, lines)
	require.Equal(t, "doublerun run: interrupted before the verdict of issue-556; no report was written (replica logs: "+
		filepath.Join(out, "issue-556", "replicas")+"); the stack and replicas are gone", lines[len(lines)-1])
	// Only the line naming the servers' versions, printed once the stack
	// was up, reached stdout: no verdict.
	require.Regexp(t, `^versions: [^\n]*\n(note: [^\n]*\n)?$`, stdout.String())
	for _, p := range children {
		require.False(t, p.alive(), "process %d (%s) outlived the run", p.pid, p.cmdline)
	}
	for _, d := range dirs {
		require.NoDirExists(t, d, "the stack's temp dir")
	}
	require.NoFileExists(t, filepath.Join(out, "issue-556", "report.json"))
}

// Ctrl-C while the runner waits for replicas that ignore SIGTERM ends
// the run at once, exit 130, rather than after the grace period (15s):
// the replicas' groups are killed without waiting out the rest of it, and
// a second Ctrl-C changes nothing of that. Nothing the run started is left.
func TestRunInterruptedDuringTheGracePeriod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "ignores-sigterm.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"strategy": "advisory", "topology": {"kind": "direct"}, "expect": "safe",
	"duration": "1s", "replicas": 2, "replica": {"command": ["sh", "-c", "trap '' TERM; while true; do echo became leader; sleep 0.2; done"],
	"log": {"became_leader": "^became leader$", "lost_leadership": "^lost$"}}}`), 0o644))
	cmd := cliCommand(t, stacktest.ShareEnv(), "run", "--file", file, "--out", filepath.Join(dir, "out"))
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `msg="stopping replicas"`) {
			break
		}
	}
	require.Contains(t, strings.Join(lines, "\n"), `msg="stopping replicas"`, "the run never began to stop its replicas")
	var groups []int // the replica commands: each leads a process group
	for _, p := range descendants(t, cmd.Process.Pid) {
		if strings.HasPrefix(p.cmdline, "sh\x00-c\x00trap") {
			groups = append(groups, p.pid)
		}
	}
	require.Len(t, groups, 2, "both replica commands run")

	interrupted := time.Now()
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	time.Sleep(100 * time.Millisecond)
	_ = cmd.Process.Signal(os.Interrupt) // the user presses it again
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("run did not exit after SIGINT")
	}
	// Well inside the 15s grace: the kill and the report's discard are
	// immediate; the rest is the stack's teardown, a second or two.
	require.Less(t, time.Since(interrupted), 10*time.Second, "the run waited out the grace period")
	require.Equal(t, 130, cmd.ProcessState.ExitCode(), "stderr: %s", strings.Join(lines, "\n"))
	require.True(t, strings.HasPrefix(lines[len(lines)-1], "doublerun run: interrupted before the verdict of ignores-sigterm; no report was written"), lines[len(lines)-1])
	for _, pgid := range groups {
		require.False(t, groupRuns(t, pgid), "the process group of replica command %d outlived the run", pgid)
	}
}

// A replica command that cannot be judged gets its exit code and a first
// line that says what it did and what to do, in the style of
// TestEachInputGetsItsExitCodeAndFirstLine; these need a stack. A run
// that waits for leader work says so while it waits, and why, and fails
// when --leader-wait ends: 10 s, so that the line said at 5 s comes
// before the end (the default, 30 s, held the test for all of it).
func TestReplicaCommandGetsItsExitCodeAndFirstLine(t *testing.T) {
	t.Parallel()
	const base = `"strategy": "advisory", "topology": {"kind": "direct"}, "expect": "safe", "replicas": 1, "duration": "3s"`
	for _, tc := range []struct {
		name    string
		file    string
		flags   []string
		code    int
		first   string
		waiting bool // the log says it waits for leader work
	}{
		{"ExitsZeroAtOnceWithNoOutput", `{` + base + `, "replica": {"command": ["true"]}}`, nil, 1,
			`doublerun run: replica r1: command "true" exited before any leader work was reported (exit status 0) with no output; fix the command so that it keeps running as a replica (its output: out/case/replicas/r1.log)`, false},
		{"NeverReportsWork", `{` + base + `, "replica": {"command": ["sleep", "600"]}}`, []string{"--leader-wait", "10s"}, 1,
			"doublerun run: scenario case: verdict failed: no leader work was reported: in 10s no replica command called doublerun.work_begin; " +
				"make the lease call it (on " + replica.EnvOracleDSN + ") when it leads and doublerun.work_end after, or judge an unchanged program by \"replica.log\" patterns", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "case.json"), []byte(tc.file), 0o644))
			cmd := cliCommand(t, stacktest.ShareEnv(), append([]string{"run", "--file", "case.json", "--out", "out"}, tc.flags...)...)
			cmd.Dir = dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			require.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			first, _, _ := strings.Cut(messages(stderr.String()), "\n")
			require.Equal(t, tc.first, first)
			if tc.waiting {
				require.Regexp(t, `msg="waiting for leader work" scenario=case waited=\d+s up_to=10s why="the measurement starts at the first piece of leader work a replica reports; none has yet"`, stderr.String())
			} else {
				require.NotContains(t, stderr.String(), "waiting for leader work")
			}
		})
	}
}

// proc is a process seen in /proc: its PID, its start time (so that a
// reused PID is not taken for it) and its command line.
type proc struct {
	pid     int
	start   string
	cmdline string
}

// alive reports whether the same process still runs (a zombie does not).
func (p proc) alive() bool {
	q, ok := readProc(p.pid)
	return ok && q.start == p.start
}

func readProc(pid int) (proc, bool) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return proc{}, false
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return proc{}, false
	}
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return proc{pid: pid, start: f[19], cmdline: string(cmdline)}, true
}

// groupRuns reports whether a process of group pgid runs (a zombie does
// not).
func groupRuns(t *testing.T, pgid int) bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// state ppid pgrp, after the command name in parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// descendants lists the processes below pid.
func descendants(t *testing.T, pid int) []proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	children := map[int][]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], n)
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if q, ok := readProc(c); ok {
				out = append(out, q)
			}
			queue = append(queue, c)
		}
	}
	return out
}
