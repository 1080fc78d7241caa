package scenarios

import (
	"errors"
	"fmt"

	"github.com/doublerun/doublerun/scenarios/oracle"
)

// Verdict is a judgement: whether what was measured meets what was
// expected, and why. It is the one result type every caller reads: a
// run's (Report.Verdict, from Judge), the #556 reproduction's
// (Repro556Result.Verdict), and in package chaos a matrix cell's and a
// whole matrix's.
type Verdict struct {
	// Expect is the expectation judged against; empty for a verdict over
	// several runs.
	Expect Expectation `json:"expect"`
	Pass   bool        `json:"pass"`
	// Inconclusive says the run could not have shown what it was judged
	// for (oracle.Validity): neither a pass nor a fail. Pass is false.
	Inconclusive bool   `json:"inconclusive,omitempty"`
	Reason       string `json:"reason"`
}

// Status is the verdict in one word: PASS, FAIL or INCONCLUSIVE.
func (v Verdict) Status() string {
	switch {
	case v.Pass:
		return "PASS"
	case v.Inconclusive:
		return "INCONCLUSIVE"
	}
	return "FAIL"
}

// Err is nil when v passed, and otherwise an error whose text is v's
// reason.
func (v Verdict) Err() error {
	if v.Pass {
		return nil
	}
	if v.Inconclusive {
		return errors.New("INCONCLUSIVE: " + v.Reason)
	}
	return errors.New(v.Reason)
}

// Judge decides whether m meets expect. A mismatch fails in either
// direction: a "reproduces" scenario that shows no double-run fails too.
// A run whose validity conditions fail is INCONCLUSIVE rather than a
// PASS, and rather than a FAIL for want of a double-run it could not
// have shown; what it did measure (a double-run where none was
// expected, an accepted stale write) fails it still.
func Judge(expect Expectation, m oracle.Metrics, pieces int) Verdict {
	v := judge(expect, m, pieces)
	if m.Validity.Valid || pieces == 0 {
		return v
	}
	c, ok := m.Validity.Failed()
	if !ok {
		c = oracle.Condition{Name: "validity", Reason: "no validity condition was computed for this run; recompute its report with `doublerun check`"}
	}
	// A fence with no legal order is what a regression shows, not a
	// failure of it: an invalid run that expects one is never judged by
	// it. Caught by TestJudgeInconclusive/AnInvalidRunNeverPasses.
	measured := !v.Pass && (expect == ExpectSafe || expect == ExpectFenced) ||
		m.Linearizability != nil && !m.Linearizability.Holds() && expect != ExpectRegresses
	if measured {
		// Caught by TestJudgeInconclusive/AFailStaysAFail.
		return v
	}
	// Caught by TestJudgeInconclusive/AnInvalidRunNeverPasses.
	return Verdict{Expect: expect, Inconclusive: true,
		Reason: fmt.Sprintf("%s: %s", c.Name, c.Reason)}
}

func judge(expect Expectation, m oracle.Metrics, pieces int) Verdict {
	v := Verdict{Expect: expect}
	dr := m.DoubleRun
	lin := m.Linearizability
	switch {
	case pieces == 0:
		v.Reason = "no leader work was logged: no replica ever became leader"
	case expect == ExpectRegresses:
		// Before the fence's check: a regressed token leaves the history
		// with no legal order, which is what this expectation asks for.
		v = regressed(m)
	case lin != nil && lin.Linearizable == oracle.LinearizableNo:
		// Whatever the windows say: the fence let through an order of
		// grants and writes that no sequential fence allows. Caught by
		// TestJudgeFailsInEitherDirection/NoLegalOrderFailsWhateverTheWindowsSay.
		v.Reason = fmt.Sprintf("the fence's history is not linearizable: its %d grants, renewals and fenced writes have no legal order (see linearizability.html)", lin.Operations)
	case lin != nil && !lin.Holds():
		// Caught by TestJudgeFailsInEitherDirection/AnUnfinishedCheckFails.
		v.Reason = fmt.Sprintf("the linearizability check of the fence's %d operations did not finish in time: the fence is unproven", lin.Operations)
	case expect == ExpectSafe:
		v.Pass = dr.Episodes == 0 && m.StaleWrites.Accepted == 0
		if v.Pass {
			v.Reason = "no double-run and no accepted stale write"
		} else {
			v.Reason = fmt.Sprintf("expected safe, measured a double-run of %s in %d episodes and %d accepted stale writes",
				dr.Total, dr.Episodes, m.StaleWrites.Accepted)
		}
	case expect == ExpectReproduces:
		v.Pass = dr.Total > 0
		if v.Pass {
			v.Reason = fmt.Sprintf("reproduced: double-run of %s in %d episodes (longest %s)", dr.Total, dr.Episodes, dr.Longest)
		} else {
			v.Reason = "expected a double-run, measured none: the limitation did not reproduce"
		}
	case expect == ExpectFenced:
		v.Pass = m.StaleWrites.Accepted == 0
		if v.Pass {
			v.Reason = fmt.Sprintf("no accepted stale write (%d rejected by the fence; double-run %s)", m.StaleWrites.Rejected, dr.Total)
		} else {
			v.Reason = fmt.Sprintf("expected fenced, measured %d accepted stale writes", m.StaleWrites.Accepted)
		}
	case expect == ExpectReproducesOrOrphans:
		// Neither shown: the lock behaved as if pinned, which PgBouncer
		// does not promise. Caught by
		// TestJudgeFailsInEitherDirection/ReproducesOrOrphansFailsWhenTheRunIsClean.
		o := m.Orphaned
		v.Pass = dr.Total > 0 || o.Total > 0
		switch {
		case dr.Total > 0 && o.Total > 0:
			v.Reason = fmt.Sprintf("reproduced: double-run of %s in %d episodes, and the lock orphaned for %s in %d episodes", dr.Total, dr.Episodes, o.Total, o.Episodes)
		case dr.Total > 0:
			v.Reason = fmt.Sprintf("reproduced: double-run of %s in %d episodes (longest %s)", dr.Total, dr.Episodes, dr.Longest)
		case o.Total > 0:
			v.Reason = fmt.Sprintf("orphaned: the lock outlived its holder for %s in %d episodes (%d re-entered)", o.Total, o.Episodes, o.Reentries)
		default:
			v.Reason = "expected a double-run or an orphaned lock, measured neither: the lock behaved as if pinned, which a transaction pool does not promise"
		}
	default:
		v.Reason = fmt.Sprintf("unknown expectation %q", expect)
	}
	return v
}

// regressed judges a run that expects a token regression: it passes only
// on one measured (oracle.Loss), and says what the fence's check found
// beside it.
func regressed(m oracle.Metrics) Verdict {
	v := Verdict{Expect: ExpectRegresses}
	var regressions []oracle.TokenRegression
	if m.Loss != nil {
		regressions = m.Loss.TokenRegressions
	}
	order := "the fence's history was not checked"
	if lin := m.Linearizability; lin != nil {
		order = fmt.Sprintf("the fence's history of %d operations: linearizable %s", lin.Operations, lin.Linearizable)
	}
	// Caught by TestJudgeFailsInEitherDirection/RegressesFailsWithoutARegression.
	v.Pass = len(regressions) > 0
	if !v.Pass {
		v.Reason = "expected a token regression, measured none: the promotion took no token back (" + order + ")"
		return v
	}
	v.Reason = fmt.Sprintf("regressed: %d token regressions, the first %s; %d stale writes accepted; %s",
		len(regressions), regressionText(regressions[0]), m.StaleWrites.Accepted, order)
	return v
}

// regressionText says what r gave out again: "token 2 granted to r1
// again, after r1 was granted it" or "r2 granted token 1, below token 2
// of r1".
func regressionText(r oracle.TokenRegression) string {
	if r.Why == oracle.RegressionReissued {
		return fmt.Sprintf("token %d granted to %s again, after %s was granted it", r.Grant.Token, r.Grant.Replica, r.Earlier.Replica)
	}
	return fmt.Sprintf("%s granted token %d, below token %d of %s", r.Grant.Replica, r.Grant.Token, r.Earlier.Token, r.Earlier.Replica)
}
