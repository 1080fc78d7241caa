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

// requireLines checks that each of want is a whole line of ini.
func requireLines(t *testing.T, ini string, want ...string) {
	t.Helper()
	lines := strings.Split(ini, "\n")
	for _, line := range want {
		require.Contains(t, lines, line)
	}
}

func TestIniRendersDefaults(t *testing.T) {
	t.Parallel()
	ini, err := validConfig().Ini()
	require.NoError(t, err)
	requireLines(t, ini,
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
	)
	require.NotContains(t, ini, "max_prepared_statements")
	require.NotContains(t, ini, "server_lifetime")
}

func TestIniTurnsPreparedStatementsOffWhenNegative(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.MaxPreparedStatements = -1
	c.Version = "1.24.1"
	ini, err := c.Ini()
	require.NoError(t, err)
	requireLines(t, ini, "max_prepared_statements = 0")
	c.Version = "1.18.0"
	_, err = c.Ini()
	require.ErrorContains(t, err, "max_prepared_statements needs PgBouncer 1.21 or later, have 1.18.0", "1.18 does not know the setting at all")
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
	requireLines(t, ini,
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
	)
	// The fallback entry comes last so named databases win.
	require.Less(t, strings.Index(ini, "app = "), strings.Index(ini, "* = "))
}

func TestIniRendersPoolModePerDatabaseAndUser(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.PoolMode = PoolTransaction
	c.Databases = append(c.Databases,
		Database{Name: "app_lease", Host: "db", Port: 5432, DBName: "app", PoolSize: 2, PoolMode: PoolSession},
		Database{Name: "app", Host: "db", Port: 5432, PoolMode: PoolTransaction},
		Database{Name: "plain", Host: "db", Port: 5432},
	)
	c.UserPoolModes = map[string]PoolMode{"ops": PoolStatement, "leader": PoolSession}
	ini, err := c.Ini()
	require.NoError(t, err)
	requireLines(t, ini,
		"app_lease = host=db port=5432 dbname=app pool_size=2 pool_mode=session",
		"app = host=db port=5432 pool_mode=transaction",
		"plain = host=db port=5432",
		"pool_mode = transaction",
	)
	// [users] follows [databases], one sorted line a user, before [pgbouncer].
	require.Contains(t, ini, "[users]\nleader = pool_mode=session\nops = pool_mode=statement\n\n[pgbouncer]\n")
	require.Less(t, strings.Index(ini, "* = "), strings.Index(ini, "[users]"))

	c.UserPoolModes = nil
	ini, err = c.Ini()
	require.NoError(t, err)
	require.NotContains(t, ini, "[users]", "no section without entries")
}

func TestEffectivePoolModeFollowsPgBouncerPrecedence(t *testing.T) {
	t.Parallel()
	c := Config{
		PoolMode: PoolTransaction,
		Databases: []Database{
			{Name: "app_lease", PoolMode: PoolSession},
			{Name: "app"},
			{Name: "*", PoolMode: PoolStatement},
		},
		UserPoolModes: map[string]PoolMode{"leader": PoolSession},
	}
	for _, tc := range []struct {
		name, database, user string
		want                 PoolMode
	}{
		{"DatabaseModeWinsOverGlobal", "app_lease", "worker", PoolSession},
		{"DatabaseWithoutModeInheritsGlobal", "app", "worker", PoolTransaction},
		{"UnlistedDatabaseTakesTheFallbackEntry", "other", "worker", PoolStatement},
		{"UserModeWinsOverDatabase", "app", "leader", PoolSession},
		{"UserModeWinsOverFallback", "other", "leader", PoolSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, c.EffectivePoolMode(tc.database, tc.user))
		})
	}
	require.Equal(t, PoolSession, Config{Databases: []Database{{Name: "app"}}}.EffectivePoolMode("other", "u"),
		"no fallback entry and no global mode: PgBouncer's default, session")
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
		{"UnknownDatabasePoolMode", func(c *Config) { c.Databases[0].PoolMode = "sesion" },
			`database "*": pool mode "sesion" not supported; use session, transaction or statement, or leave it empty`},
		{"UnknownUserPoolMode", func(c *Config) { c.UserPoolModes = map[string]PoolMode{"app": "Transaction"} },
			`user "app": pool mode "Transaction" not supported`},
		{"EmptyUserPoolMode", func(c *Config) { c.UserPoolModes = map[string]PoolMode{"app": ""} },
			`user "app": pool mode "" not supported; use session, transaction or statement, or remove the entry`},
		{"EmptyUserName", func(c *Config) { c.UserPoolModes = map[string]PoolMode{"": PoolSession} },
			`user pool mode for "": a user name must be non-empty`},
		{"UserNameWithEquals", func(c *Config) { c.UserPoolModes = map[string]PoolMode{"a=b": PoolSession} },
			`user pool mode for "a=b"`},
		{"DatabaseNameWithSpace", func(c *Config) { c.Databases[0].Name = "my db" },
			`database "my db": names and hosts cannot contain spaces`},
		{"DBNameInjectingAKey", func(c *Config) { c.Databases[0].DBName = "x pool_mode=session" },
			`database "*": names and hosts cannot contain spaces`},
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
