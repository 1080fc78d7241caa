package worker

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/doublerun/doublerun/lease"
)

// Sweep is recurring leader work: something only one replica should do,
// every leader cycle, such as purging expired rows. Sweeps run in their
// order in Config.Sweeps, after the cycle's jobs; a sweep that fails or
// panics is logged and counted and does not stop the next one.
//
// Like a handler, a sweep may run twice at the same time when leadership
// overlaps (see the package documentation), so it should be idempotent.
type Sweep interface {
	// Name identifies the sweep in logs; unique within a worker.
	Name() string
	// Sweep does one round of work under term, the lease term of the
	// cycle. ctx carries the same term for TermFromContext and Fence.
	Sweep(ctx context.Context, term lease.Term) error
}

// SweepFunc makes a Sweep of a name and a function.
func SweepFunc(name string, fn func(ctx context.Context, term lease.Term) error) Sweep {
	return funcSweep{name: name, fn: fn}
}

type funcSweep struct {
	name string
	fn   func(ctx context.Context, term lease.Term) error
}

func (s funcSweep) Name() string { return s.name }

func (s funcSweep) Sweep(ctx context.Context, term lease.Term) error { return s.fn(ctx, term) }

// sweep runs one sweep, turning a panic into an error.
func (w *Worker) sweep(ctx context.Context, s Sweep, term lease.Term) (err error) {
	w.stats.sweeps.Add(1)
	defer func() {
		// Caught by TestSweeps/PanickingSweepDoesNotStopTheNext.
		if r := recover(); r != nil {
			err = fmt.Errorf("sweep %s panicked: %v\n%s", s.Name(), r, debug.Stack())
		}
		w.signals.swept.Signal(s.Name())
	}()
	return s.Sweep(ctx, term)
}
