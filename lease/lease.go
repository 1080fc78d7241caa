package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Status is the outcome of one TryAcquire call.
type Status int

// The three outcomes. The zero value is not a valid status, so a forgotten
// assignment cannot read as Follower.
const (
	// Leader: this replica holds the lease and may do leader work until its
	// next TryAcquire.
	Leader Status = iota + 1
	// Follower: the lease is held elsewhere. This is a healthy state.
	Follower
	// Faulted: the lease could not be reached at all. Not healthy.
	Faulted
)

func (s Status) String() string {
	switch s {
	case Leader:
		return "leader"
	case Follower:
		return "follower"
	case Faulted:
		return "faulted"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Term identifies one grant of leadership. Token is a fencing token: it
// rises strictly with every grant of the same lease, so a write carrying an
// older token can be recognised as coming from a deposed leader.
type Term struct {
	// Name is the lease's name (its key), shared by every competitor.
	Name string
	// Holder identifies the replica that holds this term.
	Holder string
	// Token is the fencing token of this grant.
	Token int64
}

// Result is what TryAcquire reports.
type Result struct {
	Status Status
	// Term is set when Status is Leader.
	Term Term
	// Err says why, when Status is Faulted.
	Err error
}

// Lease is the interface every strategy implements, and the one a user
// brings to plug a lease of their own into the worker and the scenarios.
type Lease interface {
	// TryAcquire tries to become leader, or to stay leader if this replica
	// already is. A fault is reported as Status Faulted, not as an error;
	// the error is non-nil only when ctx ended, so cancellation passes
	// through.
	TryAcquire(ctx context.Context) (Result, error)
	// Release gives leadership up so another replica can take it at once.
	// The lease can be acquired again afterwards.
	Release(ctx context.Context) error
	// Close releases and frees every resource. The lease is unusable after.
	Close(ctx context.Context) error
}

// Fencer is implemented by leases whose tokens can be checked where a write
// lands. Fence must run inside the caller's transaction tx, on the database
// that holds the lease's tokens; it returns ErrStaleToken when a newer term
// than term has been granted, and the write must then be rolled back.
type Fencer interface {
	Fence(ctx context.Context, tx pgx.Tx, term Term) error
}

// ErrStaleToken means a write carried a fencing token older than the newest
// granted: the writer has been deposed.
var ErrStaleToken = errors.New("lease: stale fencing token")
