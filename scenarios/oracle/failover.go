package oracle

import "time"

// Where a failover latency is measured from (Metrics.FailoverFrom).
const (
	// FailoverFromInjection is the instant the fault acted on the leader:
	// the first EventInjected or EventReplicaKilled event from the first
	// EventFault on, up to the EventHealed after it. A fault logs it at the
	// moment it strikes (the SIGKILL, the SIGTERM, the pg_terminate_backend),
	// after it has waited for the leader to begin a piece of work.
	FailoverFromInjection = "injection"
	// FailoverFromFault is the runner's EventFault, logged before the fault
	// waited for its moment (up to a cycle of the leader's work): the
	// fallback for a fault that marks no injection.
	FailoverFromFault = "fault"
)

// failover is the time from the first fault's injection (see
// FailoverFromInjection) until leader work began under a term granted
// after it, and where it is measured from; nil when there was no fault or
// no such work. Work under a term granted at or before the injection,
// such as the old leader's going on, is not the service coming back.
func failover(h History, ivs []Interval) (*Duration, string) {
	from, kind := injection(h.Events)
	if from.IsZero() {
		return nil, ""
	}
	var newest int64
	for _, g := range h.Grants {
		// A grant at the injection's instant is the old term's. Caught
		// by TestFailoverMatchesBruteForce.
		if !g.At.After(from) {
			newest = max(newest, g.Token)
		}
	}
	var first time.Time
	for _, iv := range ivs {
		if iv.Token > newest && !iv.Start.Before(from) && (first.IsZero() || iv.Start.Before(first)) {
			first = iv.Start
		}
	}
	if first.IsZero() {
		return nil, ""
	}
	d := Duration(first.Sub(from))
	return &d, kind
}

// injection finds the instant a failover is measured from, and which kind
// of instant it is; zero when no fault was logged.
func injection(events []Event) (time.Time, string) {
	var fault, healed, injected time.Time
	for _, e := range events {
		if e.Kind == EventFault && (fault.IsZero() || e.At.Before(fault)) {
			fault = e.At
		}
	}
	if fault.IsZero() {
		return time.Time{}, ""
	}
	for _, e := range events {
		if e.Kind == EventHealed && !e.At.Before(fault) && (healed.IsZero() || e.At.Before(healed)) {
			healed = e.At
		}
	}
	// Caught by TestAnalyzeFailoverLatency/FromTheInjectionNotTheStrikeWait
	// and /AKillAfterTheHealIsNoInjection.
	for _, e := range events {
		marks := e.Kind == EventInjected || e.Kind == EventReplicaKilled
		inside := !e.At.Before(fault) && (healed.IsZero() || !e.At.After(healed))
		if marks && inside && (injected.IsZero() || e.At.Before(injected)) {
			injected = e.At
		}
	}
	if injected.IsZero() {
		return fault, FailoverFromFault
	}
	return injected, FailoverFromInjection
}
