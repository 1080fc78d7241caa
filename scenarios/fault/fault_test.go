package fault_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/fault"
)

func TestCatalog(t *testing.T) {
	t.Parallel()
	require.Len(t, fault.All, 14)
	for _, f := range fault.All {
		got, ok := fault.Lookup(f.Name())
		require.True(t, ok, f.Name())
		require.Equal(t, f, got)
		require.NoError(t, fault.CheckName(f.Name()))
		require.GreaterOrEqual(t, fault.TimeoutOf(f), fault.DefaultTimeout, f.Name())
	}
	_, ok := fault.Lookup(fault.None)
	require.False(t, ok, "none is no fault")
	require.NoError(t, fault.CheckName(fault.None))
	_, ok = fault.Lookup("METEOR")
	require.False(t, ok)
	require.EqualError(t, fault.CheckName("METEOR"), `unknown fault "METEOR"; valid: none, TERMINATE_LEADER_BACKEND, KILL_LEADER, FREEZE_LEADER, PARTITION_LEADER, DELAY_LEADER, PGBOUNCER_PAUSE, PGBOUNCER_KILL, PGBOUNCER_RECONNECT, PGBOUNCER_RESTART, POSTGRES_RESTART, GRACEFUL_HANDOVER, PRIMARY_FAILOVER, PRIMARY_FAILOVER_LOSSY, SWITCHOVER`)
}

// The faults that hold the leader hold it for Hold, so a measurement can
// outlast them; the rest strike and are done.
func TestHeldFor(t *testing.T) {
	t.Parallel()
	s := fault.Setting{TTL: 2 * time.Second, Work: 200 * time.Millisecond}
	require.Equal(t, 3*time.Second, fault.Hold(s), "TTL + TTL/2")
	require.Equal(t, 1500*time.Millisecond, fault.Hold(fault.Setting{TTL: time.Second}))
	require.Equal(t, 700*time.Millisecond, fault.Hold(fault.Setting{TTL: 200 * time.Millisecond}), "at least 500ms over the TTL")
	// PRIMARY_FAILOVER_LOSSY freezes the leader while the standby falls
	// behind, so that a grant is lost in every run.
	holding := map[string]bool{"FREEZE_LEADER": true, "PARTITION_LEADER": true, "DELAY_LEADER": true, "PGBOUNCER_PAUSE": true,
		"PRIMARY_FAILOVER_LOSSY": true}
	for _, f := range fault.All {
		want := time.Duration(0)
		if holding[f.Name()] {
			want = fault.Hold(s)
			require.Greater(t, fault.TimeoutOf(f), fault.DefaultTimeout, "%s: a hold may outlast the default timeout", f.Name())
		}
		require.Equal(t, want, fault.HeldFor(f, s), f.Name())
	}
}
