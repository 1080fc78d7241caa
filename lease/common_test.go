package lease

import (
	"context"
	"errors"
	"testing"

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
