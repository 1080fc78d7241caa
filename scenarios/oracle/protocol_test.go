package oracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// A replica in another language reports through the SQL functions
// Migrate installs; Load must read back what a Recorder would have
// written: a grant, a piece of work with its backend, an accepted write
// from the leader's transaction on the work endpoint, a refusal, an event
// and a lock claim.
func TestProtocolFunctionsWriteWhatARecorderWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := oracleDB(t)
	start := time.Now().Add(-time.Minute)

	var token int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT doublerun.next_token()`).Scan(&token))
	require.Positive(t, token)
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT doublerun.work_begin('py1', $1, 4242)`, token).Scan(&id))
	replica, pid, err := oracle.LatestWork(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, "py1", replica)
	require.Equal(t, int32(4242), pid)
	begun, err := oracle.WorkBegun(ctx, conn, "py1", time.Minute)
	require.NoError(t, err)
	require.True(t, begun, "a piece begun and not ended")

	work := stacktest.Connect(t, db.Transaction)
	tx, err := work.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT doublerun.side_effect('py1', $1, true)`, token)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = conn.Exec(ctx, `SELECT doublerun.rejected('py1', $1 - 1)`, token)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT doublerun.work_end($1)`, id)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT doublerun.became_leader('py2', $1 + 1)`, token)
	require.NoError(t, err)
	var at time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT doublerun.event('py1', $1, 'pid 7')`, oracle.EventReplicaStarted).Scan(&at))
	_, err = conn.Exec(ctx, `SELECT doublerun.lock_claim('py1', 4242, 271, 1)`)
	require.NoError(t, err)

	h, err := oracle.Load(ctx, conn, start, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, h.Intervals, 1)
	iv := h.Intervals[0]
	require.Equal(t, "py1", iv.Replica)
	require.Equal(t, token, iv.Token)
	require.Equal(t, int32(4242), iv.BackendPID)
	require.False(t, iv.Open, "work_end ended it")
	require.True(t, iv.End.After(iv.Start))
	require.Len(t, h.Grants, 2)
	require.Equal(t, oracle.Grant{Replica: "py1", Token: token, At: h.Grants[0].At}, h.Grants[0])
	require.Equal(t, "py2", h.Grants[1].Replica)
	require.Len(t, h.Writes, 2)
	var accepted, refused int
	for _, w := range h.Writes {
		require.False(t, w.At.Before(w.Call))
		if w.Accepted {
			accepted++
			require.True(t, w.Fenced)
			require.Equal(t, token, w.Token)
		} else {
			refused++
			require.Equal(t, token-1, w.Token)
		}
	}
	require.Equal(t, 1, accepted)
	require.Equal(t, 1, refused)
	var claim string
	for _, e := range h.Events {
		if e.Kind == oracle.EventLockClaim {
			claim = e.Detail
		}
	}
	require.Equal(t, oracle.ClaimDetail(4242, 271, 1), claim)
	k1, k2, ok, err := oracle.ClaimedLock(ctx, conn)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, [2]int32{271, 1}, [2]int32{k1, k2})
}
