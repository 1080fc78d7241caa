package pgbouncer

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// PoolMode is PgBouncer's pool_mode.
type PoolMode string

// The pool modes PgBouncer supports.
const (
	PoolSession     PoolMode = "session"
	PoolTransaction PoolMode = "transaction"
	PoolStatement   PoolMode = "statement"
)

// AuthType is PgBouncer's auth_type for client logins.
type AuthType string

// The password authentication methods doublerun renders. Trust is deliberately
// absent: a stack with real passwords is the topology users run.
const (
	AuthMD5   AuthType = "md5"
	AuthSCRAM AuthType = "scram-sha-256"
)

// User is one line of userlist.txt.
type User struct {
	Name     string
	Password string
}

// Database is one entry of the [databases] section. Name "*" is PgBouncer's
// fallback entry, which lets clients connect to any database on the server.
type Database struct {
	Name string
	Host string
	Port int
	// DBName is the database on the server; empty means the same as Name.
	DBName string
	// PoolSize overrides Config.DefaultPoolSize for this entry when > 0.
	PoolSize int
	// PoolMode overrides Config.PoolMode for this entry's pools; empty
	// inherits it. A pool mode in Config.UserPoolModes wins over both (see
	// [Config.EffectivePoolMode]).
	PoolMode PoolMode
}

// Config describes one PgBouncer instance. The zero value of each field
// takes the default noted next to it; [Config.Validate] checks the result.
type Config struct {
	ListenAddr string // default "127.0.0.1"
	ListenPort int    // required

	Databases []Database // required, at least one
	Users     []User     // written to userlist.txt with plain passwords
	AuthType  AuthType   // default scram-sha-256
	AuthFile  string     // path of userlist.txt as PgBouncer sees it; required

	PoolMode        PoolMode // default session
	DefaultPoolSize int      // default 20
	MaxClientConn   int      // default 1000
	AdminUsers      []string // users allowed on the admin console

	// UserPoolModes is PgBouncer's [users] section: a pool mode per user
	// name, for every pool of that user whatever the database.
	UserPoolModes map[string]PoolMode

	// IgnoreStartupParameters defaults to extra_float_digits, which common
	// drivers send and PgBouncer otherwise rejects.
	IgnoreStartupParameters []string

	// ServerResetQuery defaults to "DISCARD ALL", PgBouncer's own default.
	ServerResetQuery string
	// ServerResetQueryAlways makes PgBouncer run the reset query in
	// transaction pooling too.
	ServerResetQueryAlways bool
	// ServerLifetime and ServerIdleTimeout are in seconds; 0 takes
	// PgBouncer's defaults (3600 and 600).
	ServerLifetime    int
	ServerIdleTimeout int

	// MaxPreparedStatements enables protocol-level prepared statements in
	// transaction pooling. PgBouncer supports it from 1.21; see Validate.
	// 0 leaves PgBouncer's default, which is 0 up to 1.23 and 200 from
	// 1.24; a negative value writes max_prepared_statements = 0, to turn
	// the support off on 1.24 and later.
	MaxPreparedStatements int

	// Version is the PgBouncer version the config is for, such as "1.18.0".
	// Empty means unknown, which skips version checks.
	Version string

	// LogFile and PidFile are left out of the ini when empty, so PgBouncer
	// logs to stderr and writes no pid file.
	LogFile string
	PidFile string

	// Verbose raises PgBouncer's log level.
	Verbose int
}

func (c Config) withDefaults() Config {
	c.ListenAddr = cmp.Or(c.ListenAddr, "127.0.0.1")
	c.AuthType = cmp.Or(c.AuthType, AuthSCRAM)
	c.PoolMode = cmp.Or(c.PoolMode, PoolSession)
	c.DefaultPoolSize = cmp.Or(c.DefaultPoolSize, 20)
	c.MaxClientConn = cmp.Or(c.MaxClientConn, 1000)
	c.ServerResetQuery = cmp.Or(c.ServerResetQuery, "DISCARD ALL")
	if c.IgnoreStartupParameters == nil {
		c.IgnoreStartupParameters = []string{"extra_float_digits"}
	}
	return c
}

// Validate reports the first problem that would stop PgBouncer from starting
// with this config, or make it behave differently from what the fields say.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.ListenPort <= 0 || c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listen port %d out of range 1-65535", c.ListenPort))
	}
	if len(c.Databases) == 0 {
		errs = append(errs, errors.New("no databases; add at least one (name \"*\" forwards every database)"))
	}
	for _, d := range c.Databases {
		if d.Name == "" || d.Host == "" || d.Port <= 0 {
			errs = append(errs, fmt.Errorf("database %q needs a name, a host and a port", d.Name))
		}
		if !plainWord(d.Name) || !plainWord(d.DBName) || !plainWord(d.Host) {
			errs = append(errs, fmt.Errorf("database %q: names and hosts cannot contain spaces, quotes, '=', ';' or '#'", d.Name))
		}
		if d.PoolMode != "" && !d.PoolMode.valid() {
			errs = append(errs, fmt.Errorf("database %q: pool mode %q not supported; use session, transaction or statement, or leave it empty to inherit pool_mode", d.Name, d.PoolMode))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.UserPoolModes)) {
		mode := c.UserPoolModes[name]
		if name == "" || !plainWord(name) {
			errs = append(errs, fmt.Errorf("user pool mode for %q: a user name must be non-empty, without spaces, quotes, '=', ';' or '#'", name))
		}
		if !mode.valid() {
			errs = append(errs, fmt.Errorf("user %q: pool mode %q not supported; use session, transaction or statement, or remove the entry to inherit", name, mode))
		}
	}
	if c.AuthFile == "" {
		errs = append(errs, errors.New("auth file path is empty"))
	}
	switch c.AuthType {
	case AuthMD5, AuthSCRAM:
	default:
		errs = append(errs, fmt.Errorf("auth type %q not supported; use md5 or scram-sha-256", c.AuthType))
	}
	if !c.PoolMode.valid() {
		errs = append(errs, fmt.Errorf("pool mode %q not supported; use session, transaction or statement", c.PoolMode))
	}
	for _, u := range c.Users {
		if u.Name == "" || u.Password == "" {
			errs = append(errs, fmt.Errorf("user %q needs a name and a password", u.Name))
		}
		if strings.ContainsAny(u.Name+u.Password, "\"\n") {
			errs = append(errs, fmt.Errorf("user %q: names and passwords cannot contain quotes or newlines", u.Name))
		}
	}
	if c.MaxPreparedStatements != 0 && c.Version != "" && !SupportsPreparedStatements(c.Version) {
		errs = append(errs, fmt.Errorf("max_prepared_statements needs PgBouncer 1.21 or later, have %s", c.Version))
	}
	return errors.Join(errs...)
}

// Ini renders pgbouncer.ini.
func (c Config) Ini() (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("pgbouncer config: %w", err)
	}
	c = c.withDefaults()
	var b strings.Builder
	b.WriteString("; generated by doublerun\n[databases]\n")
	dbs := append([]Database(nil), c.Databases...)
	sort.SliceStable(dbs, func(i, j int) bool { return dbs[i].Name != "*" && dbs[j].Name == "*" })
	for _, d := range dbs {
		fmt.Fprintf(&b, "%s = host=%s port=%d", d.Name, d.Host, d.Port)
		if d.DBName != "" {
			fmt.Fprintf(&b, " dbname=%s", d.DBName)
		}
		if d.PoolSize > 0 {
			fmt.Fprintf(&b, " pool_size=%d", d.PoolSize)
		}
		// Guard: without its pool_mode a session-mode lease name would be
		// pooled like the work, and two replicas' locks would meet on one
		// backend. Caught by TestOneBouncerServesSessionAndTransactionNames/
		// SessionNameKeepsItsBackendAndItsLock.
		if d.PoolMode != "" {
			fmt.Fprintf(&b, " pool_mode=%s", d.PoolMode)
		}
		b.WriteString("\n")
	}
	// Guard: a user given session pooling for its lease would otherwise
	// get the database's or the global mode. Caught by
	// TestUserPoolModeWinsOverDatabasePoolMode.
	if len(c.UserPoolModes) > 0 {
		b.WriteString("\n[users]\n")
		for _, name := range slices.Sorted(maps.Keys(c.UserPoolModes)) {
			fmt.Fprintf(&b, "%s = pool_mode=%s\n", name, c.UserPoolModes[name])
		}
	}
	b.WriteString("\n[pgbouncer]\n")
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s = %v\n", k, v) }
	kv("listen_addr", c.ListenAddr)
	kv("listen_port", c.ListenPort)
	kv("unix_socket_dir", "")
	kv("auth_type", c.AuthType)
	kv("auth_file", c.AuthFile)
	if len(c.AdminUsers) > 0 {
		kv("admin_users", strings.Join(c.AdminUsers, ","))
	}
	kv("pool_mode", c.PoolMode)
	kv("default_pool_size", c.DefaultPoolSize)
	kv("max_client_conn", c.MaxClientConn)
	kv("ignore_startup_parameters", strings.Join(c.IgnoreStartupParameters, ","))
	kv("server_reset_query", c.ServerResetQuery)
	kv("server_reset_query_always", boolInt(c.ServerResetQueryAlways))
	if c.ServerLifetime > 0 {
		kv("server_lifetime", c.ServerLifetime)
	}
	if c.ServerIdleTimeout > 0 {
		kv("server_idle_timeout", c.ServerIdleTimeout)
	}
	if c.MaxPreparedStatements != 0 {
		kv("max_prepared_statements", max(c.MaxPreparedStatements, 0))
	}
	if c.LogFile != "" {
		kv("logfile", c.LogFile)
	}
	if c.PidFile != "" {
		kv("pidfile", c.PidFile)
	}
	if c.Verbose > 0 {
		kv("verbose", c.Verbose)
	}
	return b.String(), nil
}

// EffectivePoolMode is the pool mode PgBouncer gives the pool of user on
// database, by its own precedence: the user's entry in UserPoolModes, then
// the database's entry (the "*" entry for a database not listed), then
// Config.PoolMode. TestPoolModePerDatabaseReachesPgBouncer and
// TestUserPoolModeWinsOverDatabasePoolMode check that order against a
// running PgBouncer.
func (c Config) EffectivePoolMode(database, user string) PoolMode {
	c = c.withDefaults()
	if m := c.UserPoolModes[user]; m != "" {
		return m
	}
	var fallback PoolMode
	for _, d := range c.Databases {
		switch d.Name {
		case database:
			return cmp.Or(d.PoolMode, c.PoolMode)
		case "*":
			fallback = d.PoolMode
		}
	}
	return cmp.Or(fallback, c.PoolMode)
}

// Userlist renders userlist.txt. Passwords are written in plain text:
// PgBouncer needs the plain password (or a SCRAM secret captured from a
// SCRAM client login) to log in to a server that stores SCRAM verifiers.
func (c Config) Userlist() string {
	var b strings.Builder
	for _, u := range c.Users {
		fmt.Fprintf(&b, "%q %q\n", u.Name, u.Password)
	}
	return b.String()
}

func (m PoolMode) valid() bool {
	switch m {
	case PoolSession, PoolTransaction, PoolStatement:
		return true
	}
	return false
}

// plainWord reports whether s can stand unquoted as an ini key or as a
// value in a [databases] connection string.
func plainWord(s string) bool { return !strings.ContainsAny(s, " \t\r\n\"'=;#\\") }

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
