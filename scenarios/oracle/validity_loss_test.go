package oracle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A run judged by a token regression is valid only if its failover lost
// an acknowledged grant; every other run keeps its five conditions.
func TestLostGrantCondition(t *testing.T) {
	t.Parallel()
	regression := Options{Regression: true}
	lost := History{
		Grants:    []Grant{grant("a", 1, 10), grant("b", 2, 30)},
		TokenOps:  []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 120, 125)},
		Survivors: &Survivors{},
		Start:     at(0), End: at(200),
	}
	t.Run("AGrantTheNewPrimaryLacksHolds", func(t *testing.T) {
		t.Parallel()
		c := condition(t, validity(lost, regression), ConditionLostGrant)
		require.True(t, c.Holds, c.Reason)
		require.Equal(t, "1 acknowledged grants lost with the old primary: b's token 2 (acknowledged at +30ms)", c.Figure)
	})
	t.Run("NoGrantLostIsNoRegressionToShow", func(t *testing.T) {
		t.Parallel()
		kept := lost
		kept.TokenOps = []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 20, 25)}
		c := condition(t, validity(kept, regression), ConditionLostGrant)
		require.False(t, c.Holds)
		require.Equal(t, "every one of 2 acknowledged grants is on the new primary", c.Figure)
		require.Contains(t, c.Reason, "the failover lost no acknowledged grant")
	})
	t.Run("NothingReadBackIsNoLoss", func(t *testing.T) {
		t.Parallel()
		none := lost
		none.Survivors = nil
		c := condition(t, validity(none, regression), ConditionLostGrant)
		require.False(t, c.Holds)
		require.Contains(t, c.Reason, "read nothing back")
	})
	t.Run("OnlyARunJudgedByARegressionHasIt", func(t *testing.T) {
		t.Parallel()
		v := validity(lost, Options{})
		require.Len(t, v.Conditions, 5)
		for _, c := range v.Conditions {
			require.NotEqual(t, ConditionLostGrant, c.Name)
		}
	})
}
