package worker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

func TestFence(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).
	t.Run("NeedsALeaderContext", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, Fence(context.Background(), nil), ErrNoTerm)
		_, ok := TermFromContext(context.Background())
		require.False(t, ok)
	})

	t.Run("PassesWhenTheLeaseCannotFence", func(t *testing.T) {
		t.Parallel()
		ctx := withLeader(context.Background(), leaderTerm, nil)
		require.NoError(t, Fence(ctx, nil))
		term, ok := TermFromContext(ctx)
		require.True(t, ok)
		require.Equal(t, leaderTerm, term)
	})
}

// The fence of a cycle checks that cycle's term, inside the caller's
// transaction.
func TestFenceChecksTheTermOfTheCycle(t *testing.T) {
	t.Parallel()
	db := newSchema(t)
	conn := stacktest.Connect(t, db.Postgres)
	l := newFencingLease()
	ctx := withLeader(context.Background(), leaderTerm, l)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, Fence(ctx, tx), "the newest term passes")
	l.newest.Store(leaderTerm.Token + 1)
	err = Fence(ctx, tx)
	require.ErrorIs(t, err, lease.ErrStaleToken)
	require.ErrorContains(t, err, "fence token 7 of test")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, int64(2), l.fences.Load())
}
