package worker

import (
	"context"
	"errors"
	"flag"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// Test order. Tests that need no server (the loop's gates in a synctest
// bubble, config, back-off, health, outcome building) are not parallel, so
// they run first, one after another, before any test that needs the stack
// starts; TestStartStopLeaksNothing, last in file order, is the one
// sequential test on a server. Every other test is parallel on the shared
// stack, each in a database of its own. Under -failfast, as the mutation
// gate runs the package, a mutant that a server-free test catches ends the
// run before the parallel tests start, in well under a second.
//
// Parallelism. go test runs GOMAXPROCS parallel tests at once by default,
// which suits tests that compute. These mostly wait: on the server, on
// timers, on processes. Unless -parallel is given, testParallel of them
// run at once, which on two cores takes the package from about 17 s to
// about 11 s on a loaded machine, the server's CPU time unchanged.
func TestMain(m *testing.M) {
	// The failover test re-executes this binary as worker processes.
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	stacktest.Main(m)
}

// testParallel is how many parallel tests run at once unless -parallel
// says otherwise.
const testParallel = 8

// stubLease answers TryAcquire with whatever the test set, counting calls.
type stubLease struct {
	mu     sync.Mutex
	res    lease.Result
	err    error
	panics any
	hang   bool
	calls  atomic.Int64
}

var leaderTerm = lease.Term{Name: "test", Holder: "me", Token: 7}

func newStubLease(s lease.Status) *stubLease {
	l := &stubLease{}
	l.set(s)
	return l
}

// set makes the lease answer status s (with leaderTerm when s is Leader).
func (l *stubLease) set(s lease.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.res, l.err, l.panics, l.hang = lease.Result{Status: s}, nil, nil, false
	if s == lease.Leader {
		l.res.Term = leaderTerm
	}
	if s == lease.Faulted {
		l.res.Err = errors.New("stub: lease unreachable")
	}
}

// fail makes the lease return res and err.
func (l *stubLease) fail(res lease.Result, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.res, l.err, l.panics, l.hang = res, err, nil, false
}

// panic makes the lease panic with v.
func (l *stubLease) panic(v any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.panics, l.hang = v, false
}

// hangUntilCancelled makes the lease block until its context ends.
func (l *stubLease) hangUntilCancelled() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.panics, l.hang = nil, true
}

func (l *stubLease) TryAcquire(ctx context.Context) (lease.Result, error) {
	l.calls.Add(1)
	l.mu.Lock()
	res, err, p, hang := l.res, l.err, l.panics, l.hang
	l.mu.Unlock()
	if p != nil {
		panic(p)
	}
	if hang {
		<-ctx.Done()
		return lease.Result{}, ctx.Err()
	}
	return res, err
}

func (l *stubLease) Release(context.Context) error { return nil }
func (l *stubLease) Close(context.Context) error   { return nil }

// fencingLease is a Leader stub that fences against a newest token the
// test controls, as a real fenced lease fences against its table.
type fencingLease struct {
	*stubLease
	newest atomic.Int64
	fences atomic.Int64
}

func newFencingLease() *fencingLease {
	l := &fencingLease{stubLease: newStubLease(lease.Leader)}
	l.newest.Store(leaderTerm.Token)
	return l
}

func (l *fencingLease) Fence(ctx context.Context, tx pgx.Tx, term lease.Term) error {
	l.fences.Add(1)
	// Touch tx so that a fence outside the transaction would show.
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return err
	}
	if term.Token < l.newest.Load() {
		return lease.ErrStaleToken
	}
	return nil
}

// newWorker builds a worker from config, with its test signals on, and
// closes it when the test ends.
func newWorker(t testing.TB, config Config) *Worker {
	t.Helper()
	w, err := New(config)
	require.NoError(t, err)
	w.signals.Init(t)
	t.Cleanup(func() { returnsWithin(t, "Close", stopTimeout, w.Close) })
	return w
}

// start starts w and stops it when the test ends.
func start(t testing.TB, w *Worker) {
	t.Helper()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { stop(t, w) })
}

// stopTimeout bounds Stop and Close in the tests. Stop may take up to
// completeTimeout to record the outcomes of the jobs in flight.
const stopTimeout = completeTimeout + 5*time.Second

// stop stops w, failing the test if Stop does not return within
// stopTimeout.
func stop(t testing.TB, w *Worker) {
	t.Helper()
	returnsWithin(t, "Stop", stopTimeout, w.Stop)
}

// returnsWithin runs f and fails the test if f has not returned within d,
// leaving it running. A mutant that makes Stop or Close hang (a connection
// never released holds pgxpool's Close for ever) fails the test instead of
// hanging it until the mutation gate's timeout.
func returnsWithin(t testing.TB, what string, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("%s did not return within %s", what, d)
	}
}
