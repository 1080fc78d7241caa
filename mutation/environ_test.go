package mutation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/reexec"
)

// make test names a stand-in replica binary built before any mutant
// existed; a mutant's go test must start its own code instead, or a
// guard on the replicas' code would survive. Not parallel: it sets the
// environment.
func TestMutantsRunTheirOwnChildren(t *testing.T) {
	t.Setenv(reexec.EnvBinary, "/tmp/doublerun-stand-in")
	t.Setenv("DOUBLERUN_PROVIDER", "native")
	env := mutantEnviron()
	require.Contains(t, env, "DOUBLERUN_PROVIDER=native", "the rest of the environment reaches the tests")
	for _, kv := range env {
		require.False(t, strings.HasPrefix(kv, reexec.EnvBinary+"="), kv)
	}
}
