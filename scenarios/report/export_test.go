package report

// Same exposes same to the tests.
func Same(file, again any) bool { return same(file, again) }
