package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestCreateTable covers what a real server shows only when two replicas
// migrate at the very same moment: each way the loser of that race can
// fail means the table exists, and anything else is an error.
func TestCreateTable(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).
	for _, tt := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"Created", nil, false},
		{"LostTheRaceOnTheCatalogIndex", &pgconn.PgError{Code: "23505"}, false},
		{"LostTheRaceOnTheRelation", &pgconn.PgError{Code: "42P07"}, false},
		{"LostTheRaceOnTheRowType", &pgconn.PgError{Code: "42710"}, false},
		{"NotAllowed", &pgconn.PgError{Code: "42501"}, true},
		{"ConnectionLost", errors.New("unexpected EOF"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := createTable(context.Background(), execerFunc(func() error { return tt.err }), "CREATE TABLE IF NOT EXISTS t ()")
			if tt.wantErr {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

type execerFunc func() error

func (f execerFunc) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, f()
}

// TestHelpers covers the small helpers both leases share, none of which
// needs a server: the errors a server returns only in rare moments (a wait
// ended by lock_timeout, a lease table that does not exist), WaitTimeout's
// bounds, table names, the default holder and closing no connection.
func TestHelpers(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).
	lockTimeout := &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}
	undefinedTable := &pgconn.PgError{Code: "42P01", Message: `relation "doublerun_leases" does not exist`}

	t.Run("LockTimeoutIsTheOne55P03", func(t *testing.T) {
		require.True(t, isLockTimeout(lockTimeout))
		require.True(t, isLockTimeout(fmt.Errorf("wrapped: %w", lockTimeout)))
		require.False(t, isLockTimeout(undefinedTable))
		require.False(t, isLockTimeout(errors.New("55P03")), "only a server error counts")
		require.False(t, isLockTimeout(nil))
	})

	t.Run("MissingTableGetsTheMigrateHint", func(t *testing.T) {
		err := hintMigrate(undefinedTable, "ops.leases")
		require.ErrorIs(t, err, undefinedTable)
		require.ErrorContains(t, err, `lease.MigrateFenced(ctx, conn, "ops.leases")`)
		for _, other := range []error{lockTimeout, errors.New("relation does not exist")} {
			require.Equal(t, other, hintMigrate(other, "ops.leases"), "no hint for %v", other)
		}
	})

	t.Run("WaitTimeoutIsZeroOrAtLeastAMillisecond", func(t *testing.T) {
		for d, ok := range map[time.Duration]bool{
			0: true, time.Millisecond: true, time.Hour: true,
			-time.Nanosecond: false, time.Nanosecond: false, time.Millisecond - time.Nanosecond: false,
		} {
			if err := validateWaitTimeout(d); ok {
				require.NoError(t, err, "%s", d)
			} else {
				require.ErrorContains(t, err, "at least 1ms", "%s", d)
			}
		}
	})

	t.Run("TableNamesAreQuoted", func(t *testing.T) {
		for name, want := range map[string]string{"leases": `"leases"`, "ops.Leases": `"ops"."Leases"`} {
			got, err := quoteTable(name)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
		for _, bad := range []string{"", "a.", ".a", "a..b", "a.b.c"} {
			_, err := quoteTable(bad)
			require.Error(t, err, "%q", bad)
		}
	})

	t.Run("DefaultHolderIsHostnameAndPID", func(t *testing.T) {
		host, err := os.Hostname()
		require.NoError(t, err)
		require.NotEmpty(t, host)
		require.Equal(t, fmt.Sprintf("%s-%d", host, os.Getpid()), defaultHolder())
	})

	t.Run("ClosingNoConnectionIsANoOp", func(t *testing.T) {
		closeConn(context.Background(), nil)
	})
}

func TestStatusString(t *testing.T) {
	// Not parallel: it needs no server and runs before every test that
	// does (see TestMain).
	for s, want := range map[Status]string{Leader: "leader", Follower: "follower", Faulted: "faulted", 0: "Status(0)", 9: "Status(9)"} {
		require.Equal(t, want, s.String())
	}
	for k, want := range map[EndpointKind]string{
		EndpointUnknown: "unknown", EndpointDirect: "direct", EndpointPinned: "pinned",
		EndpointTransactionPooled: "transaction-pooled", 9: "EndpointKind(9)",
	} {
		require.Equal(t, want, k.String())
	}
}
