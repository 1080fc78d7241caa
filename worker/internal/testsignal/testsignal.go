// Package testsignal gives the worker small typed channels that tests wait
// on instead of sleeping, in the style of River's testsignal package.
//
// A Signal's zero value is what production runs: Signal is a nil check and
// nothing else. A test calls Init, after which every Signal call queues a
// value the test can wait for with Wait. Sends never block the code under
// test: when a test leaves a signal undrained and its buffer fills, further
// values are dropped, so a test must not count events through a signal (it
// reads the worker's Stats for that) but only wait for the next one.
package testsignal

import "time"

// TB is the part of testing.TB a signal uses. It is declared here so that
// production binaries do not link package testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// bufferSize is generous so that a loop cycling every millisecond does not
// drop the value a test is about to wait for.
const bufferSize = 1024

// DefaultTimeout is how long Wait waits before it fails the test: far
// longer than any event a test waits for takes on a loaded machine, and
// far below the time the mutation gate gives the package's tests, so that
// a mutant that stops the event fails the test instead of timing out.
const DefaultTimeout = 15 * time.Second

// Signal is a channel wrapper that is free when not initialised.
type Signal[T any] struct {
	ch chan T
	tb TB
}

// Init makes the signal deliver values. Call it from tests only, before the
// code under test starts.
func (s *Signal[T]) Init(tb TB) {
	s.ch = make(chan T, bufferSize)
	s.tb = tb
}

// Signal queues val if the signal was initialised; otherwise it does
// nothing. It never blocks.
func (s *Signal[T]) Signal(val T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- val:
	default: // dropped; see the package comment
	}
}

// C returns the channel values arrive on, for tests that select on it.
func (s *Signal[T]) C() <-chan T {
	if s.ch == nil {
		panic("testsignal: signal not initialised; Init it from the test first")
	}
	return s.ch
}

// Wait returns the next value, failing the test if none comes within
// DefaultTimeout.
func (s *Signal[T]) Wait() T {
	s.tb.Helper()
	return s.WaitFor(DefaultTimeout)
}

// WaitFor returns the next value, failing the test if none comes within d.
func (s *Signal[T]) WaitFor(d time.Duration) T {
	s.tb.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-s.C():
		return v
	case <-timer.C:
		s.tb.Fatalf("testsignal: no signal within %s", d)
	}
	var zero T
	return zero
}

// WaitUntil drops values until ok returns true for one and returns it,
// failing the test if none does within DefaultTimeout.
func (s *Signal[T]) WaitUntil(ok func(T) bool) T {
	s.tb.Helper()
	deadline := time.NewTimer(DefaultTimeout)
	defer deadline.Stop()
	for {
		select {
		case v := <-s.C():
			if ok(v) {
				return v
			}
		case <-deadline.C:
			s.tb.Fatalf("testsignal: no matching signal within %s", DefaultTimeout)
			var zero T
			return zero
		}
	}
}

// RequireEmpty fails the test if a value is waiting.
func (s *Signal[T]) RequireEmpty() {
	s.tb.Helper()
	select {
	case v := <-s.C():
		s.tb.Fatalf("testsignal: expected no signal, got %v", v)
	default:
	}
}
