package scenarios

// WithReplicaHook returns opts that call f with each replica's PID as it
// starts, so tests can check that none outlives its run.
func WithReplicaHook(opts RunOptions, f func(pid int)) RunOptions {
	opts.onReplica = f
	return opts
}

// LookupStrategy exposes lookupStrategy to the tests.
func LookupStrategy(name string) (Strategy, bool) { return lookupStrategy(name) }
