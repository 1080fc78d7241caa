package scenarios_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// A strategy's RefusesTransactionPooling says what its lease does: a
// built-in lease that says it refuses a transaction-pooled endpoint
// refuses the real one, and one that does not say so accepts it. A
// scenario of a refusing strategy on the transaction topology is invalid,
// with the reason, before any replica starts.
func TestStrategyRefusalMatchesTheLease(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{strategy.Advisory, strategy.AdvisoryUnguarded, strategy.AdvisoryWait, strategy.Fenced, strategy.FencedWait, strategy.FencedEpoch} {
		t.Run(name, func(t *testing.T) {
			s, ok := strategy.Lookup(name)
			require.True(t, ok)
			if s.Setup != nil {
				conn := stacktest.Connect(t, db.Postgres)
				require.NoError(t, s.Setup(ctx, conn))
			}
			l, err := s.New(ctx, strategy.LeaseConfig{Replica: "r1", Name: "refusal-" + name, DSN: db.Transaction.DSN, TTL: 2 * time.Second, PollInterval: 100 * time.Millisecond})
			if s.RefusesTransactionPooling == "" {
				require.NoError(t, err)
				require.NoError(t, l.Close(ctx))
				require.NoError(t, CheckStrategyTopology(name, Transaction))
				return
			}
			require.ErrorIs(t, err, lease.ErrTransactionPooled)
			require.EqualError(t, CheckStrategyTopology(name, Transaction),
				"strategy "+name+" refuses topology transaction: "+s.RefusesTransactionPooling+"; use direct, session or pinned")
			for _, k := range []TopologyKind{Direct, Session, Pinned} {
				require.NoError(t, CheckStrategyTopology(name, k), k)
			}
			sc := Scenario{Name: "x", Strategy: name, Topology: Topology{Kind: Transaction}, Expect: ExpectSafe}
			require.ErrorContains(t, sc.Validate(), "strategy "+name+" refuses topology transaction: a waiting follower holds its server connection")
		})
	}
}
