package stack

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
)

func TestBouncerDatabases(t *testing.T) {
	t.Parallel()
	fallback := pgbouncer.Database{Name: "*", Host: "pg", Port: 5432}
	for _, tc := range []struct {
		name  string
		given []pgbouncer.Database
		want  []pgbouncer.Database
	}{
		{"NoneGivenForwardsEverything", nil, []pgbouncer.Database{fallback}},
		{
			"GivenEntriesAreKeptAndFilledIn",
			[]pgbouncer.Database{
				{Name: "app_lease", DBName: "app", PoolSize: 2, PoolMode: pgbouncer.PoolSession},
				{Name: "app", PoolMode: pgbouncer.PoolTransaction},
			},
			[]pgbouncer.Database{
				{Name: "app_lease", Host: "pg", Port: 5432, DBName: "app", PoolSize: 2, PoolMode: pgbouncer.PoolSession},
				{Name: "app", Host: "pg", Port: 5432, DBName: "app", PoolMode: pgbouncer.PoolTransaction},
				fallback,
			},
		},
		{
			"AGivenHostAndPortAreKept",
			[]pgbouncer.Database{{Name: "elsewhere", Host: "other", Port: 6543}},
			[]pgbouncer.Database{{Name: "elsewhere", Host: "other", Port: 6543, DBName: "elsewhere"}, fallback},
		},
		{
			"AGivenFallbackReplacesTheDefaultOne",
			[]pgbouncer.Database{{Name: "*", PoolMode: pgbouncer.PoolStatement}},
			[]pgbouncer.Database{{Name: "*", Host: "pg", Port: 5432, PoolMode: pgbouncer.PoolStatement}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			given := append([]pgbouncer.Database(nil), tc.given...)
			require.Equal(t, tc.want, bouncerDatabases(given, "pg", 5432))
			require.Equal(t, tc.given, given, "the caller's slice is left as it was")
		})
	}
}
