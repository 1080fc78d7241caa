package scenarios

import (
	"errors"
	"fmt"

	"github.com/doublerun/doublerun/scenarios/oracle"
)

// Verdict is a judgement: whether what was measured meets what was
// expected, and why. It is the one result type every caller reads: a
// run's (Report.Verdict, from Judge), the #556 reproduction's
// (Repro556Result.Verdict), and in package report a matrix cell's and a
// whole matrix's.
type Verdict struct {
	// Expect is the expectation judged against; empty for a verdict over
	// several runs.
	Expect Expectation `json:"expect"`
	Pass   bool        `json:"pass"`
	Reason string      `json:"reason"`
}

// Err is nil when v passed, and otherwise an error whose text is v's
// reason.
func (v Verdict) Err() error {
	if v.Pass {
		return nil
	}
	return errors.New(v.Reason)
}

// Judge decides whether m meets expect. A mismatch fails in either
// direction: a "reproduces" scenario that shows no double-run fails too.
func Judge(expect Expectation, m oracle.Metrics, pieces int) Verdict {
	v := Verdict{Expect: expect}
	dr := m.DoubleRun
	lin := m.Linearizability
	switch {
	case pieces == 0:
		v.Reason = "no leader work was logged: no replica ever became leader"
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
