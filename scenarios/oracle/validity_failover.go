package oracle

// failoverSteps are the steps every failover fault logs as chaos events
// (scenarios/fault/failover.go), each by a piece of its text, in order.
// A failover struck only if each one shows: a primary that never went
// down was not failed over, a standby never promoted took no writes, an
// address never repointed left every client on the dead primary, and
// without a statement on the new primary the service never came back
// for the run to measure.
var failoverSteps = []struct{ has, what string }{
	// Caught by TestValidityStruck ("failover without the primary down").
	{" down, ", "the primary down"},
	{" promoted, timeline ", "the standby promoted"},
	// Caught by TestValidityStruck ("failover without a repoint").
	{"address leads to ", "the address repointed"},
	{"first statement on the new primary", "a statement on the new primary"},
}

// failoverShown is what a failover's struck condition shows when every
// step of it does.
const failoverShown = "the primary down, the standby promoted, the address repointed, a statement on the new primary"

// failoverMissing names the first step of a failover that has (whether a
// chaos event since the fault holds a text) does not find; "" when every
// step shows.
func failoverMissing(has func(string) bool) string {
	for _, s := range failoverSteps {
		if !has(s.has) {
			return s.what
		}
	}
	return ""
}
