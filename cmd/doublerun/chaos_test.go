package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// chaosRegistered reports whether main.go lists the chaos command. Until it
// does, runChaos runs the command in this process instead of through cli.
func chaosRegistered() bool {
	return slices.ContainsFunc(commands(), func(c command) bool { return c.name == "chaos" })
}

// runChaos runs `doublerun chaos args...` with env set and returns its
// output and exit code, as cli does. Run in this process (while chaos is
// not yet registered) it sets env with t.Setenv, so its caller must not be
// parallel, and maps errors to exit codes with run's finish.
func runChaos(t *testing.T, vars []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	if chaosRegistered() {
		return cli(t, vars, append([]string{"chaos"}, args...)...)
	}
	// Replicas are this test binary started again; with DOUBLERUN_TEST_CLI
	// set, TestMain runs main, which turns them into replicas.
	t.Setenv("DOUBLERUN_TEST_CLI", "1")
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, log: slog.New(slog.NewTextHandler(&errb, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	c := chaosCommand()
	code = finish(context.Background(), &errb, c, c.run(context.Background(), e, args))
	return out.String(), errb.String(), code
}

func parallelIfRegistered(t *testing.T) {
	if chaosRegistered() {
		t.Parallel()
	}
}

func TestChaosRunsOneCell(t *testing.T) {
	parallelIfRegistered(t)
	out := t.TempDir()
	stdout, stderr, code := runChaos(t, append(stacktest.ShareEnv(), "CHAOS_TOPOLOGIES="),
		"--fault", "KILL_LEADER", "--strategy", "fenced", "--topology", "transaction", "--out", out)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "chaos: 1 cell(s)")
	require.Contains(t, stdout, "[1/1] PASS fenced/transaction/KILL_LEADER")
	require.Contains(t, stdout, "| strategy | fault | topology | double-run (episodes) | leaderless | orphaned lock (episodes) | stale writes accepted / rejected | expect | verdict |")
	require.Contains(t, stdout, "| fenced | KILL_LEADER | transaction(pool=1) |")
	for _, f := range []string{"summary.md", "fenced/transaction/KILL_LEADER/report.json", "fenced/transaction/KILL_LEADER/report.md", "fenced/transaction/KILL_LEADER/timeline.svg"} {
		info, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
		require.Positive(t, info.Size(), f)
	}
}

func TestChaosBadInputGetsOneLine(t *testing.T) {
	parallelIfRegistered(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"UnknownFault", nil, []string{"--fault", "METEOR"}, 2,
			`doublerun chaos: unknown fault "METEOR"; valid: none, TERMINATE_LEADER_BACKEND, KILL_LEADER, FREEZE_LEADER, PARTITION_LEADER, DELAY_LEADER, PGBOUNCER_PAUSE, PGBOUNCER_KILL, PGBOUNCER_RECONNECT, PGBOUNCER_RESTART, POSTGRES_RESTART, GRACEFUL_HANDOVER, PRIMARY_FAILOVER, PRIMARY_FAILOVER_LOSSY, SWITCHOVER`},
		{"UnknownStrategy", nil, []string{"--strategy", "zookeeper"}, 2,
			`doublerun chaos: unknown strategy "zookeeper"; valid: advisory, advisory-unguarded, advisory-wait, fenced`},
		{"UnknownTopology", nil, []string{"--topology", "mesh"}, 2,
			`doublerun chaos: unknown topology "mesh"; valid: direct, session, transaction, pinned, alias`},
		{"UnknownTopologyInEnv", []string{"CHAOS_TOPOLOGIES=direct,mesh"}, nil, 2,
			`doublerun chaos: CHAOS_TOPOLOGIES: unknown topology "mesh"; valid: direct, session, transaction, pinned, alias`},
		{"BadPoolSize", nil, []string{"--pool-sizes", "1,0"}, 2,
			`doublerun chaos: --pool-sizes: pool size "0": need a whole number from 1 to 16, such as 1,2,4`},
		{"BadPoolSizeInEnv", []string{"CHAOS_POOL_SIZES=2,x"}, nil, 2,
			`doublerun chaos: CHAOS_POOL_SIZES: pool size "x": need a whole number from 1 to 16, such as 1,2,4`},
		{"FaultDoesNotApply", nil, []string{"--fault", "TERMINATE_LEADER_BACKEND", "--strategy", "fenced", "--topology", "transaction"}, 2,
			"doublerun chaos: --fault TERMINATE_LEADER_BACKEND does not apply to strategy fenced on topology transaction(pool=1); pick another fault or topology"},
		{"StrategyRefusesTopology", nil, []string{"--strategy", "advisory-wait"}, 2,
			"doublerun chaos: strategy advisory-wait refuses topology transaction: a waiting follower holds its server connection while it waits, so lease.Advisory with Wait refuses a transaction-pooled endpoint; use direct, session or pinned"},
		{"UnexpectedArgument", nil, []string{"all"}, 2, `doublerun chaos: unexpected argument "all"; this command takes only the flags listed below`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runChaos(t, tc.env, tc.args...)
			require.Equal(t, tc.code, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			first, _, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tc.want, first)
		})
	}
}

func TestChaosCellsSelection(t *testing.T) {
	t.Parallel()
	cells, err := chaosCells("", "", "", "", false)
	require.NoError(t, err)
	require.Len(t, cells, 35, "every strategy and fault on the transaction topology")
	for _, c := range cells {
		require.Equal(t, scenarios.Transaction, c.Topology)
	}
	cells, err = chaosCells("", "", "", "direct, pinned", false)
	require.NoError(t, err)
	require.Len(t, cells, 31+47, "advisory-wait has 8 cells on direct and 12 on pinned")
	cells, err = chaosCells("", "fenced", "session", "direct", false)
	require.NoError(t, err, "--topology overrides CHAOS_TOPOLOGIES")
	require.Len(t, cells, 11)
	cells, err = chaosCells("FREEZE_LEADER", "", "", "", false)
	require.NoError(t, err)
	require.Equal(t, []string{"advisory/transaction/FREEZE_LEADER", "advisory-unguarded/transaction/FREEZE_LEADER", "fenced/transaction/FREEZE_LEADER"},
		[]string{cells[0].Name(), cells[1].Name(), cells[2].Name()})
	cells, err = chaosCells("none", "advisory", "pinned", "", false)
	require.NoError(t, err)
	require.Len(t, cells, 1)
	sc, err := cells[0].Scenario()
	require.NoError(t, err)
	require.Equal(t, scenarios.ExpectSafe, sc.Expect)
}

// --standby adds the failover faults' cells, each on its block's standby,
// after the default list, which it leaves as it is; without it they are
// none of the matrix's.
func TestChaosCellsWithStandby(t *testing.T) {
	t.Parallel()
	plain, err := chaosCells("", "", "", "", false)
	require.NoError(t, err)
	with, err := chaosCells("", "", "", "", true)
	require.NoError(t, err)
	require.Equal(t, plain, with[:len(plain)], "the default cells first, unchanged")
	var names []string
	for _, c := range with[len(plain):] {
		names = append(names, c.Name()+" "+string(c.Standby))
		sc, err := c.Scenario()
		require.NoError(t, err, c.Name())
		require.Equal(t, c.Standby, sc.Standby, "the scenario runs on the cell's standby")
	}
	require.Equal(t, []string{
		"advisory/transaction/PRIMARY_FAILOVER sync", "advisory/transaction/PRIMARY_FAILOVER_LOSSY async", "advisory/transaction/SWITCHOVER sync",
		"advisory-unguarded/transaction/PRIMARY_FAILOVER sync", "advisory-unguarded/transaction/PRIMARY_FAILOVER_LOSSY async", "advisory-unguarded/transaction/SWITCHOVER sync",
		"fenced/transaction/PRIMARY_FAILOVER sync", "fenced/transaction/PRIMARY_FAILOVER_LOSSY async", "fenced/transaction/SWITCHOVER sync",
		"fenced-epoch/transaction/PRIMARY_FAILOVER sync", "fenced-epoch/transaction/PRIMARY_FAILOVER_LOSSY async", "fenced-epoch/transaction/SWITCHOVER sync",
	}, names)
	lossy, err := chaosCells("PRIMARY_FAILOVER_LOSSY", "", "direct,transaction", "", true)
	require.NoError(t, err)
	require.Len(t, lossy, 5+4, "direct: four strategies and fenced-epoch; transaction: advisory-wait refuses it")
	for _, c := range lossy {
		e, ok := chaos.Expect(c)
		require.True(t, ok)
		if c.Strategy == "fenced" {
			require.Equal(t, scenarios.ExpectRegresses, e.Expect, c.Name())
		}
	}
	_, err = chaosCells("SWITCHOVER", "", "", "", false)
	require.EqualError(t, err, "fault SWITCHOVER fails the primary over: its cells need a stack with a standby; add --standby (or CHAOS_STANDBY=1)")
	_, err = chaosCells("", "fenced-epoch", "", "", false)
	require.EqualError(t, err, "strategy fenced-epoch has cells only under the failover faults; add --standby")
	on, err := chaosStandby(false, false, "1")
	require.NoError(t, err)
	require.True(t, on)
	off, err := chaosStandby(false, true, "1")
	require.NoError(t, err)
	require.False(t, off, "the flag overrides CHAOS_STANDBY")
	_, err = chaosStandby(false, false, "yes")
	require.ErrorContains(t, err, `CHAOS_STANDBY: "yes" is not 1 or 0`)
}

// --replica's file is read and its command found before any stack
// starts: each problem is one line, exit 2.
func TestChaosReplicaFileBadInput(t *testing.T) {
	parallelIfRegistered(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		return path
	}
	misspelt := write("misspelt.json", `{"comand": ["x"]}`)
	badRE := write("bad-re.json", `{"command": ["sh"], "log": {"became_leader": "(", "lost_leadership": "x"}}`)
	missing := write("missing.json", `{"replica": {"command": ["no-such-program-doublerun"]}}`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"NoStrategy", []string{"--replica", missing}, "doublerun chaos: --replica needs --strategy: the strategy whose column of the table the command is judged by, such as advisory for a session advisory lock"},
		{"NoFile", []string{"--strategy", "advisory", "--replica", filepath.Join(dir, "nope.json")}, "doublerun chaos: --replica: open " + filepath.Join(dir, "nope.json") + ": no such file or directory; give a JSON file holding {\"command\": [...]}"},
		{"MisspeltField", []string{"--strategy", "advisory", "--replica", misspelt}, "doublerun chaos: --replica " + misspelt + `: field "replica": unknown field "comand"; valid: command, env, log (with became_leader, lost_leadership, work_started, work_ended)`},
		{"BadRegularExpression", []string{"--strategy", "advisory", "--replica", badRE}, "doublerun chaos: --replica " + badRE + `: field "replica.log.became_leader": "(" is not a regular expression (missing closing ): ` + "`(`" + `); write Go's RE2 syntax, with backslashes doubled in JSON`},
		{"CommandNotFound", []string{"--strategy", "advisory", "--replica", missing}, `doublerun chaos: replica command "no-such-program-doublerun": not found; install it, or give its full path as the first word of "replica.command"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runChaos(t, nil, tc.args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			first, _, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tc.want, first)
		})
	}
}

// doublerun replica is started by the runner with the protocol's
// variables; by hand, without them, it says so in one line.
func TestReplicaCommandNeedsTheProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"NoStrategy", []string{"replica"}, "doublerun replica: --strategy is required; one of advisory, advisory-unguarded, advisory-wait, fenced, fenced-epoch, fenced-wait"},
		{"NoVariables", []string{"replica", "--strategy", "advisory"}, "doublerun replica: DOUBLERUN_REPLICA_ID is not set: this command is a replica that doublerun run and doublerun chaos start, with the DOUBLERUN_* variables set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, nil, tc.args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			first, _, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tc.want, first)
		})
	}
}
