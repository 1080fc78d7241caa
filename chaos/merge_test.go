package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/report"
)

// fakeRun is what a matrix run on one version set could have given: every
// cell with figures to the nanosecond (as a run measures them), some
// failed, one that could not run, one with a repair note.
func fakeRun(t *testing.T, set string, seed uint64) []CellResult {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	var out []CellResult
	scs, err := table.place(Matrix(), set, 0, nil)
	require.NoError(t, err)
	for i, sc := range scs {
		c := CellResult{Scenario: sc.WithDefaults(), Wall: time.Duration(rnd.Int64N(int64(20 * time.Second))), Versions: set}
		if i == 7 {
			c.Err = errors.New("no replica became leader\nreplica logs: ...")
			out = append(out, c)
			continue
		}
		if i%11 == 3 {
			c.Notes = []string{"session did not answer; started it again"}
		}
		dr := time.Duration(rnd.Int64N(int64(2 * time.Second)))
		if i%3 == 0 {
			dr = 0
		}
		c.Report = &scenarios.Report{
			Schema: scenarios.ReportSchema, Scenario: c.Scenario,
			Stack: scenarios.StackInfo{Provider: "docker", Versions: scenarios.VersionsInfo{Set: set, Postgres: set + ".1", PgBouncer: "1.x"}},
			Metrics: oracle.Metrics{
				DoubleRun:   oracle.Window{Episodes: int(dr / (300 * time.Millisecond)), Total: oracle.Duration(dr)},
				Leaderless:  oracle.Window{Total: oracle.Duration(time.Duration(rnd.Int64N(int64(5 * time.Second))))},
				StaleWrites: oracle.StaleWrites{Rejected: i % 2},
			},
			Verdict: scenarios.Verdict{Expect: sc.Expect, Pass: i%13 != 5, Reason: fmt.Sprintf("reason %d", i)},
		}
		out = append(out, c)
	}
	return out
}

// writeRun writes cells as `doublerun chaos --shard i/n --out dir` does.
func writeRun(t *testing.T, dir, set string, all []CellResult, i, n int, wall time.Duration) {
	t.Helper()
	var scs []scenarios.Scenario
	for _, c := range all {
		scs = append(scs, c.Scenario)
	}
	index := Shard(scs, i, n)
	var cells []CellResult
	for _, k := range index {
		cells = append(cells, all[k])
		if all[k].Report != nil {
			require.NoError(t, report.Write(dir, all[k].Report))
		}
	}
	cells = Canonical(cells)
	require.NoError(t, WriteCells(dir, ShardResults{Versions: set, Shard: i, Shards: n, Total: len(all), Wall: wall, Results: cells, Index: index}))
	require.NoError(t, WriteSummary(dir, cells, wall))
}

func TestMergingTheShardsGivesTheUnshardedSummary(t *testing.T) {
	t.Parallel()
	sets := []string{"pg15-pgbouncer1.18", "pg17-pgbouncer1.24"}
	runs := map[string][]CellResult{}
	for k, set := range sets {
		runs[set] = fakeRun(t, set, uint64(k))
	}
	const wall = 12 * time.Minute
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprintf("Shards%d", n), func(t *testing.T) {
			t.Parallel()
			var all []CellResult
			walls := map[string]time.Duration{}
			var dirs []string
			for _, set := range sets {
				all = append(all, Canonical(runs[set])...)
				walls[set] = wall
				for i := 1; i <= n; i++ {
					dir := filepath.Join(t.TempDir(), set, fmt.Sprintf("shard-%d", i))
					// The shards' walls add up to the unsharded run's.
					w := wall / time.Duration(n)
					if i == n {
						w = wall - time.Duration(n-1)*(wall/time.Duration(n))
					}
					writeRun(t, dir, set, runs[set], i, n, w)
					dirs = append(dirs, dir)
				}
			}
			for _, set := range sets {
				m, err := MergeDirs(dirsOf(dirs, set)...)
				require.NoError(t, err)
				require.Equal(t, Summary(Canonical(runs[set]), wall), m.Summary(), "one version set")
			}
			m, err := MergeDirs(dirs...)
			require.NoError(t, err)
			require.Equal(t, SummarySets(all, walls), m.Summary(), "both version sets")
			require.Contains(t, m.Summary(), "# Chaos matrix on 2 version sets")
		})
	}
}

func dirsOf(dirs []string, set string) []string {
	var out []string
	for _, d := range dirs {
		if filepath.Base(filepath.Dir(d)) == set {
			out = append(out, d)
		}
	}
	return out
}

func TestMergeOfOneRunIsItsOwnSummary(t *testing.T) {
	t.Parallel()
	set := "pg17-pgbouncer1.24"
	dir := t.TempDir()
	writeRun(t, dir, set, fakeRun(t, set, 9), 1, 1, 7*time.Minute)
	written, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	require.NoError(t, err)
	m, err := MergeDirs(dir)
	require.NoError(t, err)
	require.Equal(t, string(written), m.Summary())
	require.Contains(t, m.Summary(), "Versions: pg17-pgbouncer1.24 (Postgres pg17-pgbouncer1.24.1, PgBouncer 1.x); provider docker.")
}

func TestMergeRefusesAnIncompleteOrOverlappingSetOfShards(t *testing.T) {
	t.Parallel()
	set := "pg15-pgbouncer1.18"
	cells := fakeRun(t, set, 3)
	root := t.TempDir()
	shard := func(i, n int) string {
		dir := filepath.Join(root, fmt.Sprintf("%d-of-%d", i, n))
		writeRun(t, dir, set, cells, i, n, time.Minute)
		return dir
	}
	one, two, three := shard(1, 3), shard(2, 3), shard(3, 3)
	_, err := MergeDirs(one, three)
	require.EqualError(t, err, "version set pg15-pgbouncer1.18: shard 2/3 is missing; the summary would leave its cells out")
	_, err = MergeDirs(one, two, three, two)
	require.EqualError(t, err, "version set pg15-pgbouncer1.18: shard 2/3 is there twice; pass each shard's directory once")
	_, err = MergeDirs(one, two, three, shard(1, 2))
	require.ErrorContains(t, err, "does not belong with shard")
	_, err = MergeDirs(t.TempDir())
	require.ErrorContains(t, err, "no cells.json under")
}
