package scenarios_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// One PgBouncer, two names: the lease on the session-mode name excludes
// the other replica although the work shares a transaction pool of one
// (#556 fixed without a second bouncer), and the report names both.
func TestAliasTopologyHoldsTheLease(t *testing.T) {
	t.Parallel()
	for _, f := range []string{fault.None, fault.GracefulHandover.Name(), fault.PgBouncerReconnect.Name()} {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			rep := runScenario(t, Scenario{Name: "alias-" + f, Strategy: strategy.Advisory,
				Topology: Topology{Kind: Alias, PoolSize: 1}, Fault: f, Expect: ExpectSafe})
			require.True(t, rep.Verdict.Pass, rep.Verdict.Reason)
			require.Zero(t, rep.Metrics.Orphaned.Episodes, "%+v", rep.Metrics.Orphaned)
			require.Positive(t, rep.Metrics.Writes, "the work went through the transaction name")
			require.Contains(t, rep.Stack.Lease, "_lease (PgBouncer")
			require.Contains(t, rep.Stack.Lease, "pool_mode=session")
			require.Contains(t, rep.Stack.Work, "pool_mode=transaction, default_pool_size=1")
			require.Contains(t, rep.Stack.LeaseEndpoint, "pinned", "the lease check sees a session-pinned endpoint")
		})
	}
}
