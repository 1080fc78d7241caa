package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The test binaries get the shared stack's DSNs and the marker, and keep
// the provider the user chose for the stacks they start themselves.
func TestSharedEnv(t *testing.T) {
	t.Parallel()
	stackEnv := []string{"DOUBLERUN_PROVIDER=external", "DOUBLERUN_POSTGRES_DSN=postgres://x", "DOUBLERUN_DOCKER_NETWORK=n"}
	got := sharedEnv([]string{"HOME=/root", "DOUBLERUN_PROVIDER=native"}, stackEnv)
	require.Equal(t, []string{"HOME=/root", "DOUBLERUN_PROVIDER=native", "DOUBLERUN_POSTGRES_DSN=postgres://x",
		"DOUBLERUN_DOCKER_NETWORK=n", "DOUBLERUN_SHARED_STACK=1"}, got)
	got = sharedEnv([]string{"HOME=/root"}, stackEnv)
	require.NotContains(t, got, "DOUBLERUN_PROVIDER=external", "auto stays auto for the tests' own stacks")
}
