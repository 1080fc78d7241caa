package chaos_test

import (
	"testing"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The test binary is also the scenario replica: the runner starts it again
// with DOUBLERUN_REPLICA set.
func TestMain(m *testing.M) {
	scenarios.MaybeRunReplica()
	stacktest.Main(m)
}
