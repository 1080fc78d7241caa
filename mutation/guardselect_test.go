package mutation

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A guard runs at once when its mutated file, its package or its
// manifest changed since the base, and otherwise only in its shard; over
// n shards every guard runs exactly once.
func TestPickGuards(t *testing.T) {
	t.Parallel()
	root := "/repo"
	guard := func(id, pkg, file, manifest string) Guard {
		return Guard{ID: id, Package: pkg, File: file, Manifest: filepath.Join(root, manifest)}
	}
	const n = 4
	// One guard per shard, none of them touched by the change below.
	var quiet []Guard
	for i := 0; len(quiet) < n; i++ {
		id := fmt.Sprintf("pgbouncer.g%d", i)
		if GuardShard(id, n) == len(quiet) {
			quiet = append(quiet, guard(id, "./pgbouncer", "pgbouncer/config.go", "testdata/mutation/pgbouncer.guards.json"))
		}
	}
	byFile := guard("lease.file", "./worker", "lease/advisory.go", "testdata/mutation/lease.guards.json")
	byTest := guard("worker.test", "./worker", "worker/claim.go", "testdata/mutation/worker.guards.json")
	byManifest := guard("stack.manifest", "./scenarios/stack", "scenarios/stack/stack.go", "testdata/mutation/stack.guards.json")
	nested := guard("scenarios.nested", "./scenarios", "scenarios/runner.go", "testdata/mutation/scenarios.guards.json")
	all := append([]Guard{byFile, byTest, byManifest, nested}, quiet...)
	changed := []string{
		"lease/advisory.go",                        // byFile's mutated file
		"worker/testdata/x.json",                   // under byTest's package
		"testdata/mutation/stack.guards.json",      // byManifest's manifest
		"scenarios/oracle/doc.go",                  // under nested's package directory: its tests may see it
		"pgbouncerx/y.go",                          // a prefix of the quiet guards' package
		"testdata/mutation/pgbouncer.guards.jsonx", // a prefix of their manifest
	}

	runs := map[string]int{}
	for k := range n {
		p := PickGuards(all, root, changed, k, n)
		ids := map[string]bool{}
		for _, g := range p.Guards {
			ids[g.ID] = true
			runs[g.ID]++
		}
		require.True(t, ids[byFile.ID] && ids[byTest.ID] && ids[byManifest.ID] && ids[nested.ID], "shard %d: the changed guards run in every shard: %v", k, ids)
		require.Equal(t, 4, p.Changed, "shard %d", k)
		require.Equal(t, 1, p.Shard, "shard %d: its one quiet guard", k)
		require.True(t, ids[quiet[k].ID], "shard %d runs its own guard", k)
	}
	for _, g := range quiet {
		require.Equal(t, 1, runs[g.ID], "%s runs in exactly one of %d shards", g.ID, n)
	}
	require.Equal(t, n, runs[byFile.ID])

	// Nothing changed: each shard runs its own guards only.
	p := PickGuards(quiet, root, nil, 2, n)
	require.Equal(t, GuardPick{Guards: []Guard{quiet[2]}, Shard: 1}, p)
}

// GuardShard spreads ids over every shard and keeps an id's shard.
func TestGuardShard(t *testing.T) {
	t.Parallel()
	const n = 8
	count := make([]int, n)
	for i := range 400 {
		k := GuardShard(fmt.Sprintf("guard.%d", i), n)
		require.GreaterOrEqual(t, k, 0)
		require.Less(t, k, n)
		count[k]++
	}
	for k, c := range count {
		require.Greater(t, c, 20, "shard %d has %d of 400 guards", k, c)
	}
	require.Equal(t, GuardShard("lease.pid-equality", n), GuardShard("lease.pid-equality", n))
	require.Zero(t, GuardShard("anything", 1))
}

// ChangedFiles names every file that differs from a commit, committed or
// not, tests and data included, and refuses an unknown commit.
func TestChangedFiles(t *testing.T) {
	t.Parallel()
	root, git, write := scratchRepo(t)
	write("lease/a.go", "a\n")
	write("lease/a_test.go", "t\n")
	write("worker/w.go", "w\n")
	git("add", ".")
	git("commit", "-qm", "one")
	base := git("rev-parse", "HEAD")

	files, err := ChangedFiles(t.Context(), root, base)
	require.NoError(t, err)
	require.Empty(t, files)

	write("lease/a_test.go", "T\n")
	git("commit", "-qam", "two")
	write("testdata/mutation/x.guards.json", "{}\n")
	git("add", ".")
	write("worker/w.go", "W\n") // not committed
	files, err = ChangedFiles(t.Context(), root, base)
	require.NoError(t, err)
	require.Equal(t, []string{"lease/a_test.go", "testdata/mutation/x.guards.json", "worker/w.go"}, files)

	_, err = ChangedFiles(t.Context(), root, "no-such-commit")
	require.ErrorContains(t, err, "git diff --name-only no-such-commit")
}
