package lease

import (
	"os"
	"testing"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Every test that needs a server takes a database of its own from the
// shared stack (stacktest.NewDB), so advisory locks and lease rows never
// collide between tests running in parallel.
//
// A process started with DOUBLERUN_LEASE_BENCH_CHILD set is a replica of
// BenchmarkFailover, not a test run: see runBenchChild.
func TestMain(m *testing.M) {
	if spec := os.Getenv(benchChildEnv); spec != "" {
		os.Exit(runBenchChild(spec))
	}
	stacktest.Main(m)
}
