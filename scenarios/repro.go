package scenarios

import (
	"context"
	"strings"
)

// Repro556Result is what `doublerun repro 556` found.
type Repro556Result struct {
	// Reproduction is the advisory lease through a transaction pool of one.
	Reproduction *Report
	// Guard pairs the unguarded and guarded advisory lease per pool size.
	Guard []GuardRow
	// Pinned, Fenced and Alias are the three fixes: a session-pinned lease
	// endpoint on a second bouncer, the fenced table lease, and a
	// session-mode name for the lease on the one bouncer.
	Pinned, Fenced, Alias *Report
}

// GuardRow is one pool size of the guard comparison.
type GuardRow struct {
	PoolSize           int
	Unguarded, Guarded *Report
}

// Repro556 runs the reproduction, the guard comparison and the fixes.
// done, if set, sees each run's report as it comes (to print its line and
// write its files); an error from it stops the reproduction.
func Repro556(ctx context.Context, opts RunOptions, done func(*Report) error) (*Repro556Result, error) {
	run := func(sc Scenario) (*Report, error) {
		rep, err := Run(ctx, sc, opts)
		if err != nil {
			return nil, err
		}
		if done != nil {
			if err := done(rep); err != nil {
				return nil, err
			}
		}
		return rep, nil
	}
	var res Repro556Result
	var err error
	if res.Reproduction, err = run(Issue556); err != nil {
		return nil, err
	}
	guard := GuardScenarios()
	for i := 0; i < len(guard); i += 2 {
		row := GuardRow{PoolSize: guard[i].Topology.PoolSize}
		if row.Unguarded, err = run(guard[i]); err != nil {
			return nil, err
		}
		if row.Guarded, err = run(guard[i+1]); err != nil {
			return nil, err
		}
		res.Guard = append(res.Guard, row)
	}
	if res.Pinned, err = run(Issue556Pinned); err != nil {
		return nil, err
	}
	if res.Fenced, err = run(Issue556Fenced); err != nil {
		return nil, err
	}
	if res.Alias, err = run(Issue556Alias); err != nil {
		return nil, err
	}
	return &res, nil
}

// Reproduced reports whether two leaders ran at once on one backend.
func (r *Repro556Result) Reproduced() bool {
	pid, _ := r.Reproduction.SharedBackend()
	return r.Reproduction.Verdict.Pass && r.Reproduction.Metrics.DoubleRun.Total > 0 && pid != 0
}

// FixesHeld reports whether every fix met its expectation.
func (r *Repro556Result) FixesHeld() bool {
	return r.Pinned.Verdict.Pass && r.Pinned.Metrics.DoubleRun.Total == 0 &&
		r.Fenced.Verdict.Pass && r.Fenced.Metrics.StaleWrites.Accepted == 0 &&
		r.Alias.Verdict.Pass && r.Alias.Metrics.DoubleRun.Total == 0
}

// Verdict passes when the reproduction reproduced and both fixes held;
// otherwise its reason says, in one line, what did not.
func (r *Repro556Result) Verdict() Verdict {
	if r.Reproduced() && r.FixesHeld() {
		return Verdict{Expect: ExpectReproduces, Pass: true, Reason: "two leaders on one backend through a transaction pool of one; all three fixes held"}
	}
	var why []string
	if !r.Reproduced() {
		if pid, _ := r.Reproduction.SharedBackend(); pid == 0 && r.Reproduction.Verdict.Pass {
			why = append(why, "two leaders ran at once, but no two replicas reported the same lease backend PID")
		} else {
			why = append(why, "the double-run did not reproduce: "+r.Reproduction.Verdict.Reason)
		}
	}
	if !r.Pinned.Verdict.Pass {
		why = append(why, "pinned fix: "+r.Pinned.Verdict.Reason)
	}
	if !r.Fenced.Verdict.Pass {
		why = append(why, "fenced fix: "+r.Fenced.Verdict.Reason)
	}
	if !r.Alias.Verdict.Pass {
		why = append(why, "alias fix: "+r.Alias.Verdict.Reason)
	}
	return Verdict{Expect: ExpectReproduces, Reason: strings.Join(why, "; ")}
}
