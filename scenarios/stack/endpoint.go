package stack

import (
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/pgbouncer"
)

// Names of the endpoints every stack has.
const (
	PostgresName    = "postgres"
	SessionName     = "session"
	TransactionName = "transaction"
)

// Endpoint is one way into the stack: Postgres itself or one PgBouncer.
type Endpoint struct {
	// Name is "postgres", "session", "transaction" or the name given to
	// AddPgBouncer.
	Name string
	// DSN is a postgres:// URL for the application database.
	DSN string
	// AdminDSN reaches PgBouncer's admin console; empty for Postgres.
	AdminDSN string
	// PoolMode is empty for a direct connection to Postgres.
	PoolMode pgbouncer.PoolMode
	// PoolSize is PgBouncer's default_pool_size (per database and user).
	PoolSize int
	// Version is the PgBouncer version, such as "1.18.0"; empty for Postgres.
	Version string
	// PostgresVersion is the server_version of the Postgres behind the
	// endpoint as a client of it sees it, such as
	// "15.13 (Debian 15.13-0+deb12u1)". Reports name it beside Version.
	PostgresVersion string
	// MaxPreparedStatements is the bouncer's max_prepared_statements.
	MaxPreparedStatements int
}

// Direct reports whether the endpoint is Postgres itself.
func (e Endpoint) Direct() bool { return e.PoolMode == "" }

// ExecMode is the pgx query mode that is safe through this endpoint.
func (e Endpoint) ExecMode() pgx.QueryExecMode {
	return pgbouncer.ExecMode(e.PoolMode, e.Version, e.MaxPreparedStatements)
}

// ConnConfig parses DSN and sets the query mode that is safe through this
// endpoint.
func (e Endpoint) ConnConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(e.DSN)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", e.Name, err)
	}
	cfg.DefaultQueryExecMode = e.ExecMode()
	return cfg, nil
}

// WithDatabase returns the endpoint with its DSN pointing at database db.
func (e Endpoint) WithDatabase(db string) Endpoint {
	u, err := url.Parse(e.DSN)
	if err != nil {
		return e
	}
	u.Path = "/" + db
	e.DSN = u.String()
	return e
}

func dsn(user, password, host string, port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     fmt.Sprintf("%s:%d", host, port),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}
