package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
)

// Each input a user may give, with the exit code and the first line it
// gets (stderr's, or stdout's when stderr is empty): the next weak
// message is one more row. None of them starts a stack. Each runs in an
// empty directory of its own, which it must leave empty: a command that
// fails leaves nothing behind (not even the ./reports of the default
// --out).
func TestEachInputGetsItsExitCodeAndFirstLine(t *testing.T) {
	t.Parallel()
	fx := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(fx, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	const base = `"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe"`
	durMax := file("dur-max.json", `{`+base+`, "duration": 9223372036854775807}`)
	poll1 := file("poll1.json", `{`+base+`, "poll_interval": 1}`)
	work1 := file("work1.json", `{`+base+`, "work": 1}`)
	trailing := file("trailing.json", `{`+base+`} {"x": 1}`)
	dupKey := file("dupkey.json", `{`+base+`, "strategy": "advisory"}`)
	replicasNeg := file("replicas-neg.json", `{`+base+`, "replicas": -2}`)
	array := file("array.json", `[1]`)
	replicasHuge := file("replicas-huge.json", `{`+base+`, "replicas": 99999999999999999999}`)
	commandString := file("command-string.json", `{`+base+`, "replica": {"command": "x"}}`)
	empty := filepath.Join(fx, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	trunc := filepath.Join(fx, "trunc")
	require.NoError(t, os.Mkdir(trunc, 0o755))
	file("trunc/cells.json", `{"versions": "pg15-pgbouncer1.18", "shard": 1, "sha`)
	merged := filepath.Join(fx, "merged")

	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		code  int
		first string
		usage string // the start of the usage that follows the line; "" for none
	}{
		{"BenchNoRuns", noStack, []string{"bench", "--runs", "0"}, 2,
			"doublerun bench: --runs must be at least 1, got 0", "Usage: doublerun bench"},
		{"BenchUnknownTopology", noStack, []string{"bench", "--topologies", "direct,session"}, 2,
			`doublerun bench: --topologies: "session" is neither direct nor transaction`, "Usage: doublerun bench"},
		{"BenchHistoryAndExplain", noStack, []string{"bench", "--history", "--explain"}, 2,
			"doublerun bench: --history and --explain are separate runs; pass one", "Usage: doublerun bench"},
		{"BenchBadBatches", noStack, []string{"bench", "--batches", "10,x"}, 2,
			`doublerun bench: --batches: "x" is not a positive whole number`, "Usage: doublerun bench"},
		{"DurationFarTooLong", noStack, []string{"run", "--scenario", "issue-556-pinned", "--duration", "1000000h"}, 2,
			"doublerun run: --duration 1000000h is above 1h: a longer run is more often a typo than a plan (1000000h is 114 years), and its report keeps every piece of work; use 1s to 1h",
			"Usage: doublerun run"},
		{"FileDurationFarTooLong", noStack, []string{"run", "--file", durMax}, 2,
			"doublerun run: " + durMax + `: field "duration": 2562047h47m16.854775807s is above 1h: a longer run is more often a typo than a plan (1000000h is 114 years), and its report keeps every piece of work; use 1s to 1h`,
			"Usage: doublerun run"},
		{"FilePollOneNanosecond", noStack, []string{"run", "--file", poll1}, 2,
			"doublerun run: " + poll1 + `: field "poll_interval": 1ns is below 1ms: each poll is a lease call on the server, and shorter polls are a busy loop on it; use 1ms to 10s`,
			"Usage: doublerun run"},
		{"FileWorkOneNanosecond", noStack, []string{"run", "--file", work1}, 2,
			"doublerun run: " + work1 + `: field "work": 1ns is below 1ms: each piece of work writes its start and end to the oracle, and below 1ms those writes are all a run measures; use 1ms to 1m`,
			"Usage: doublerun run"},
		{"MergeReadsOutAsAFlagAfterTheDirectories", nil, []string{"chaos", "merge", empty, "--out", merged}, 1,
			"doublerun chaos: no cells.json under " + empty + "; pass the --out directories of `doublerun chaos` runs", ""},
		{"MergeOfADirectoryThatDoesNotExist", nil, []string{"chaos", "merge", "/nonexistent"}, 2,
			"doublerun chaos: merge: /nonexistent does not exist; pass the --out directories of `doublerun chaos` runs",
			"Usage: doublerun chaos merge"},
		{"MergeOfATruncatedCellsJSON", nil, []string{"chaos", "merge", trunc}, 1,
			"doublerun chaos: " + trunc + "/cells.json is not a cells index (unexpected end of JSON input); it is cut short or not doublerun's: run that shard again, or leave its directory out", ""},
		{"MergeWithoutArguments", nil, []string{"chaos", "merge"}, 2,
			"doublerun chaos: merge: give the directories of the runs to merge, such as reports/shard-1 reports/shard-2",
			"Usage: doublerun chaos merge"},
		{"VersionsFlagUnknown", noStack, []string{"run", "--scenario", "issue-556", "--versions", "bogus"}, 2,
			`doublerun run: unknown version set "bogus" for --versions; use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24, or leave it out for pg17-pgbouncer1.24`,
			"Usage: doublerun run"},
		{"VersionsVariableUnknown", append([]string{"DOUBLERUN_VERSIONS=bogus"}, noStack...), []string{"run", "--scenario", "issue-556"}, 2,
			`doublerun run: DOUBLERUN_VERSIONS: unknown version set "bogus"; use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24, or unset it for pg17-pgbouncer1.24, the newest`, ""},
		{"FileMissing", noStack, []string{"run", "--file", "/nonexistent/missing.json"}, 2,
			"doublerun run: --file: open /nonexistent/missing.json: no such file or directory; give the path of a scenario JSON file, such as testdata/scenarios/alias-reconnect.json",
			"Usage: doublerun run"},
		{"StackUpWithTheExternalProvider", []string{"DOUBLERUN_PROVIDER=external"}, []string{"stack", "up"}, 2,
			"doublerun stack: DOUBLERUN_PROVIDER=external connects to servers someone else runs, and stack up starts them: unset DOUBLERUN_PROVIDER (or set it to auto, docker or native) for stack up, or run stack check to look at the running stack", ""},
		{"StackDirThatCannotBeMade", []string{"DOUBLERUN_PROVIDER=native", "DOUBLERUN_STACK_DIR=/proc/nope"}, []string{"stack", "up"}, 1,
			"doublerun stack: native provider: cannot make the stack's temp dir in DOUBLERUN_STACK_DIR=/proc/nope (no such file or directory); set it to a directory you can write to, or unset it", ""},
		{"DoubleRunWithOneReplica", noStack, []string{"run", "--scenario", "issue-556", "--replicas", "1"}, 2,
			"doublerun run: --replicas 1 is too few for expect reproduces: a double-run needs two replicas leading at once; use 2 to 8",
			"Usage: doublerun run"},
		{"ChaosDoubleRunCellsWithOneReplica", noStack, []string{"chaos", "--replicas", "1"}, 2,
			"doublerun chaos: cell advisory/transaction/none and 23 more of the 35 selected: --replicas 1 is too few for expect reproduces: a double-run needs two replicas leading at once; use 2 to 8",
			"Usage: doublerun chaos"},
		{"PoolSizesWithAnEmptyEntry", noStack, []string{"chaos", "--pool-sizes", "1,,2"}, 2,
			`doublerun chaos: --pool-sizes: entry 2 of "1,,2" is empty; give sizes such as 1,2,4`,
			"Usage: doublerun chaos"},
		{"FileWithTrailingData", noStack, []string{"run", "--file", trailing}, 2,
			"doublerun run: " + trailing + ": more follows the JSON object, at line 1, column 74; a file holds one scenario: remove what comes after its closing brace",
			"Usage: doublerun run"},
		{"FileWithAKeyTwice", noStack, []string{"run", "--file", dupKey}, 2,
			"doublerun run: " + dupKey + `: field "strategy" is there twice; keep one`,
			"Usage: doublerun run"},
		{"TxPoolSizeFarTooLarge", noStack, []string{"stack", "up", "--tx-pool-size", "1000000"}, 2,
			`doublerun stack: --tx-pool-size="1000000" is not a pool size from 1 to 16 (a run has at most 8 replicas with 2 work connections each, so a larger pool changes nothing); leave it out or set one such as 1`,
			"Usage:\n  doublerun stack up"},
		{"FileWithNegativeReplicas", noStack, []string{"run", "--file", replicasNeg}, 2,
			"doublerun run: " + replicasNeg + `: field "replicas": -2 is below 1: a run needs a replica to lead; use 1 to 8`,
			"Usage: doublerun run"},
		{"ProviderVariableUnknown", []string{"DOUBLERUN_PROVIDER=kubernetes"}, []string{"stack", "up"}, 2,
			`doublerun stack: DOUBLERUN_PROVIDER="kubernetes" is not a provider; use auto, docker, native or external, or unset it for auto`, ""},
		{"FileThatIsAnArray", noStack, []string{"run", "--file", array}, 2,
			"doublerun run: " + array + `: not a JSON object (it is an array); write one like the "scenario" object of a report.json, see testdata/scenarios`,
			"Usage: doublerun run"},
		{"FileWithReplicasBeyondAnyNumber", noStack, []string{"run", "--file", replicasHuge}, 2,
			"doublerun run: " + replicasHuge + `: field "replicas": 99999999999999999999 is above 8: ` + scenarios.MaxReplicasWhy + "; use 1 to 8",
			"Usage: doublerun run"},
		{"FileWithACommandThatIsAString", noStack, []string{"run", "--file", commandString}, 2,
			"doublerun run: " + commandString + `: field "replica.command": "x" is a string; write an array of the program and its arguments, such as ["python3", "lease.py"]`,
			"Usage: doublerun run"},
		{"HelpHelp", nil, []string{"help", "help"}, 0,
			"doublerun measures whether a leader lease on PostgreSQL holds behind PgBouncer.", ""},
		{"RunWhoseStackCannotStart", noStack, []string{"run", "--scenario", "issue-556"}, 1,
			"doublerun run: pgbouncer binary not found at DOUBLERUN_PGBOUNCER_BIN=/nonexistent/pgbouncer; install package pgbouncer, set it to the pgbouncer binary (such as /usr/sbin/pgbouncer) or unset it", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd := cliCommand(t, tc.env, tc.args...)
			cmd.Dir = dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			require.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			out := messages(stderr.String())
			if out == "" {
				out = stdout.String()
			}
			first, rest, _ := strings.Cut(out, "\n")
			require.Equal(t, tc.first, first)
			if tc.usage != "" {
				require.True(t, strings.HasPrefix(rest, "\n"+tc.usage), "the usage follows the line: %q", rest)
			} else if tc.code != 0 {
				require.Empty(t, rest, "one line")
			}
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, left, "the command left something in its working directory")
		})
	}
	require.NoDirExists(t, merged, "merge removes the --out it made when it writes nothing")
}
