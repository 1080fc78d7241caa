package main

import (
	"context"
	"path/filepath"
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

// Every warm-up command runs, one after the other, before the channel
// closes: the replica programs' build follows the tests' compile.
func TestWarmUpRunsEachInTurn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	<-warmUp(context.Background(), [][]string{{"touch", first}, {}, {"cp", first, second}})
	require.FileExists(t, second, "the second command ran after the first")
}
