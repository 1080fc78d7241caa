package chaos

import (
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
