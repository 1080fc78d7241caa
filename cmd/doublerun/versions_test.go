package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
)

func TestChaosVersionSets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want []string
		err  string
	}{
		{name: "DefaultIsTheNewest", want: []string{"pg17-pgbouncer1.24"}},
		{name: "All", flag: "all", want: []string{"pg15-pgbouncer1.18", "pg17-pgbouncer1.24"}},
		{name: "AllFromChaosVersions", env: map[string]string{"CHAOS_VERSIONS": "all"}, want: []string{"pg15-pgbouncer1.18", "pg17-pgbouncer1.24"}},
		{name: "FromTheStacksVariable", env: map[string]string{"DOUBLERUN_VERSIONS": "pg15-pgbouncer1.18"}, want: []string{"pg15-pgbouncer1.18"}},
		{name: "ChaosVersionsBeforeTheStacks", env: map[string]string{"CHAOS_VERSIONS": "pg17-pgbouncer1.24", "DOUBLERUN_VERSIONS": "pg15-pgbouncer1.18"}, want: []string{"pg17-pgbouncer1.24"}},
		{name: "FlagBeforeBoth", flag: "pg15-pgbouncer1.18", env: map[string]string{"CHAOS_VERSIONS": "all"}, want: []string{"pg15-pgbouncer1.18"}},
		{name: "ListInItsOrderWithoutRepeats", flag: "pg17-pgbouncer1.24, pg15-pgbouncer1.18,pg17-pgbouncer1.24", want: []string{"pg17-pgbouncer1.24", "pg15-pgbouncer1.18"}},
		{name: "UnknownInTheFlag", flag: "pg16-pgbouncer1.22", err: `unknown version set "pg16-pgbouncer1.22" in --versions; use all or one or more of pg15-pgbouncer1.18, pg17-pgbouncer1.24`},
		{name: "UnknownInTheEnvironment", env: map[string]string{"CHAOS_VERSIONS": "pg15,"}, err: `unknown version set "pg15" in CHAOS_VERSIONS; use all or one or more of pg15-pgbouncer1.18, pg17-pgbouncer1.24`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chaosVersionSets(tc.flag, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestVersionsBadInputGetsOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"ChaosUnknownSet", []string{"chaos", "--versions", "pg9-pgbouncer1.0"}, 2,
			`doublerun chaos: unknown version set "pg9-pgbouncer1.0" in --versions; use all or one or more of pg15-pgbouncer1.18, pg17-pgbouncer1.24`},
		{"ChaosBadShard", []string{"chaos", "--shard", "5/4"}, 2, `doublerun chaos: --shard: shard "5/4" is not i/n with 1 <= i <= n, such as 1/4`},
		{"RunAll", []string{"run", "--scenario", "issue-556", "--versions", "all"}, 2,
			"doublerun run: --versions all is for doublerun chaos; this command runs one stack: use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24"},
		{"ReproUnknownSet", []string{"repro", "556", "--versions", "pg16"}, 2,
			`doublerun repro: unknown version set "pg16" for --versions; use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24, or leave it out for pg17-pgbouncer1.24`},
		{"MergeWithoutDirectories", []string{"chaos", "merge"}, 2,
			"doublerun chaos: merge: give the directories of the runs to merge, such as reports/shard-1 reports/shard-2"},
		{"MergeOfNothing", []string{"chaos", "merge", os.TempDir() + "/doublerun-no-such-dir"}, 2,
			"doublerun chaos: merge: " + os.TempDir() + "/doublerun-no-such-dir does not exist; pass the --out directories of `doublerun chaos` runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, nil, tc.args...)
			require.Equal(t, tc.code, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			first, _, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tc.want, first)
		})
	}
}

// TestChaosMergePrintsAndWritesTheSummary merges two shards written as
// `doublerun chaos --shard` writes them, without a server.
func TestChaosMergePrintsAndWritesTheSummary(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cell := func(name string, pass bool) chaos.CellResult {
		sc := scenarios.Scenario{Name: "fenced/transaction/" + name, Strategy: "fenced", Fault: name, Expect: scenarios.ExpectSafe,
			Topology: scenarios.Topology{Kind: scenarios.Transaction, PoolSize: 1}}
		return chaos.CellResult{Scenario: sc, Versions: "pg17-pgbouncer1.24", Report: &scenarios.Report{Scenario: sc,
			Stack:   scenarios.StackInfo{Provider: "docker", Versions: scenarios.VersionsInfo{Set: "pg17-pgbouncer1.24", Postgres: "17.12", PgBouncer: "1.24.1"}},
			Metrics: oracle.Metrics{Leaderless: oracle.Window{Total: oracle.Duration(time.Second)}},
			Verdict: scenarios.Verdict{Expect: scenarios.ExpectSafe, Pass: pass, Reason: "because"}}}
	}
	for i, c := range []chaos.CellResult{cell("KILL_LEADER", true), cell("none", false)} {
		dir := filepath.Join(root, []string{"a", "b"}[i])
		require.NoError(t, report.Write(dir, c.Report))
		require.NoError(t, chaos.WriteCells(dir, chaos.ShardResults{Versions: "pg17-pgbouncer1.24", Shard: i + 1, Shards: 2, Total: 2, Wall: time.Minute, Results: []chaos.CellResult{c}, Index: []int{i}}))
	}
	// --out before the directories, between them or after them.
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for i, args := range [][]string{{"--out", "OUT", a, b}, {a, "--out", "OUT", b}, {a, b, "--out", "OUT"}} {
		out := filepath.Join(root, fmt.Sprintf("merged-%d", i))
		args = slices.Clone(args)
		args[slices.Index(args, "OUT")] = out
		stdout, stderr, code := cli(t, nil, append([]string{"chaos", "merge"}, args...)...)
		require.Equal(t, 1, code, "a cell failed: %s", stderr)
		require.Contains(t, stderr, "1 of 2 cells did not match their expectation: fenced/transaction/none")
		require.Contains(t, stdout, "2 cells, 1 matched their expectation, 1 did not; wall time 2m0s.")
		require.Contains(t, stdout, "Versions: pg17-pgbouncer1.24 (Postgres 17.12, PgBouncer 1.24.1); provider docker.")
		written, err := os.ReadFile(filepath.Join(out, "summary.md"))
		require.NoError(t, err, "%v", args)
		require.Equal(t, stdout, string(written))
	}
}
