package report

import (
	"fmt"

	"github.com/doublerun/doublerun/scenarios/oracle"
)

// LossCounts are what a failover lost, each out of what was acknowledged:
// the figures of oracle.Loss as a reader counts them.
type LossCounts struct {
	LostWrites, AckedWrites     int
	LostEnqueues, AckedEnqueues int
	// RerunJobs counts the distinct jobs that ran again after their
	// completion was acknowledged, Reruns every such start, and Completed
	// the distinct jobs whose completion was acknowledged.
	RerunJobs, Reruns, Completed int
	TokenRegressions             int
}

// CountLoss counts l against h's acknowledgements.
func CountLoss(h oracle.History, l *oracle.Loss) LossCounts {
	c := LossCounts{LostWrites: len(l.LostWrites), LostEnqueues: len(l.LostEnqueues),
		Reruns: len(l.RerunJobs), TokenRegressions: len(l.TokenRegressions)}
	done := map[string]bool{}
	for _, a := range h.Acks {
		switch a.Kind {
		case oracle.AckWrite:
			c.AckedWrites++
		case oracle.AckEnqueue:
			c.AckedEnqueues++
		case oracle.AckCompleted:
			done[a.Key] = true
		}
	}
	c.Completed = len(done)
	jobs := map[string]bool{}
	for _, r := range l.RerunJobs {
		jobs[r.Completed.Key] = true
	}
	c.RerunJobs = len(jobs)
	return c
}

// lossRows are report.md's rows of what a failover lost; none when
// nothing was read back after one.
func lossRows(h oracle.History, l *oracle.Loss, row func(k, v string)) {
	if l == nil {
		return
	}
	c := CountLoss(h, l)
	row("acknowledged writes lost", fmt.Sprintf("%d of %d", c.LostWrites, c.AckedWrites))
	row("token regressions", fmt.Sprint(c.TokenRegressions))
	if c.AckedEnqueues == 0 && c.Completed == 0 {
		return
	}
	row("**acknowledged enqueues lost**", fmt.Sprintf("%d of %d", c.LostEnqueues, c.AckedEnqueues))
	row("**completed jobs run again**", fmt.Sprintf("%d of %d completed (%d starts after the completion)", c.RerunJobs, c.Completed, c.Reruns))
}
