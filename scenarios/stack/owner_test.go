package stack

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// The owner tests are pure logic: they run without a Docker engine too,
// as the mutation gate's test binaries do (tag doublerun_nodocker).
func TestOwnerGone(t *testing.T) {
	t.Parallel()
	me := self()
	require.NotZero(t, me.Start)
	require.NotEmpty(t, me.Boot)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	deadPID := dead.Process.Pid

	for _, tc := range []struct {
		name  string
		owner owner
		gone  bool
	}{
		{"LiveOwnerIsNotGone", me, false},
		{"DeadPIDIsGone", owner{PID: deadPID, Boot: me.Boot, Host: me.Host}, true},
		{"ReusedPIDIsGone", owner{PID: me.PID, Start: me.Start + 1, Boot: me.Boot, Host: me.Host}, true},
		{"EarlierBootIsGone", owner{PID: me.PID, Start: me.Start, Boot: "another-boot", Host: me.Host}, true},
		{"AnotherHostIsNeverGone", owner{PID: deadPID, Boot: "another-boot", Host: me.Host + "-other"}, false},
		{"NoPIDIsNeverGone", owner{Boot: "another-boot", Host: me.Host}, false},
		{"BarePIDOfALiveProcessIsNotGone", owner{PID: me.PID}, false},
		{"BarePIDOfADeadProcessIsGone", owner{PID: deadPID}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.gone, tc.owner.gone(me))
		})
	}
}

func TestOwnerRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	me := self()
	require.Equal(t, me, parseOwner(me.encode()), "owner file")
	require.Equal(t, me, ownerFromLabels(me.labels()), "docker labels")
	require.Equal(t, owner{PID: 42}, parseOwner("42"), "the bare PID earlier versions wrote")
}
