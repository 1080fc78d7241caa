package chaos_test

import (
	"testing"

	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// The test binary is also the scenario replica: the runner starts it again
// as one (package reexec).
func TestMain(m *testing.M) {
	reexec.Main()
	stacktest.Main(m)
}
