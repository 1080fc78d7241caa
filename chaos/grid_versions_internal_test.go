package chaos

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack"
)

func TestVersionGridOverridesOnlyCellsOfTheGrid(t *testing.T) {
	t.Parallel()
	for set, faults := range versionGrid {
		_, err := stack.LookupVersionSet(set)
		require.NoError(t, err, "an override for a version set stack does not know")
		for faultName, rows := range faults {
			for strategy, row := range rows {
				for topo, e := range row {
					base, ok := Expect(strategy, topo, faultName)
					require.True(t, ok, "%s: %s is not a cell of the grid", set, CellName(strategy, topo, faultName))
					require.NotEqual(t, base, e, "%s: %s overrides the grid with what it already says", set, CellName(strategy, topo, faultName))
					got, _ := ExpectOn(set, strategy, topo, faultName)
					require.Equal(t, e, got)
				}
			}
		}
	}
}

func TestOnVersionsKeepsTheGridWhereNoOverrideIs(t *testing.T) {
	t.Parallel()
	cells := Matrix(scenarios.Transaction)
	require.Equal(t, cells, OnVersions(cells, "pg0-pgbouncer0.0"), "an unknown set takes the grid")
	custom := []scenarios.Scenario{{Name: "mine", Strategy: scenarios.StrategyAdvisory, Topology: scenarios.Topology{Kind: scenarios.Transaction}, Fault: "none", Expect: scenarios.ExpectSafe}}
	for set := range versionGrid {
		require.Equal(t, custom, OnVersions(custom, set), "a cell that is not the matrix's keeps its expectation")
	}
}

// doc.go shows the overrides rendered from grid_versions.go; `go test
// ./chaos -run TestDocOverridesAreCurrent -update-doc` rewrites them.
func TestDocOverridesAreCurrent(t *testing.T) {
	data, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "//\tVERSIONS ") })
	require.GreaterOrEqual(t, start, 0, "doc.go has no rendered overrides (a line starting with VERSIONS)")
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "//\t") {
		end++
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSuffix(VersionOverrides(), "\n"), "\n") {
		want = append(want, "//\t"+strings.TrimRight(l, " "))
	}
	if *updateDoc {
		lines = slices.Concat(lines[:start], want, lines[end:])
		require.NoError(t, os.WriteFile("doc.go", []byte(strings.Join(lines, "\n")), 0o644))
		return
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(lines[start:end], "\n"),
		"doc.go's overrides are out of date; run go test ./chaos -run TestDocOverridesAreCurrent -update-doc")
}
