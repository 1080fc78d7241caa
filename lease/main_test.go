package lease

import (
	"testing"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Every test that needs a server takes a database of its own from the
// shared stack (stacktest.NewDB), so advisory locks and lease rows never
// collide between tests running in parallel. BenchmarkFailover lives in
// package failover, which measures failover with these leases.
func TestMain(m *testing.M) {
	stacktest.Main(m)
}
