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

// Acquirer is implemented by leases that can wait for leadership instead of
// asking once per poll. Acquire reports what TryAcquire would, except that
// a follower waits, for at most a bound the lease documents, for the lease
// to come free, and is Leader at once when it does. A wait that ends
// without the lease is Follower; a wait that fails is Faulted; the error
// is non-nil only when ctx ended. The worker calls Acquire instead of
// TryAcquire when its lease implements Acquirer.
type Acquirer interface {
	Acquire(ctx context.Context) (Result, error)
}

// AdvisoryLock is the key pair of a two-key session advisory lock, as in
// pg_try_advisory_lock(Key1, Key2). pg_locks shows it with locktype
// 'advisory', classid = Key1, objid = Key2 and objsubid = 2.
type AdvisoryLock struct {
	Key1, Key2 int32
}

// DefaultAdvisoryLock is the original's lock: pg_try_advisory_lock(271, 1).
var DefaultAdvisoryLock = AdvisoryLock{Key1: 271, Key2: 1}

// LockHolder is implemented by leases whose leadership is a session
// advisory lock held by one Postgres backend. A runner that watches
// pg_locks finds the lock by AdvisoryLock; BackendPID is the backend that
// took it, or 0 while the lease does not hold it.
type LockHolder interface {
	AdvisoryLock() AdvisoryLock
	BackendPID() int32
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
