package oracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// A run on a stack with a standby is read back from two servers: the
// oracle's (here one database) and the pair's primary after the failover
// (another). A write acknowledged and then lost, and a job run again
// after its completion was acknowledged, show in the loss.
func TestLoadFailoverReadsTheOracleAndThePair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	odb, oconn := oracleDB(t)
	pdb, pconn := oracleDB(t)
	rec := recorder(t, odb.Postgres.DSN, "r1")

	// The lease's token table is on the pair; the server records its
	// grants there.
	_, err := pconn.Exec(ctx, "CREATE TABLE leases (name text PRIMARY KEY, holder text, token bigint)")
	require.NoError(t, err)
	require.NoError(t, oracle.RecordTokens(ctx, pconn, "leases"))
	_, err = pconn.Exec(ctx, "INSERT INTO leases VALUES ('l', 'r1', 7)")
	require.NoError(t, err)
	require.NoError(t, rec.Grant(ctx, 7))

	// Two writes on the pair, each acknowledged once committed.
	work := stacktest.Connect(t, pdb.Transaction)
	var keys []string
	for range 2 {
		tx, err := work.Begin(ctx)
		require.NoError(t, err)
		key, err := rec.SideEffectKey(ctx, tx, 7, true)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, rec.Ack(ctx, oracle.AckWrite, key, 7))
		keys = append(keys, key)
	}
	// A replica command's write, through the protocol functions.
	var cmdKey string
	require.NoError(t, work.QueryRow(ctx, `SELECT doublerun.side_effect_key('py1', 7, true)`).Scan(&cmdKey))
	_, err = oconn.Exec(ctx, `SELECT doublerun.ack('py1', $1, $2, 7)`, oracle.AckWrite, cmdKey)
	require.NoError(t, err)
	// A job completed, acknowledged, and started again.
	require.NoError(t, rec.JobRun(ctx, "j1"))
	require.NoError(t, rec.Ack(ctx, oracle.AckCompleted, "j1", 7))
	_, err = oconn.Exec(ctx, `SELECT doublerun.job_run('py1', 'j1')`)
	require.NoError(t, err)
	// The failover lost the second write.
	_, err = pconn.Exec(ctx, "DELETE FROM doublerun_side_effects WHERE id = $1::bigint", keys[1])
	require.NoError(t, err)

	h, err := oracle.LoadFailover(ctx, oconn, pconn, start, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, []string{keys[0], cmdKey}, h.Survivors.Writes)
	require.Len(t, h.Writes, 2)
	require.True(t, h.Writes[0].Accepted && h.Writes[0].Fenced)
	require.Len(t, h.TokenOps, 1)
	require.Equal(t, oracle.TokenOp{Kind: oracle.TokenGrant, Replica: "r1", Token: 7, Call: h.TokenOps[0].Call, Return: h.TokenOps[0].Return}, h.TokenOps[0])
	require.Len(t, h.Acks, 4)
	require.Equal(t, []string{"r1", "r1", "py1", "r1"}, []string{h.Acks[0].Replica, h.Acks[1].Replica, h.Acks[2].Replica, h.Acks[3].Replica})
	require.Len(t, h.JobRuns, 2)
	require.Equal(t, "py1", h.JobRuns[1].Replica)

	l := oracle.Analyze(h, oracle.Options{}).Loss
	require.NotNil(t, l)
	require.Len(t, l.LostWrites, 1)
	require.Equal(t, keys[1], l.LostWrites[0].Key)
	require.Len(t, l.RerunJobs, 1)
	require.Equal(t, "py1", l.RerunJobs[0].Run.Replica)
	require.Empty(t, l.TokenRegressions)
}
