package lease

import (
	"flag"
	"strconv"
	"testing"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// testParallel is how many tests run at once unless -test.parallel says
// otherwise. go test's default is GOMAXPROCS, but a test against a server
// spends nearly all its time waiting for a round trip or a TTL, not on a
// CPU of this process: at GOMAXPROCS 2 the package took about twice as
// long for no less work.
const testParallel = 8

// Every test that needs a server takes a database of its own from the
// shared stack (stacktest.NewDB), so advisory locks and lease rows never
// collide between tests running in parallel.
//
// The order is chosen for the mutation gate, which runs go test -failfast
// once per mutant. The tests that need no server (configuration, the
// scripted conn, classify) are not parallel at the top level, so they all
// run, in well under a second, before any test against the server starts;
// a mutant one of them catches ends the run there, since -failfast starts
// no test after a failure. The tests against the server then run in
// parallel.
//
// BenchmarkFailover lives in package failover, which measures failover
// with these leases.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	stacktest.Main(m)
}
