package oracle

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

// grantOp and renewOp are a token operation from call to ret (ms).
func grantOp(replica string, token int64, call, ret int) TokenOp {
	return TokenOp{Kind: TokenGrant, Replica: replica, Token: token, Call: at(call), Return: at(ret)}
}

func renewOp(replica string, token int64, call, ret int) TokenOp {
	return TokenOp{Kind: TokenRenewal, Replica: replica, Token: token, Call: at(call), Return: at(ret)}
}

// fencedWrite is a fenced side-effect write from call to ret (ms).
func fencedWrite(replica string, token int64, call, ret int, accepted bool) Write {
	return Write{Replica: replica, Token: token, Call: at(call), At: at(ret), Accepted: accepted, Fenced: true}
}

// Hand-made histories of the fence: the ones whose operations have no
// legal order must fail, the ones with overlaps that have one must pass.
func TestFenceCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ops    []TokenOp
		writes []Write
		want   string
	}{
		{"AWriteAcceptedAfterANewerGrantCompletedFails",
			[]TokenOp{grantOp("a", 1, 0, 10), grantOp("b", 2, 100, 110)},
			[]Write{fencedWrite("a", 1, 200, 210, true)}, LinearizableNo},
		{"TwoGrantsOfOneTokenFail",
			[]TokenOp{grantOp("a", 1, 0, 10), grantOp("b", 1, 20, 30)},
			[]Write{fencedWrite("b", 1, 40, 50, true)}, LinearizableNo},
		{"TwoGrantsOfOneTokenAtOnceFail",
			[]TokenOp{grantOp("a", 1, 0, 10), grantOp("b", 1, 0, 10)},
			[]Write{fencedWrite("b", 1, 40, 50, true)}, LinearizableNo},
		{"ARejectedWriteThatWasCurrentFails",
			[]TokenOp{grantOp("a", 1, 0, 10)},
			[]Write{fencedWrite("a", 1, 20, 30, false)}, LinearizableNo},
		{"ARenewalAfterANewerGrantCompletedFails",
			[]TokenOp{grantOp("a", 1, 0, 10), grantOp("b", 2, 20, 30), renewOp("a", 1, 40, 50)},
			[]Write{fencedWrite("b", 2, 60, 70, true)}, LinearizableNo},
		{"ATokenGrantedBelowTheNewestFails",
			[]TokenOp{grantOp("a", 2, 0, 10), grantOp("b", 1, 20, 30)},
			[]Write{fencedWrite("b", 1, 40, 50, false)}, LinearizableNo},
		{"AWriteAcceptedBeforeItsGrantFails",
			[]TokenOp{grantOp("a", 1, 20, 30)},
			[]Write{fencedWrite("a", 1, 0, 10, true)}, LinearizableNo},
		{"ARenewalBeforeItsGrantFails",
			[]TokenOp{renewOp("a", 1, 0, 10), grantOp("a", 1, 20, 30)},
			[]Write{fencedWrite("a", 1, 40, 50, true)}, LinearizableNo},

		{"ASequentialHandOverPasses",
			[]TokenOp{grantOp("a", 1, 0, 10), renewOp("a", 1, 20, 30), grantOp("b", 2, 100, 110), renewOp("b", 2, 150, 160)},
			[]Write{fencedWrite("a", 1, 40, 50, true), fencedWrite("a", 1, 120, 130, false), fencedWrite("b", 2, 170, 180, true)},
			LinearizableYes},
		// The old leader's write began before the new grant and its row
		// was written after the grant began: the fence held the grant off,
		// so the write goes first. The refused write overlapping the grant
		// goes after it.
		{"ConcurrentOverlapsWithALegalOrderPass",
			[]TokenOp{grantOp("a", 1, 0, 10), grantOp("b", 2, 50, 60), renewOp("b", 2, 65, 75)},
			[]Write{fencedWrite("a", 1, 20, 100, true), fencedWrite("a", 1, 55, 90, false), fencedWrite("b", 2, 70, 80, true)},
			LinearizableYes},
		// Intervals are closed: a write that begins at the instant a newer
		// grant returned may still go before it.
		{"IntervalsThatTouchAreConcurrent",
			[]TokenOp{grantOp("a", 1, 0, 10), grantOp("b", 2, 10, 20)},
			[]Write{fencedWrite("a", 1, 20, 30, true)}, LinearizableYes},
		{"ARefusalBeforeAnyGrantPasses",
			[]TokenOp{grantOp("a", 1, 20, 30)},
			[]Write{fencedWrite("a", 5, 0, 10, false), fencedWrite("a", 1, 40, 50, true)}, LinearizableYes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Analyze(History{TokenOps: tc.ops, Writes: tc.writes}, Options{})
			require.NotNil(t, m.Linearizability)
			require.Equal(t, tc.want, m.Linearizability.Linearizable)
			require.Equal(t, len(tc.ops)+len(tc.writes), m.Linearizability.Operations)
			require.Equal(t, tc.want == LinearizableYes, m.Linearizability.Holds())
			require.Positive(t, m.Linearizability.CheckedIn)
		})
	}
}

// The check needs a fenced write and recorded tokens; without either there
// is nothing it could judge, and it says nothing rather than something
// false.
func TestFenceCheckNeedsFencedWritesAndTokens(t *testing.T) {
	t.Parallel()
	ops := []TokenOp{grantOp("a", 1, 0, 10)}
	unfenced := Write{Replica: "a", Token: 1, Call: at(20), At: at(30), Accepted: true}
	require.Nil(t, Analyze(History{TokenOps: ops}, Options{}).Linearizability, "no write")
	require.Nil(t, Analyze(History{TokenOps: ops, Writes: []Write{unfenced}}, Options{}).Linearizability, "no fenced write")
	require.Nil(t, Analyze(History{Writes: []Write{fencedWrite("a", 1, 20, 30, true)}}, Options{}).Linearizability, "no token recorded")
	// Unfenced writes are left out of a check that runs.
	l := Analyze(History{TokenOps: ops, Writes: []Write{unfenced, fencedWrite("a", 1, 40, 50, true)}}, Options{}).Linearizability
	require.Equal(t, &Linearizability{Linearizable: LinearizableYes, Operations: 2, CheckedIn: l.CheckedIn}, l)
}

// Operations are in microseconds from the earliest call, one client per
// replica in name order; a grant from a table without a holder is the
// replica's whose grant record has its token.
func TestFenceOperations(t *testing.T) {
	t.Parallel()
	h := History{
		Grants:   []Grant{{Replica: "r2", Token: 7, At: at(40)}},
		TokenOps: []TokenOp{{Kind: TokenGrant, Token: 7, Call: at(10), Return: at(12)}, grantOp("", 8, 60, 61)},
		Writes:   []Write{fencedWrite("r1", 6, 5, 30, false), fencedWrite("r2", 7, 41, 50, true)},
	}
	ops, clients, base := fenceOperations(h)
	require.Equal(t, at(5), base)
	require.Equal(t, map[string]int{"": 0, "r1": 1, "r2": 2}, clients)
	require.Equal(t, []porcupine.Operation{
		{ClientId: 2, Input: fenceOp{grant: true, token: 7, replica: "r2"}, Call: 5000, Output: true, Return: 7000, Metadata: "r2"},
		{ClientId: 0, Input: fenceOp{grant: true, token: 8}, Call: 55000, Output: true, Return: 56000, Metadata: "unknown replica"},
		{ClientId: 1, Input: fenceOp{write: true, token: 6, replica: "r1"}, Call: 0, Output: false, Return: 25000, Metadata: "r1"},
		{ClientId: 2, Input: fenceOp{write: true, token: 7, replica: "r2"}, Call: 36000, Output: true, Return: 45000, Metadata: "r2"},
	}, ops)
}

func TestLinearizabilityReads(t *testing.T) {
	t.Parallel()
	l := Linearizability{Linearizable: LinearizableYes, Operations: 412, CheckedIn: Duration(1934 * time.Microsecond)}
	require.Equal(t, "linearizable: yes, 412 operations, checked in 1.93ms", l.String())
	require.Equal(t, LinearizableYes, verdictOf(porcupine.Ok))
	require.Equal(t, LinearizableNo, verdictOf(porcupine.Illegal))
	require.Equal(t, LinearizableUnknown, verdictOf(porcupine.Unknown))
	require.False(t, Linearizability{Linearizable: LinearizableUnknown}.Holds(), "a check that ran out of time proves nothing")
}

// The HTML view names every operation as the model reads it, the states
// the order goes through, and the runner's events; without a fenced
// write there is nothing to draw.
func TestVisualizeFence(t *testing.T) {
	t.Parallel()
	h := History{
		TokenOps: []TokenOp{grantOp("a", 1, 0, 10), renewOp("a", 1, 12, 14), grantOp("b", 2, 50, 60)},
		Writes:   []Write{fencedWrite("c", 3, -9, -8, false), fencedWrite("a", 1, 20, 30, true), fencedWrite("a", 1, 70, 80, false)},
		Events: []Event{
			{Kind: EventFault, Replica: "a", Detail: "FREEZE_LEADER", At: at(15)},
			{Kind: EventLockClaim, Replica: "a", Detail: "backend 7 lock 271,1", At: at(16)},
			{Kind: EventMeasureStart, At: at(-5)},
		},
	}
	var b bytes.Buffer
	require.NoError(t, VisualizeFence(&b, h, 0))
	html := b.String()
	for _, want := range []string{"grant(1)", "renew(1)", "grant(2)", "write(1) accepted", "write(1) rejected", "write(3) rejected",
		"never granted", "newest token 1", "newest token 2", `"Description":"fault"`, "FREEZE_LEADER", `"Tag":"runner"`} {
		require.True(t, strings.Contains(html, want), "the view has %s", want)
	}
	require.False(t, strings.Contains(html, "backend 7 lock"), "lock claims are left out")
	require.Error(t, VisualizeFence(&b, History{TokenOps: h.TokenOps}, 0))

	// A history with no legal order is drawn too: that is when it is
	// read.
	b.Reset()
	require.NoError(t, VisualizeFence(&b, History{
		TokenOps: []TokenOp{grantOp("a", 1, 20, 30)},
		Writes:   []Write{fencedWrite("a", 1, 0, 10, true)},
	}, time.Second))
	require.True(t, strings.Contains(b.String(), "write(1) accepted"))
}
