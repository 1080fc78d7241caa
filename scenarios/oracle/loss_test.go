package oracle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func grant(replica string, token int64, ms int) Grant {
	return Grant{Replica: replica, Token: token, At: at(ms)}
}

func ack(kind, replica, key string, ms int) Ack {
	return Ack{Kind: kind, Replica: replica, Key: key, At: at(ms)}
}

func TestTokenRegressions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		grants []Grant
		ops    []TokenOp
		want   []TokenRegression
	}{
		{name: "RisingTokensAreNone",
			grants: []Grant{grant("a", 1, 10), grant("b", 2, 30)},
			ops:    []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 20, 25)}},
		// The lossy promotion: a's grant of 2 was lost, and the new
		// primary granted 2 to b.
		{name: "ATokenAcknowledgedToASecondReplicaIsReissued",
			grants: []Grant{grant("a", 1, 10), grant("a", 2, 30), grant("b", 2, 60)},
			ops:    []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 50, 55)},
			want:   []TokenRegression{{Grant: grant("b", 2, 60), Earlier: grant("a", 2, 30), Why: RegressionReissued}}},
		{name: "AGrantAcknowledgedTwiceToOneReplicaIsNone",
			grants: []Grant{grant("a", 2, 30), grant("a", 2, 60)}},
		// A grant of 3 was lost; the new primary's 2 is below it.
		{name: "AGrantBelowAnAcknowledgedTokenIsARegression",
			grants: []Grant{grant("a", 3, 30)},
			ops:    []TokenOp{grantOp("b", 2, 50, 55)},
			want:   []TokenRegression{{Grant: Grant{Replica: "b", Token: 2, At: at(50)}, Earlier: grant("a", 3, 30), Why: RegressionBelow}}},
		// A late acknowledgement of the higher token proves nothing.
		{name: "AGrantWhoseStatementBeganBeforeTheAckIsNone",
			grants: []Grant{grant("a", 3, 30)},
			ops:    []TokenOp{grantOp("b", 2, 20, 25)}},
		{name: "AGrantWhoseStatementBeganAtTheAckIsNone",
			grants: []Grant{grant("a", 3, 30)},
			ops:    []TokenOp{grantOp("b", 2, 30, 35)}},
		// The lossy promotion again, where the replica the grant was
		// lost for polls first: the server grants it 2 again.
		{name: "AnAcknowledgedTokenGrantedAgainToItsReplica",
			grants: []Grant{grant("a", 1, 10), grant("b", 2, 30)},
			ops:    []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 50, 55)},
			want:   []TokenRegression{{Grant: Grant{Replica: "b", Token: 2, At: at(50)}, Earlier: grant("b", 2, 30), Why: RegressionReissued}}},
		{name: "ARenewalOfTheAcknowledgedTokenIsNone",
			grants: []Grant{grant("b", 2, 30)},
			ops:    []TokenOp{grantOp("b", 2, 20, 25), renewOp("b", 2, 50, 55)}},
		// The old holder's renewal of 2 after b's lost grant of 3.
		{name: "ARenewalBelowAnAcknowledgedTokenIsARegression",
			grants: []Grant{grant("a", 2, 10), grant("b", 3, 30)},
			ops:    []TokenOp{grantOp("a", 2, 0, 5), renewOp("a", 2, 50, 55)},
			want:   []TokenRegression{{Grant: Grant{Replica: "a", Token: 2, At: at(50)}, Earlier: grant("b", 3, 30), Why: RegressionBelow}}},
		// 2 is reissued to b and its grant is below 3 as well: once.
		{name: "ATokenIsNamedOnce",
			grants: []Grant{grant("a", 2, 10), grant("a", 3, 30), grant("b", 2, 60)},
			ops:    []TokenOp{grantOp("b", 2, 50, 55), grantOp("c", 2, 70, 75)},
			want:   []TokenRegression{{Grant: grant("b", 2, 60), Earlier: grant("a", 2, 10), Why: RegressionReissued}}},
		// The earliest acknowledged higher token is named.
		{name: "TheFirstHigherAckIsTheEarlier",
			grants: []Grant{grant("a", 4, 30), grant("a", 3, 10)},
			ops:    []TokenOp{grantOp("b", 2, 50, 55)},
			want:   []TokenRegression{{Grant: Grant{Replica: "b", Token: 2, At: at(50)}, Earlier: grant("a", 3, 10), Why: RegressionBelow}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tokenRegressions(History{Grants: tc.grants, TokenOps: tc.ops})
			require.Equal(t, tc.want, got)
		})
	}
}

func TestLoss(t *testing.T) {
	t.Parallel()

	t.Run("NothingReadBackIsNoFailover", func(t *testing.T) {
		t.Parallel()
		h := History{Grants: []Grant{grant("a", 2, 10), grant("b", 2, 20)}, Acks: []Ack{ack(AckWrite, "a", "w1", 5)}}
		require.Nil(t, Analyze(h, Options{}).Loss)
	})

	t.Run("AnalyzeReportsTheLoss", func(t *testing.T) {
		t.Parallel()
		h := History{
			Grants:    []Grant{grant("a", 2, 10), grant("b", 2, 20)},
			Acks:      []Ack{ack(AckWrite, "a", "w1", 5), ack(AckWrite, "a", "w2", 6)},
			Survivors: &Survivors{Writes: []string{"w1"}},
		}
		l := Analyze(h, Options{}).Loss
		require.NotNil(t, l)
		require.Len(t, l.TokenRegressions, 1)
		require.Equal(t, []Ack{ack(AckWrite, "a", "w2", 6)}, l.LostWrites)
		require.Empty(t, l.LostEnqueues)
		require.Empty(t, l.RerunJobs)
	})

	t.Run("LostWritesAreTheAcknowledgedOnesThatAreGone", func(t *testing.T) {
		t.Parallel()
		acks := []Ack{ack(AckWrite, "a", "w1", 5), ack(AckWrite, "a", "w2", 6), ack(AckEnqueue, "a", "j1", 7)}
		l := loss(History{Acks: acks, Survivors: &Survivors{Writes: []string{"w1", "w3"}, Jobs: []string{"j1"}}})
		require.Equal(t, []Ack{ack(AckWrite, "a", "w2", 6)}, l.LostWrites, "w3 was never acknowledged; j1 is a job")
		require.Empty(t, l.LostEnqueues)
	})

	t.Run("LostEnqueuesAreTheAcknowledgedJobsThatAreGone", func(t *testing.T) {
		t.Parallel()
		acks := []Ack{ack(AckEnqueue, "a", "j1", 5), ack(AckEnqueue, "b", "j2", 6), ack(AckWrite, "a", "j3", 7)}
		l := loss(History{Acks: acks, Survivors: &Survivors{Writes: []string{"j3"}, Jobs: []string{"j2"}}})
		require.Equal(t, []Ack{ack(AckEnqueue, "a", "j1", 5)}, l.LostEnqueues)
		require.Empty(t, l.LostWrites)
	})

	t.Run("AJobThatRanAgainAfterItsCompletionIsARerun", func(t *testing.T) {
		t.Parallel()
		acks := []Ack{ack(AckCompleted, "a", "j1", 10), ack(AckEnqueue, "a", "j2", 1)}
		runs := []JobRun{{Replica: "a", Key: "j1", At: at(5)}, {Replica: "b", Key: "j1", At: at(40)}, {Replica: "b", Key: "j2", At: at(41)}}
		l := loss(History{Acks: acks, JobRuns: runs, Survivors: &Survivors{Jobs: []string{"j1", "j2"}}})
		require.Equal(t, []Rerun{{Completed: ack(AckCompleted, "a", "j1", 10), Run: runs[1]}}, l.RerunJobs,
			"j2's enqueue is no completion")
	})

	t.Run("ARunBeforeTheCompletionIsNone", func(t *testing.T) {
		t.Parallel()
		acks := []Ack{ack(AckCompleted, "a", "j1", 10)}
		runs := []JobRun{{Replica: "a", Key: "j1", At: at(5)}, {Replica: "b", Key: "j1", At: at(10)}, {Replica: "b", Key: "j9", At: at(40)}}
		require.Empty(t, loss(History{Acks: acks, JobRuns: runs, Survivors: &Survivors{}}).RerunJobs)
	})
}

// After a lossy promotion the server's record (TokenOps, read from the new
// primary) lacks the grant it lost, and alone it has a legal order; the
// replicas' acknowledgements put the lost grant back, and then two grants
// of one token have none. The epoch fence's history keeps one.
func TestFenceCheckAcrossALossyFailover(t *testing.T) {
	t.Parallel()
	const tl1, tl2 = int64(1) << 32, int64(2) << 32
	for _, tc := range []struct {
		name      string
		h         History
		want      string
		survivors bool
	}{
		{name: "ATokenGrantedAgainHasNoLegalOrder", survivors: true, want: LinearizableNo, h: History{
			Grants:   []Grant{grant("a", 1, 10), grant("b", 2, 30), grant("c", 2, 80)},
			TokenOps: []TokenOp{grantOp("a", 1, 0, 5), grantOp("c", 2, 70, 75)},
			Writes:   []Write{fencedWrite("b", 2, 90, 95, true), fencedWrite("c", 2, 100, 105, true)},
		}},
		{name: "ReadFromTheNewPrimaryAloneItHasOne", want: LinearizableYes, h: History{
			Grants:   []Grant{grant("a", 1, 10), grant("b", 2, 30), grant("c", 2, 80)},
			TokenOps: []TokenOp{grantOp("a", 1, 0, 5), grantOp("c", 2, 70, 75)},
			Writes:   []Write{fencedWrite("b", 2, 90, 95, true), fencedWrite("c", 2, 100, 105, true)},
		}},
		{name: "TheEpochFencesHistoryHasOne", survivors: true, want: LinearizableYes, h: History{
			Grants:   []Grant{grant("a", tl1|1, 10), grant("b", tl1|2, 30), grant("c", tl2|1, 80)},
			TokenOps: []TokenOp{grantOp("a", tl1|1, 0, 5), grantOp("c", tl2|1, 70, 75)},
			Writes:   []Write{fencedWrite("b", tl1|2, 90, 95, false), fencedWrite("c", tl2|1, 100, 105, true)},
		}},
		// lease.Advisory's token table has no holder: its record names no
		// replica, and the acknowledged grant is on it all the same.
		{name: "AnAdvisoryTokenTableNamesNoHolder", survivors: true, want: LinearizableYes, h: History{
			Grants:   []Grant{grant("a", 1, 10), grant("b", 2, 80)},
			TokenOps: []TokenOp{grantOp("", 1, 0, 5), grantOp("", 2, 70, 75)},
			Writes:   []Write{fencedWrite("a", 1, 20, 25, true), fencedWrite("a", 1, 90, 95, false)},
		}},
		// The run above, as the runner saw it: b's grant of 2 was lost,
		// a's late write under 1 was accepted on the new primary, and
		// then the new primary granted 2 to b again. That second grant
		// does not stand for the first.
		{name: "ALostGrantGrantedAgainToItsReplica", survivors: true, want: LinearizableNo, h: History{
			Grants:   []Grant{grant("a", 1, 10), grant("b", 2, 30)},
			TokenOps: []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 120, 125)},
			Writes:   []Write{fencedWrite("a", 1, 90, 95, true), fencedWrite("b", 2, 130, 135, true)},
		}},
		// Its grant's statement began before the acknowledgement: the
		// record has it.
		{name: "AGrantRecordedBeforeItsAck", survivors: true, want: LinearizableYes, h: History{
			Grants:   []Grant{grant("a", 1, 10), grant("b", 2, 30)},
			TokenOps: []TokenOp{grantOp("a", 1, 0, 5), grantOp("b", 2, 20, 25)},
			Writes:   []Write{fencedWrite("a", 1, 6, 8, true), fencedWrite("b", 2, 40, 45, true)},
		}},
		// A renewal on the server is no record of a grant.
		{name: "ARenewalDoesNotStandForALostGrant", survivors: true, want: LinearizableNo, h: History{
			Grants:   []Grant{grant("a", 1, 10), grant("b", 2, 30), grant("c", 2, 80)},
			TokenOps: []TokenOp{grantOp("a", 1, 0, 5), renewOp("b", 2, 40, 45), grantOp("c", 2, 70, 75)},
			Writes:   []Write{fencedWrite("c", 2, 100, 105, true)},
		}},
		// A grant acknowledged before every recorded operation moves the
		// history's start: its interval must not end before it begins.
		{name: "ALostGrantBeforeEveryRecordedOne", survivors: true, want: LinearizableNo, h: History{
			Grants:   []Grant{grant("b", 2, 3), grant("c", 2, 80)},
			TokenOps: []TokenOp{grantOp("c", 2, 70, 75)},
			Writes:   []Write{fencedWrite("c", 2, 100, 105, true)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.survivors {
				tc.h.Survivors = &Survivors{}
			}
			got := checkFence(tc.h, 0)
			require.NotNil(t, got)
			require.Equal(t, tc.want, got.Linearizable)
		})
	}
}
