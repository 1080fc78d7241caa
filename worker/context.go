package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/lease"
)

type leaderKey struct{}

// leader is what a leader cycle puts in the context of its handlers and
// sweeps.
type leader struct {
	term   lease.Term
	fencer lease.Fencer
}

func withLeader(ctx context.Context, term lease.Term, fencer lease.Fencer) context.Context {
	return context.WithValue(ctx, leaderKey{}, leader{term: term, fencer: fencer})
}

// TermFromContext returns the lease term under which a handler or sweep
// runs, and whether ctx carries one. Term.Token is the fencing token: pass
// it along with side effects so that their receiver can refuse a deposed
// leader's writes, or use Fence for writes to the lease's database.
func TermFromContext(ctx context.Context) (lease.Term, bool) {
	l, ok := ctx.Value(leaderKey{}).(leader)
	return l.term, ok
}

// ErrNoTerm is returned by Fence when ctx does not come from a leader
// cycle.
var ErrNoTerm = errors.New("worker: context carries no lease term; call Fence with the context a handler or sweep was given")

// Fence checks, inside tx, that the term under which the handler or sweep
// runs is still the newest, so that the rest of tx may write. It returns an
// error wrapping lease.ErrStaleToken when a newer term has been granted;
// roll tx back then. tx must be on the database that holds the lease. With a
// lease that cannot fence (no lease.Fencer) it returns nil: there is nothing
// to check against.
func Fence(ctx context.Context, tx pgx.Tx) error {
	l, ok := ctx.Value(leaderKey{}).(leader)
	if !ok {
		return ErrNoTerm
	}
	if l.fencer == nil {
		return nil
	}
	if err := l.fencer.Fence(ctx, tx, l.term); err != nil {
		return fmt.Errorf("fence token %d of %s: %w", l.term.Token, l.term.Name, err)
	}
	return nil
}
