package chaos

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
)

func TestParsePoolSizes(t *testing.T) {
	t.Parallel()
	sizes, err := ParsePoolSizes(" 4,1,2,4 ")
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 4}, sizes)
	for _, bad := range []string{"0", "two", "1,17", " , ", "1,,2", "1,2,", ""} {
		_, err := ParsePoolSizes(bad)
		require.Error(t, err, bad)
	}
	_, err = ParsePoolSizes("1,x")
	require.EqualError(t, err, `pool size "x": need a whole number from 1 to 16, such as 1,2,4`)
	_, err = ParsePoolSizes("1,,2")
	require.EqualError(t, err, `entry 2 of "1,,2" is empty; give sizes such as 1,2,4`)
	_, err = ParsePoolSizes("  ")
	require.EqualError(t, err, `no pool size in "  "; give sizes such as 1,2,4`)
}

// Every cell with a transaction pool runs once per size; the others once.
// A size above 1 names its cell after the size and expects what the
// pool-size table says, else what the grid says.
func TestAtPoolSizes(t *testing.T) {
	t.Parallel()
	cells := Matrix(scenarios.Direct, scenarios.Transaction)
	direct, tx := 0, 0
	for _, c := range cells {
		if c.Topology.Kind == scenarios.Direct {
			direct++
		} else {
			tx++
		}
	}
	got := AtPoolSizes(cells, []int{1, 2, 4})
	require.Len(t, got, direct+3*tx)
	seen := map[string]bool{}
	for _, c := range got {
		require.False(t, seen[c.Name], "one cell per name: %s", c.Name)
		seen[c.Name] = true
		want, ok := ExpectAt(c.Strategy, c.Topology.Kind, c.Fault, c.Topology.PoolSize)
		require.True(t, ok, c.Name)
		require.Equal(t, want, c.Expect, c.Name)
		require.NoError(t, c.Validate(), c.Name)
	}
	c, err := CellAt(scenarios.StrategyAdvisory, scenarios.Transaction, fault.KillLeader.Name(), 4)
	require.NoError(t, err)
	require.Equal(t, "advisory/transaction-pool4/KILL_LEADER", c.Name)
	require.Equal(t, 4, c.Topology.PoolSize)
	require.Equal(t, AtPoolSizes(cells, DefaultPoolSizes), cells, "the default changes nothing")
}

// The pool-size table names only sizes above 1, faults of the catalog,
// strategies of the matrix and topologies with a transaction pool, and
// only cells that exist.
func TestPoolGridIsWellFormed(t *testing.T) {
	t.Parallel()
	for size, blocks := range poolGrid {
		require.Greater(t, size, 1)
		require.LessOrEqual(t, size, MaxPoolSize)
		for f, rows := range blocks {
			require.Contains(t, columns(), f)
			for s, row := range rows {
				require.Contains(t, Strategies, s)
				for topo := range row {
					require.True(t, sized(topo), "%d/%s/%s/%s", size, f, s, topo)
					_, ok := Expect(s, topo, f)
					require.True(t, ok, "%d/%s/%s/%s is no cell of the grid", size, f, s, topo)
				}
			}
		}
	}
}
