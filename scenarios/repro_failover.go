package scenarios

import (
	"context"
	"fmt"
	"strings"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// The failover reproduction (issue 32): the fenced lease across a
// promotion that lost its last grants, plain and with the epoch fence, on
// a stack with an asynchronous standby.
var (
	IssueFailoverPlain = Scenario{Name: "failover-lossy-fenced", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct},
		Standby: stack.ReplicationAsync, Fault: fault.PrimaryFailoverLossy.Name(), Expect: ExpectFenced,
		Description: "issue 32: the fenced lease across a promotion that lost its last grant: the token goes back"}
	IssueFailoverEpoch = Scenario{Name: "failover-lossy-fenced-epoch", Strategy: strategy.FencedEpoch, Topology: Topology{Kind: Direct},
		Standby: stack.ReplicationAsync, Fault: fault.PrimaryFailoverLossy.Name(), Expect: ExpectFenced,
		Description: "issue 32's fix: the epoch fence, whose tokens carry the server's timeline, across the same promotion"}
)

// ReproFailoverResult is what `doublerun repro failover` found.
type ReproFailoverResult struct {
	// Plain is the fenced lease, Epoch the epoch fence, each across a
	// lossy promotion.
	Plain, Epoch *Report
}

// ReproFailover runs the plain fence and the epoch fence across a lossy
// promotion. opts.Stack must have an asynchronous standby; the runs
// rebuild it after each other's failover. done, if set, sees each run's
// report as it comes; an error from it stops the reproduction.
func ReproFailover(ctx context.Context, opts RunOptions, done func(*Report) error) (*ReproFailoverResult, error) {
	var res ReproFailoverResult
	for _, c := range []struct {
		sc  Scenario
		dst **Report
	}{{IssueFailoverPlain, &res.Plain}, {IssueFailoverEpoch, &res.Epoch}} {
		rep, err := Run(ctx, c.sc, opts)
		if err != nil {
			return nil, err
		}
		if done != nil {
			if err := done(rep); err != nil {
				return nil, err
			}
		}
		*c.dst = rep
	}
	return &res, nil
}

// Broke reports whether the plain fence let the lossy promotion through:
// a token granted again or below one already acknowledged, an accepted
// stale write, or a history of grants and writes with no legal order.
func (r *ReproFailoverResult) Broke() bool {
	m := r.Plain.Metrics
	return m.Loss != nil && len(m.Loss.TokenRegressions) > 0 || m.StaleWrites.Accepted > 0 ||
		m.Linearizability != nil && m.Linearizability.Linearizable == oracle.LinearizableNo
}

// Held reports whether the epoch fence held across the same promotion:
// its verdict passed, no token regressed, and its history has a legal
// order.
func (r *ReproFailoverResult) Held() bool {
	m := r.Epoch.Metrics
	return r.Epoch.Verdict.Pass && m.Loss != nil && len(m.Loss.TokenRegressions) == 0 &&
		m.Linearizability != nil && m.Linearizability.Holds()
}

// Verdict passes when the plain fence broke and the epoch fence held;
// otherwise its reason says which did not.
func (r *ReproFailoverResult) Verdict() Verdict {
	if r.Broke() && r.Held() {
		return Verdict{Expect: ExpectReproduces, Pass: true, Reason: "the lossy promotion took the plain fence's token back; the epoch fence held"}
	}
	var why []string
	if !r.Broke() {
		why = append(why, "the plain fence held: no token regressed, no stale write was accepted and its history has a legal order")
	}
	if !r.Held() {
		why = append(why, fmt.Sprintf("the epoch fence did not hold: %s", r.Epoch.Verdict.Reason))
	}
	return Verdict{Expect: ExpectReproduces, Reason: strings.Join(why, "; ")}
}
