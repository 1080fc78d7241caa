//go:build doublerun_nodocker

package stack

import "testing"

// requireNoContainersLeft has no docker backend to look at in a binary
// built without the docker provider.
func requireNoContainersLeft(t *testing.T, b backend) {
	t.Helper()
	t.Fatalf("unexpected backend %T", b)
}

func requireNoDockerStack(t *testing.T, id string) {
	t.Helper()
	t.Fatalf("an image root (docker stack %s) in a binary without docker", id)
}

// The sweep test's child process needs docker; without it there is none.
const envSweepChild = "DOUBLERUN_STACK_TEST_SWEEP_CHILD"

func runSweepChild() { panic(envSweepChild + " needs the docker provider") }
