package pgbouncer

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func validConfig() Config {
	return Config{
		ListenPort: 6432,
		AuthFile:   "/etc/pgbouncer/userlist.txt",
		Databases:  []Database{{Name: "*", Host: "postgres", Port: 5432}},
		Users:      []User{{Name: "app", Password: "secret"}},
	}
}

func TestIniRendersDefaults(t *testing.T) {
	t.Parallel()
	ini, err := validConfig().Ini()
	require.NoError(t, err)
	for _, line := range []string{
		"* = host=postgres port=5432",
		"listen_addr = 127.0.0.1",
		"listen_port = 6432",
		"auth_type = scram-sha-256",
		"pool_mode = session",
		"default_pool_size = 20",
		"max_client_conn = 1000",
		"ignore_startup_parameters = extra_float_digits",
		"server_reset_query = DISCARD ALL",
		"server_reset_query_always = 0",
	} {
		require.Contains(t, strings.Split(ini, "\n"), line)
	}
	require.NotContains(t, ini, "max_prepared_statements")
	require.NotContains(t, ini, "server_lifetime")
}

func TestIniRendersEveryField(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Databases = append(c.Databases, Database{Name: "app", Host: "db", Port: 5433, DBName: "real", PoolSize: 3})
	c.PoolMode = PoolTransaction
	c.DefaultPoolSize = 1
	c.MaxClientConn = 50
	c.AuthType = AuthMD5
	c.AdminUsers = []string{"admin", "ops"}
	c.IgnoreStartupParameters = []string{"extra_float_digits", "options"}
	c.ServerResetQuery = "SELECT 1"
	c.ServerResetQueryAlways = true
	c.ServerLifetime = 60
	c.ServerIdleTimeout = 30
	c.MaxPreparedStatements = 100
	c.Version = "1.21.0"
	ini, err := c.Ini()
	require.NoError(t, err)
	lines := strings.Split(ini, "\n")
	for _, line := range []string{
		"app = host=db port=5433 dbname=real pool_size=3",
		"auth_type = md5",
		"admin_users = admin,ops",
		"pool_mode = transaction",
		"default_pool_size = 1",
		"max_client_conn = 50",
		"ignore_startup_parameters = extra_float_digits,options",
		"server_reset_query = SELECT 1",
		"server_reset_query_always = 1",
		"server_lifetime = 60",
		"server_idle_timeout = 30",
		"max_prepared_statements = 100",
	} {
		require.Contains(t, lines, line)
	}
	// The fallback entry comes last so named databases win.
	require.Less(t, strings.Index(ini, "app = "), strings.Index(ini, "* = "))
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"MissingPort", func(c *Config) { c.ListenPort = 0 }, "listen port 0 out of range"},
		{"NoDatabases", func(c *Config) { c.Databases = nil }, "no databases"},
		{"DatabaseWithoutHost", func(c *Config) { c.Databases[0].Host = "" }, `database "*" needs a name, a host and a port`},
		{"NoAuthFile", func(c *Config) { c.AuthFile = "" }, "auth file path is empty"},
		{"TrustAuth", func(c *Config) { c.AuthType = "trust" }, `auth type "trust" not supported`},
		{"UnknownPoolMode", func(c *Config) { c.PoolMode = "sticky" }, `pool mode "sticky" not supported`},
		{"UserWithoutPassword", func(c *Config) { c.Users[0].Password = "" }, `user "app" needs a name and a password`},
		{"QuoteInPassword", func(c *Config) { c.Users[0].Password = `a"b` }, "cannot contain quotes"},
		{"PreparedStatementsOn118", func(c *Config) { c.MaxPreparedStatements = 10; c.Version = "1.18.0" },
			"max_prepared_statements needs PgBouncer 1.21 or later, have 1.18.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			c.Databases = append([]Database(nil), c.Databases...)
			c.Users = append([]User(nil), c.Users...)
			tc.mutate(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
			_, err := c.Ini()
			require.Error(t, err)
		})
	}
}

func TestUserlistQuotesEveryUser(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Users = append(c.Users, User{Name: "admin", Password: "p w"})
	require.Equal(t, "\"app\" \"secret\"\n\"admin\" \"p w\"\n", c.Userlist())
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Version{
		"1.18.0":                         {1, 18, 0},
		"PgBouncer 1.21.0":               {1, 21, 0},
		"PgBouncer 1.18.0\nlibevent 2.1": {1, 18, 0},
		"1.24":                           {1, 24, 0},
	} {
		got, err := ParseVersion(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := ParseVersion("pgbouncer")
	require.Error(t, err)
	require.True(t, Version{1, 18, 0}.Less(Version{1, 21, 0}))
	require.False(t, Version{1, 21, 0}.Less(Version{1, 21, 0}))
	require.True(t, Version{0, 99, 9}.Less(Version{1, 0, 0}))
	require.True(t, Version{1, 21, 0}.Less(Version{1, 21, 1}))
}

func TestExecModeForPool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mode     PoolMode
		version  string
		prepared int
		want     pgx.QueryExecMode
	}{
		{"DirectCaches", "", "", 0, pgx.QueryExecModeCacheStatement},
		{"SessionCaches", PoolSession, "1.18.0", 0, pgx.QueryExecModeCacheStatement},
		{"TransactionOn118Execs", PoolTransaction, "1.18.0", 0, pgx.QueryExecModeExec},
		{"TransactionOn118WithPreparedStillExecs", PoolTransaction, "1.18.0", 100, pgx.QueryExecModeExec},
		{"TransactionOn121WithoutPreparedExecs", PoolTransaction, "1.21.0", 0, pgx.QueryExecModeExec},
		{"TransactionOn121WithPreparedCaches", PoolTransaction, "1.21.0", 100, pgx.QueryExecModeCacheStatement},
		{"StatementPoolOnUnknownVersionExecs", PoolStatement, "", 100, pgx.QueryExecModeExec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, ExecMode(tc.mode, tc.version, tc.prepared))
		})
	}
}
