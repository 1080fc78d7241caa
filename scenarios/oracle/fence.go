package oracle

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// The fence, checked for linearizability. The windows judge time; this
// judges order. Every grant and renewal of the lease's token (TokenOp, from
// the server, in the statement that made it) and every fenced side-effect
// write (Write, with its transaction's start and the instant its row was
// written) is an operation with an invocation and a completion on the
// server's clock. porcupine looks for one order of them, each placed
// somewhere inside its own interval, in which this sequential model holds:
//
//	state      the newest token granted (0: never granted)
//	grant t    legal only if t > state; state becomes t
//	renewal t  legal only if t == state; state stays
//	write t    accepted: legal only if t == state; rejected: only if t != state
//
// A history with no such order fails the run whatever the windows say.

// Token operation kinds (TokenOp.Kind).
const (
	// TokenGrant is a statement that set a new token: a grant.
	TokenGrant = "grant"
	// TokenRenewal is a statement that changed the token's row and kept
	// its token: lease.Fenced's renewal, and its release, which expires
	// the term at once.
	TokenRenewal = "renewal"
)

// TokenOp is one statement that changed the lease's token row, as the
// server recorded it inside that statement (RecordTokens).
type TokenOp struct {
	// Kind is TokenGrant or TokenRenewal.
	Kind string `json:"kind"`
	// Replica is the row's holder column, empty when the table has none
	// (lease.Advisory's); the replica's own grant record names it then.
	Replica string `json:"replica,omitempty"`
	Token   int64  `json:"token"`
	// Call is statement_timestamp(), when the server received the
	// statement; Return is clock_timestamp() after the row changed.
	Call   time.Time `json:"call"`
	Return time.Time `json:"return"`
}

// Linearizability is the verdict of the linearizability check, as a
// report names it: "linearizable: yes, 412 operations, checked in 1.9 ms".
type Linearizability struct {
	// Linearizable is LinearizableYes, LinearizableNo or
	// LinearizableUnknown (the check ran out of time).
	Linearizable string `json:"linearizable"`
	// Operations is how many grants, renewals and fenced writes were
	// checked.
	Operations int `json:"operations"`
	// CheckedIn is how long porcupine took; the one figure of a report
	// that its history does not determine.
	CheckedIn Duration `json:"checked_in_ms"`
}

// The values of Linearizability.Linearizable.
const (
	LinearizableYes     = "yes"
	LinearizableNo      = "no"
	LinearizableUnknown = "unknown"
)

// Holds reports whether the check found a legal order. A check that ran
// out of time proves nothing, so it does not hold.
func (l Linearizability) Holds() bool { return l.Linearizable == LinearizableYes }

func (l Linearizability) String() string {
	return fmt.Sprintf("linearizable: %s, %d operations, checked in %s", l.Linearizable, l.Operations,
		time.Duration(l.CheckedIn).Round(10*time.Microsecond))
}

// DefaultCheckTimeout bounds one linearizability check: 10 s. The
// histories are a few hundred operations of a handful of clients that
// seldom overlap, which porcupine checks in milliseconds; a check that has
// not finished after this long says "unknown", and the run fails. (A
// literal: the mutation gate mutates the product 10 * time.Second even in
// a constant, where no test runs it.)
const DefaultCheckTimeout = time.Duration(10e9)

// fenceOp is an operation's input to the model: what it is and its token.
// The output is whether it took effect: true for every recorded grant and
// renewal (the server records only those that happened), and for a write
// whether it was accepted.
type fenceOp struct {
	write, grant bool // neither: a renewal
	token        int64
	replica      string
}

// fenceModel is the sequential model of the fence, for porcupine. It has
// no switch, so that the mutation gate mutates every rule (gremlins
// leaves case conditions alone).
var fenceModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		newest, op, took := state.(int64), input.(fenceOp), output.(bool)
		// A grant must raise the token. Caught by
		// TestFenceCheck/TwoGrantsOfOneTokenFail.
		if op.grant {
			return op.token > newest, op.token
		}
		// A renewal holds only under the newest token. Caught by
		// TestFenceCheck/ARenewalAfterANewerGrantCompletedFails.
		if !op.write {
			return op.token == newest, newest
		}
		// The fence accepts a write only under the newest token. Caught
		// by TestFenceCheck/AWriteAcceptedAfterANewerGrantCompletedFails.
		if took {
			return op.token == newest, newest
		}
		// It refuses exactly the writes under another token. Caught by
		// TestFenceCheck/ARejectedWriteThatWasCurrentFails.
		return op.token != newest, newest
	},
	DescribeOperation: func(input, output any) string {
		op, took := input.(fenceOp), output.(bool)
		if op.grant {
			return fmt.Sprintf("grant(%d)", op.token)
		}
		if !op.write {
			return fmt.Sprintf("renew(%d)", op.token)
		}
		if took {
			return fmt.Sprintf("write(%d) accepted", op.token)
		}
		return fmt.Sprintf("write(%d) rejected", op.token)
	},
	DescribeState: func(state any) string {
		if state.(int64) == 0 {
			return "never granted"
		}
		return fmt.Sprintf("newest token %d", state.(int64))
	},
}

// fenceOperations turns h's token operations and fenced writes into
// porcupine operations, with times in microseconds (Postgres' resolution)
// from the earliest call, and one client per replica in name order. It
// returns nothing when there is nothing to check: no fenced write, or no
// recorded token (the strategy's token table is unknown), which would make
// every accepted write look illegal.
func fenceOperations(h History) ([]porcupine.Operation, map[string]int, time.Time) {
	var writes []Write
	for _, w := range h.Writes {
		if w.Fenced {
			writes = append(writes, w)
		}
	}
	// Caught by TestFenceCheckNeedsFencedWritesAndTokens.
	if len(writes) == 0 || len(h.TokenOps) == 0 {
		return nil, nil, time.Time{}
	}
	// lease.Advisory's token table has no holder: the replica that logged
	// the grant of a token names it.
	holder := map[int64]string{}
	for _, g := range h.Grants {
		holder[g.Token] = g.Replica
	}
	type op struct {
		in         fenceOp
		took       bool
		call, done time.Time
	}
	var ops []op
	for _, t := range h.TokenOps {
		r := cmp.Or(t.Replica, holder[t.Token])
		ops = append(ops, op{fenceOp{grant: t.Kind == TokenGrant, token: t.Token, replica: r}, true, t.Call, t.Return})
	}
	for _, w := range writes {
		ops = append(ops, op{fenceOp{write: true, token: w.Token, replica: w.Replica}, w.Accepted, w.Call, w.At})
	}
	base := ops[0].call
	clients := map[string]int{}
	for _, o := range ops {
		base = earlier(base, o.call)
		clients[o.in.replica] = 0
	}
	// A grant a failover lost was made somewhere before the replica
	// acknowledged it: its interval starts with the history's first call.
	// Caught by TestFenceCheckAcrossALossyFailover.
	lost := lostGrants(h)
	for _, g := range lost {
		base = earlier(base, g.At)
		clients[g.Replica] = 0
	}
	for _, g := range lost {
		ops = append(ops, op{fenceOp{grant: true, token: g.Token, replica: g.Replica}, true, base, g.At})
	}
	for k, r := range slices.Sorted(maps.Keys(clients)) {
		clients[r] = k
	}
	out := make([]porcupine.Operation, len(ops))
	for k, o := range ops {
		out[k] = porcupine.Operation{
			ClientId: clients[o.in.replica],
			Input:    o.in,
			Call:     o.call.Sub(base).Microseconds(),
			Output:   o.took,
			Return:   o.done.Sub(base).Microseconds(),
			Metadata: cmp.Or(o.in.replica, "unknown replica"),
		}
	}
	return out, clients, base
}

// checkFence checks h's fence for linearizability within timeout (zero:
// DefaultCheckTimeout); nil when there is nothing to check.
func checkFence(h History, timeout time.Duration) *Linearizability {
	ops, _, _ := fenceOperations(h)
	if ops == nil {
		return nil
	}
	began := time.Now()
	res := porcupine.CheckOperationsTimeout(fenceModel, ops, cmp.Or(timeout, DefaultCheckTimeout))
	return &Linearizability{Linearizable: verdictOf(res), Operations: len(ops), CheckedIn: Duration(time.Since(began))}
}

func verdictOf(res porcupine.CheckResult) string {
	if res == porcupine.Ok {
		return LinearizableYes
	}
	if res == porcupine.Illegal {
		return LinearizableNo
	}
	return LinearizableUnknown
}

// VisualizeFence checks h's fence again and writes porcupine's HTML view
// of it to w: one lane per replica with its grants, renewals and writes
// as bars over their intervals, the order found (or, when there is none,
// the longest partial orders and the operation none of them could place),
// and the runner's faults and the replicas' deaths as annotations. It
// returns an error when h has nothing to check.
func VisualizeFence(w io.Writer, h History, timeout time.Duration) error {
	ops, clients, base := fenceOperations(h)
	if ops == nil {
		return fmt.Errorf("oracle: no fenced write with recorded tokens to visualise")
	}
	_, info := porcupine.CheckOperationsVerbose(fenceModel, ops, cmp.Or(timeout, DefaultCheckTimeout))
	var notes []porcupine.Annotation
	for _, e := range h.Events {
		// Claims come every few milliseconds and say nothing of the fence.
		if e.Kind == EventLockClaim {
			continue
		}
		at := e.At.Sub(base).Microseconds()
		id, ok := clients[e.Replica]
		note := porcupine.Annotation{ClientId: id, Start: at, Description: e.Kind, Details: e.Detail, BackgroundColor: "#fde2e2"}
		if !ok {
			note.Tag = "runner"
		}
		notes = append(notes, note)
	}
	info.AddAnnotations(notes)
	if err := porcupine.Visualize(fenceModel, info, w); err != nil {
		return fmt.Errorf("oracle: visualise the fence: %w", err)
	}
	return nil
}
