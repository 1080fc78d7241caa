package chaos

import (
	"testing"
	"time"

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
// table says at that size.
func TestAtPoolSizes(t *testing.T) {
	t.Parallel()
	cells := Matrix(scenarios.Direct, scenarios.Transaction)
	direct, tx := 0, 0
	for _, c := range cells {
		if c.Topology == scenarios.Direct {
			direct++
		} else {
			tx++
		}
	}
	got := AtPoolSizes(cells, []int{1, 2, 4})
	require.Len(t, got, direct+3*tx)
	seen := map[string]bool{}
	for _, c := range got {
		require.False(t, seen[c.Name()], "one cell per name: %s", c.Name())
		seen[c.Name()] = true
		sc, err := c.Scenario()
		require.NoError(t, err, c.Name())
		want, ok := Expect(c)
		require.True(t, ok, c.Name())
		require.Equal(t, want.Expect, sc.Expect, c.Name())
		require.Equal(t, c.Name(), sc.Name)
		if c.Topology == scenarios.Direct {
			require.Zero(t, c.PoolSize, "a pool size means nothing on direct")
		}
	}
	require.Contains(t, seen, "advisory/transaction-pool4/KILL_LEADER")
	require.Equal(t, AtPoolSizes(cells, DefaultPoolSizes), cells, "the default changes nothing")
}

func TestCellDurationHoldsTheFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault string
		want  time.Duration
	}{
		{"none", 5 * time.Second},
		{"KILL_LEADER", 5 * time.Second},
		{"FREEZE_LEADER", 9 * time.Second},
		{"PGBOUNCER_PAUSE", 9 * time.Second},
	} {
		sc, err := Cell{Strategy: "fenced", Topology: scenarios.Transaction, Fault: tc.fault}.Scenario()
		require.NoError(t, err)
		require.Equal(t, tc.want, sc.Duration, tc.fault)
		require.Equal(t, tc.want, CellDuration(sc), tc.fault)
	}
	require.Equal(t, 3*time.Second, fault.Hold(scenarios.Scenario{}.FaultSetting()), "TTL 2s + 1s")
	require.Equal(t, 45*time.Second, fault.Hold(scenarios.Scenario{TTL: 30 * time.Second}.FaultSetting()))
}
