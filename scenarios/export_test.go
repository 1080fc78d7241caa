package scenarios

import (
	"time"
)

// WithReplicaHook returns opts that call f with each replica's PID as it
// starts, so tests can check that none outlives its run.
func WithReplicaHook(opts RunOptions, f func(pid int)) RunOptions {
	opts.onReplica = f
	return opts
}

// GroupAlive exposes groupAlive to the tests.
func GroupAlive(pgid int) bool { return groupAlive(pgid) }

// WithStopGrace returns opts whose run gives its replicas d to stop after
// SIGTERM before it kills them.
func WithStopGrace(opts RunOptions, d time.Duration) RunOptions {
	opts.stopGrace = d
	return opts
}

// KeepGroup exposes keepGroup to the tests.
func KeepGroup(exe string, pgid int) (release func(), err error) { return keepGroup(exe, pgid) }

// StandsIn exposes standsIn to the tests.
func StandsIn(sc Scenario) bool { return standsIn(sc) }
