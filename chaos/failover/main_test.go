package failover_test

import (
	"testing"

	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// A process started as a KILL_LEADER trial's leader runs the lease, not
// the tests.
func TestMain(m *testing.M) {
	reexec.Main()
	stacktest.Main(m)
}
