package oracle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Work a replica never logged the end of ends when that replica died
// after starting it; the other replicas' deaths and the faults say nothing
// about it.
func TestDeathAfterEndsOpenWork(t *testing.T) {
	t.Parallel()
	runEnd := at(5000)
	for _, tc := range []struct {
		name   string
		events []Event
		want   time.Time
	}{
		{"NoDeathEndsAtTheRunsEnd", nil, runEnd},
		{"KilledEndsIt", []Event{{Kind: EventReplicaKilled, Replica: "a", At: at(1500)}}, at(1500)},
		{"StoppedEndsIt", []Event{{Kind: EventReplicaStopped, Replica: "a", At: at(1500)}}, at(1500)},
		{"AnotherReplicasDeathDoesNot", []Event{{Kind: EventReplicaKilled, Replica: "b", At: at(1500)}}, runEnd},
		{"AFaultDoesNot", []Event{{Kind: EventFault, Replica: "a", At: at(1500)}}, runEnd},
		{"ADeathBeforeTheWorkDoesNot", []Event{{Kind: EventReplicaKilled, Replica: "a", At: at(500)}}, runEnd},
		{"TheFirstDeathAfterTheStartCounts", []Event{
			{Kind: EventReplicaStopped, Replica: "a", At: at(500)},
			{Kind: EventReplicaStarted, Replica: "a", At: at(600)},
			{Kind: EventReplicaKilled, Replica: "a", At: at(1500)},
			{Kind: EventReplicaStopped, Replica: "a", At: at(2500)},
		}, at(1500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, deathAfter(tc.events, "a", at(1000), runEnd))
		})
	}
}
