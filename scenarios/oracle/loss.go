package oracle

import (
	"cmp"
	"slices"
	"time"
)

// What a primary failover lost. The oracle lives on a third server (see
// "Across a primary failover" in the package documentation); the pair
// holds the lease's token table, the side-effect writes and the jobs.
// What a replica was told had happened there it also tells the oracle at
// once (an Ack), and after the run the new primary's surviving rows are
// read back once (Survivors). The difference is the loss.

// Acknowledgement kinds (Ack.Kind).
const (
	// AckWrite is a side-effect write whose commit returned.
	AckWrite = "write"
	// AckEnqueue is a job whose enqueue returned.
	AckEnqueue = "enqueue"
	// AckCompleted is a job whose completion was committed.
	AckCompleted = "completed"
)

// Ack is one thing a replica was told had happened on the pair, as it told
// the oracle once it was told.
type Ack struct {
	// Kind is AckWrite, AckEnqueue or AckCompleted.
	Kind    string `json:"kind"`
	Replica string `json:"replica"`
	// Key names what was acknowledged where it lives on the pair: a
	// side-effect write's or a job's key, chosen by the replica.
	Key string `json:"key"`
	// Token is the term it was done under; 0 when none.
	Token int64 `json:"token,omitempty"`
	// At is when the oracle learnt of it: after the acknowledgement.
	At time.Time `json:"at"`
}

// JobRun is one start of a job's handler, as its replica logged it.
type JobRun struct {
	Replica string    `json:"replica"`
	Key     string    `json:"key"`
	At      time.Time `json:"at"`
}

// Survivors is what the pair's primary held after the run, read back once:
// the keys of the side-effect writes and of the jobs (done or not) there.
type Survivors struct {
	Writes []string `json:"writes"`
	Jobs   []string `json:"jobs"`
}

// Loss is what a failover cost: what was acknowledged and is gone, and the
// grants that gave out a token again.
type Loss struct {
	// TokenRegressions are grants of a token the lease had given out
	// before, or of one below a token already acknowledged.
	TokenRegressions []TokenRegression `json:"token_regressions"`
	// LostWrites are acknowledged side-effect writes the primary no
	// longer has.
	LostWrites []Ack `json:"lost_writes"`
	// LostEnqueues are acknowledged enqueues whose job the primary no
	// longer has.
	LostEnqueues []Ack `json:"lost_enqueues"`
	// RerunJobs are jobs that ran again after their completion was
	// acknowledged.
	RerunJobs []Rerun `json:"rerun_jobs"`
}

// The reasons of a TokenRegression.
const (
	// RegressionReissued: the token had been granted to another replica.
	RegressionReissued = "reissued"
	// RegressionBelow: the server granted or renewed a lower token in a
	// statement that began after a higher one had been acknowledged: the
	// lease went back, and the fence accepts that lower token again.
	RegressionBelow = "below"
)

// TokenRegression is one grant (or renewal) that broke "tokens only
// rise".
type TokenRegression struct {
	// Grant is what regressed: Replica and Token, and At, when the oracle
	// learnt of the grant (RegressionReissued) or when the server received
	// the statement that granted or renewed it (RegressionBelow).
	Grant Grant `json:"grant"`
	// Earlier is the acknowledged grant it went back on: the same token
	// to another replica, or a higher one.
	Earlier Grant `json:"earlier"`
	// Why is RegressionReissued or RegressionBelow.
	Why string `json:"why"`
}

// Rerun is a job that ran again after its completion was acknowledged.
type Rerun struct {
	Completed Ack    `json:"completed"`
	Run       JobRun `json:"run"`
}

// loss is what h's failover lost; nil when nothing was read back from the
// pair (h.Survivors), as in a run without a failover.
func loss(h History) *Loss {
	if h.Survivors == nil {
		return nil
	}
	l := &Loss{TokenRegressions: tokenRegressions(h), RerunJobs: reruns(h.Acks, h.JobRuns)}
	l.LostWrites = missing(h.Acks, AckWrite, h.Survivors.Writes)
	l.LostEnqueues = missing(h.Acks, AckEnqueue, h.Survivors.Jobs)
	return l
}

// tokenRegressions finds where the lease went back on its tokens: a token
// acknowledged to a second replica (that acknowledgement regressed), a
// grant or renewal the server recorded (TokenOps) whose statement began
// after a higher token had been acknowledged, and a grant it recorded of a
// token acknowledged before its statement began. A renewal counts: after
// a promotion that lost a newer grant, the old holder's renewal of its
// lower token succeeds, and the fence accepts its writes again. So does a
// grant of the lost token to the replica it was lost for: which replica
// polls first after the promotion is a race, and the old holder's late
// write lands before or after it, but the token was granted twice either
// way. A token is named once.
//
// None can be a false alarm while tokens rise. A token acknowledged to
// two replicas was granted twice. And a grant acknowledged (g.At) before
// another statement began (op.Call) was granted before it, so a higher
// g.Token means the later statement went back, and an equal one granted
// it again; a late acknowledgement only moves g.At past op.Call, and the
// two are then not compared. (A renewal of the acknowledged token itself
// is its holder keeping it.)
func tokenRegressions(h History) []TokenRegression {
	grants := sortedGrants(h.Grants)
	first := map[int64]Grant{}
	named := map[int64]bool{}
	var out []TokenRegression
	for _, g := range grants {
		f, ok := first[g.Token]
		if !ok {
			first[g.Token] = g
			continue
		}
		// Caught by TestTokenRegressions/AGrantAcknowledgedTwiceToOneReplicaIsNone.
		if f.Replica != g.Replica {
			out = append(out, TokenRegression{Grant: g, Earlier: f, Why: RegressionReissued})
			named[g.Token] = true
		}
	}
	for _, op := range h.TokenOps {
		// Caught by TestTokenRegressions/ATokenIsNamedOnce.
		if named[op.Token] {
			continue
		}
		for _, g := range grants {
			// Caught by TestTokenRegressions/AGrantWhoseStatementBeganBeforeTheAckIsNone.
			if !g.At.Before(op.Call) {
				continue
			}
			// No switch: gremlins leaves a case's condition unmutated.
			// Caught by TestTokenRegressions/AGrantBelowAnAcknowledgedTokenIsARegression
			// and /ARenewalOfTheAcknowledgedTokenIsNone.
			why := RegressionBelow
			if g.Token <= op.Token {
				// The server granted an acknowledged token again, to
				// whichever replica. Caught by
				// TestTokenRegressions/AnAcknowledgedTokenGrantedAgainToItsReplica
				// and /ARenewalOfTheAcknowledgedTokenIsNone.
				if g.Token < op.Token || op.Kind != TokenGrant {
					continue
				}
				why = RegressionReissued
			}
			out = append(out, TokenRegression{Grant: Grant{Replica: op.Replica, Token: op.Token, At: op.Call}, Earlier: g, Why: why})
			named[op.Token] = true
			break
		}
	}
	return out
}

// sortedGrants is grants in the order the oracle learnt of them, ties by
// token then replica.
func sortedGrants(grants []Grant) []Grant {
	gs := slices.Clone(grants)
	slices.SortFunc(gs, func(a, b Grant) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Token, b.Token), cmp.Compare(a.Replica, b.Replica))
	})
	return gs
}

// missing is the acks of kind whose key is not among survivors.
func missing(acks []Ack, kind string, survivors []string) []Ack {
	there := map[string]bool{}
	for _, k := range survivors {
		there[k] = true
	}
	var out []Ack
	for _, a := range acks {
		// Caught by TestLoss/LostWritesAreTheAcknowledgedOnesThatAreGone
		// and /LostEnqueuesAreTheAcknowledgedJobsThatAreGone.
		if a.Kind == kind && !there[a.Key] {
			out = append(out, a)
		}
	}
	return out
}

// reruns pairs every acknowledged completion with each start of the same
// job after it. A start before the acknowledgement is the worker's own
// at-least-once delivery (a completion that failed, then a retry), not a
// loss.
func reruns(acks []Ack, runs []JobRun) []Rerun {
	var out []Rerun
	for _, a := range acks {
		if a.Kind != AckCompleted {
			continue
		}
		for _, r := range runs {
			// Caught by TestLoss/AJobThatRanAgainAfterItsCompletionIsARerun
			// and /ARunBeforeTheCompletionIsNone.
			if r.Key == a.Key && r.At.After(a.At) {
				out = append(out, Rerun{Completed: a, Run: r})
			}
		}
	}
	return out
}

// lostGrants are the grants the replicas acknowledged that the server's
// record (TokenOps) lacks: granted on a primary whose last commits a
// failover lost. A grant the record has is one whose statement began
// before the acknowledgement: the new primary may grant the same token
// to the same replica again after the failover, and that later grant
// does not stand for the lost one. The fence check adds them, as grants
// somewhere between the run's start and their acknowledgement, only when
// h was read back after a failover (h.Survivors); otherwise every grant
// is on the server that recorded it.
func lostGrants(h History) []Grant {
	if h.Survivors == nil {
		return nil
	}
	type key struct {
		replica string
		token   int64
	}
	began := map[key][]time.Time{}
	for _, op := range h.TokenOps {
		if op.Kind == TokenGrant {
			k := key{op.Replica, op.Token}
			began[k] = append(began[k], op.Call)
		}
	}
	recorded := func(k key, ack time.Time) bool {
		for _, call := range began[k] {
			// Caught by TestFenceCheckAcrossALossyFailover/ALostGrantGrantedAgainToItsReplica.
			if call.Before(ack) {
				return true
			}
		}
		return false
	}
	var out []Grant
	for _, g := range h.Grants {
		// A token table without a holder column (lease.Advisory's)
		// records grants without a replica. Caught by
		// TestFenceCheckAcrossALossyFailover/AnAdvisoryTokenTableNamesNoHolder.
		if !recorded(key{g.Replica, g.Token}, g.At) && !recorded(key{"", g.Token}, g.At) {
			out = append(out, g)
		}
	}
	return out
}
