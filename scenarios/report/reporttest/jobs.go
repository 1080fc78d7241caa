package reporttest

import (
	"fmt"
	"strconv"
	"time"
)

// The worker's loss across a failover, from the definitions: an
// acknowledged enqueue is lost when its job's key is not among the jobs
// the new primary held (history.survivors.jobs); a completed job ran
// again for every start of it (history.job_runs) strictly after its
// completion was acknowledged. Both in the order of the
// acknowledgements, then of the starts.

type ack struct {
	Kind, Replica, Key string
	Token              int64
	At                 time.Time
}

type jobRun struct {
	Replica, Key string
	At           time.Time
}

type survivors struct {
	Writes []string
	Jobs   []string
}

// jobLoss puts the lost enqueues and the reruns under metrics.loss, of a
// history read back after a failover (failoverLoss).
func jobLoss(h *history, got figures) {
	there := map[string]bool{}
	for _, k := range h.Survivors.Jobs {
		there[k] = true
	}
	lost, reruns := 0, 0
	for _, a := range h.Acks {
		if a.Kind == "enqueue" && !there[a.Key] {
			got.ack(fmt.Sprintf("metrics.loss.lost_enqueues[%d]", lost), a)
			lost++
		}
	}
	for _, a := range h.Acks {
		if a.Kind != "completed" {
			continue
		}
		for _, r := range h.JobRuns {
			if r.Key == a.Key && r.At.After(a.At) {
				p := fmt.Sprintf("metrics.loss.rerun_jobs[%d]", reruns)
				got.ack(p+".completed", a)
				got[p+".run.replica"], got[p+".run.key"], got[p+".run.at"] = r.Replica, r.Key, stamp(r.At)
				reruns++
			}
		}
	}
}

// ack writes a as the report does; a token of 0 is left out.
func (fs figures) ack(path string, a ack) {
	fs[path+".kind"], fs[path+".replica"], fs[path+".key"], fs[path+".at"] = a.Kind, a.Replica, a.Key, stamp(a.At)
	if a.Token != 0 {
		fs[path+".token"] = strconv.FormatInt(a.Token, 10)
	}
}
