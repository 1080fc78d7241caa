package oracle

import (
	"fmt"
	"strings"
)

// lostGrant: a run judged by a token regression (Options.Regression, the
// expectation regresses) could show one only if its failover lost a grant
// the replicas were acknowledged (lostGrants): a token goes back, or is
// given out again, only where the new primary lacks the grant that had
// raised it. A failover whose standby had every grant (a synchronous
// one, or a lossy fault during which no other replica was granted the
// lease) could not have regressed a token, whatever the lease, so its
// run is INCONCLUSIVE rather than a FAIL of the fence. The condition is
// computed only for such a run; every other run has five.
func lostGrant(h History) Condition {
	c := Condition{Name: ConditionLostGrant}
	if h.Survivors == nil {
		c.Figure = "nothing read back from the pair"
		c.Reason = "the run read nothing back from a primary after a failover, so no grant can have been lost; run it on a stack with a standby (\"standby\": \"async\")"
		return c
	}
	lost := lostGrants(h)
	// Caught by TestLostGrantCondition/NoGrantLostIsNoRegressionToShow.
	if len(lost) == 0 {
		c.Figure = fmt.Sprintf("every one of %d acknowledged grants is on the new primary", len(h.Grants))
		c.Reason = "the failover lost no acknowledged grant, so no token could go back: the standby had every grant; fail over an asynchronous standby that missed a newer grant (PRIMARY_FAILOVER_LOSSY, 2 or more replicas)"
		return c
	}
	var names []string
	for _, g := range lost {
		names = append(names, fmt.Sprintf("%s's token %d (acknowledged at %s)", g.Replica, g.Token, rel(h, g.At)))
	}
	c.Holds = true
	c.Figure = fmt.Sprintf("%d acknowledged grants lost with the old primary: %s", len(lost), strings.Join(names, ", "))
	return c
}
