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

// externalFailoverSteps are the steps a failover the user's own command
// made on the external provider logs (scenarios/fault/failover_external.go):
// doublerun sees neither the primary go down nor the address move, only
// the command succeed, the server's timeline change and a statement on
// the new primary. Caught by TestValidityStruck ("external failover").
var externalFailoverSteps = []struct{ has, what string }{
	{"failover command exited: exit 0", "the failover command exiting 0"},
	{" promoted, timeline ", "the server promoted to a new timeline"},
	{"first statement on the new primary", "a statement on the new primary"},
}

// failoverShown is what a failover's struck condition shows when every
// step of it does; externalShown the same for the user's command.
const (
	failoverShown = "the primary down, the standby promoted, the address repointed, a statement on the new primary"
	externalShown = "the failover command exited 0, the server promoted to a new timeline, a statement on the new primary"
)

// failoverMissing names the first step of a failover that has (whether a
// chaos event since the fault holds a text) does not find, and what the
// failover showed; missing is "" when every step shows. A failover made
// by the user's command has its own steps.
func failoverMissing(has func(string) bool) (missing, shown string) {
	steps, shown := failoverSteps, failoverShown
	if has("failover command exited: ") {
		steps, shown = externalFailoverSteps, externalShown
	}
	for _, s := range steps {
		if !has(s.has) {
			return s.what, shown
		}
	}
	return "", shown
}

// lossyMissing is failoverMissing's missing step of the lossy failover,
// which only doublerun's own stack makes.
func lossyMissing(has func(string) bool) string {
	missing, _ := failoverMissing(has)
	return missing
}
