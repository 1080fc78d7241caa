package pgbouncer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Admin is a client for PgBouncer's admin console (the "pgbouncer" virtual
// database). It is not safe for concurrent use, like the pgx.Conn under it.
type Admin struct {
	conn *pgx.Conn
}

// ConnectAdmin connects to the admin console at dsn. The console accepts only
// the simple query protocol, so that mode is forced whatever dsn says.
func ConnectAdmin(ctx context.Context, dsn string) (*Admin, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin: parse dsn: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin: connect to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return &Admin{conn: conn}, nil
}

// Close closes the console connection.
func (a *Admin) Close(ctx context.Context) error { return a.conn.Close(ctx) }

// Pool is one row of SHOW POOLS.
type Pool struct {
	Database  string
	User      string
	ClActive  int
	ClWaiting int
	SvActive  int
	SvIdle    int
	SvUsed    int
	SvTested  int
	SvLogin   int
	MaxWait   int
	PoolMode  PoolMode
}

// Server is one row of SHOW SERVERS: a connection from PgBouncer to Postgres.
type Server struct {
	Type      string
	User      string
	Database  string
	State     string
	Addr      string
	Port      int
	LocalAddr string
	LocalPort int
	// RemotePID is the Postgres backend PID behind this server connection.
	RemotePID       int
	ApplicationName string
	// Link is the client connection this server connection is paired
	// with, as PgBouncer names it; empty when none is.
	Link string
}

// Linked reports whether a client is paired with this server connection:
// in session pooling for as long as the client stays connected, in
// transaction pooling only while one of its transactions runs.
func (s Server) Linked() bool { return s.Link != "" || s.State == "active" }

// Client is one row of SHOW CLIENTS.
type Client struct {
	Type            string
	User            string
	Database        string
	State           string
	Addr            string
	Port            int
	ApplicationName string
}

// Pools runs SHOW POOLS.
func (a *Admin) Pools(ctx context.Context) ([]Pool, error) {
	rows, err := a.show(ctx, "POOLS")
	if err != nil {
		return nil, err
	}
	out := make([]Pool, 0, len(rows))
	for _, r := range rows {
		out = append(out, Pool{
			Database: r.s("database"), User: r.s("user"),
			ClActive: r.i("cl_active"), ClWaiting: r.i("cl_waiting"),
			SvActive: r.i("sv_active"), SvIdle: r.i("sv_idle"), SvUsed: r.i("sv_used"),
			SvTested: r.i("sv_tested"), SvLogin: r.i("sv_login"),
			MaxWait: r.i("maxwait"), PoolMode: PoolMode(r.s("pool_mode")),
		})
	}
	return out, nil
}

// Servers runs SHOW SERVERS.
func (a *Admin) Servers(ctx context.Context) ([]Server, error) {
	rows, err := a.show(ctx, "SERVERS")
	if err != nil {
		return nil, err
	}
	out := make([]Server, 0, len(rows))
	for _, r := range rows {
		out = append(out, Server{
			Type: r.s("type"), User: r.s("user"), Database: r.s("database"), State: r.s("state"),
			Addr: r.s("addr"), Port: r.i("port"), LocalAddr: r.s("local_addr"), LocalPort: r.i("local_port"),
			RemotePID: r.i("remote_pid"), ApplicationName: r.s("application_name"),
			Link: r.s("link"),
		})
	}
	return out, nil
}

// Clients runs SHOW CLIENTS.
func (a *Admin) Clients(ctx context.Context) ([]Client, error) {
	rows, err := a.show(ctx, "CLIENTS")
	if err != nil {
		return nil, err
	}
	out := make([]Client, 0, len(rows))
	for _, r := range rows {
		out = append(out, Client{
			Type: r.s("type"), User: r.s("user"), Database: r.s("database"), State: r.s("state"),
			Addr: r.s("addr"), Port: r.i("port"), ApplicationName: r.s("application_name"),
		})
	}
	return out, nil
}

// Config runs SHOW CONFIG and returns each setting's current value by key.
func (a *Admin) Config(ctx context.Context) (map[string]string, error) {
	rows, err := a.show(ctx, "CONFIG")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.s("key")] = r.s("value")
	}
	return out, nil
}

// Version runs SHOW VERSION and returns the version number, such as "1.18.0".
func (a *Admin) Version(ctx context.Context) (string, error) {
	rows, err := a.show(ctx, "VERSION")
	if err != nil {
		return "", err
	}
	if len(rows) != 1 {
		return "", fmt.Errorf("pgbouncer admin: SHOW VERSION returned %d rows", len(rows))
	}
	v, err := ParseVersion(rows[0].s("version"))
	if err != nil {
		return "", fmt.Errorf("pgbouncer admin: %w", err)
	}
	return v.String(), nil
}

// Pause waits for every server connection of db (all databases when db is
// "") to be released, then holds new queries until Resume.
func (a *Admin) Pause(ctx context.Context, db string) error { return a.command(ctx, "PAUSE", db) }

// Resume ends a Pause or Suspend.
func (a *Admin) Resume(ctx context.Context, db string) error { return a.command(ctx, "RESUME", db) }

// Kill drops every client and server connection of db at once and pauses it;
// Resume reopens it. PgBouncer requires a database name for KILL.
func (a *Admin) Kill(ctx context.Context, db string) error {
	if db == "" {
		return fmt.Errorf("pgbouncer admin: KILL needs a database name")
	}
	return a.command(ctx, "KILL", db)
}

// Reconnect closes each server connection of db (all when "") as soon as it
// is released, so the next transaction gets a new backend.
func (a *Admin) Reconnect(ctx context.Context, db string) error {
	return a.command(ctx, "RECONNECT", db)
}

// Suspend flushes every socket buffer and stops PgBouncer reading from any
// socket until Resume.
func (a *Admin) Suspend(ctx context.Context) error { return a.command(ctx, "SUSPEND", "") }

// Disable rejects new client connections to db.
func (a *Admin) Disable(ctx context.Context, db string) error {
	return a.command(ctx, "DISABLE", db)
}

// Enable accepts client connections to db again after Disable.
func (a *Admin) Enable(ctx context.Context, db string) error { return a.command(ctx, "ENABLE", db) }

func (a *Admin) command(ctx context.Context, verb, db string) error {
	sql := verb
	if db != "" {
		sql += " " + quoteIdent(db)
	}
	if _, err := a.conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgbouncer admin: %s: %w", sql, err)
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

type row map[string]string

func (r row) s(k string) string { return r[k] }

func (r row) i(k string) int {
	n, _ := strconv.Atoi(r[k])
	return n
}

// show runs SHOW what and returns each row keyed by column name. Columns
// differ between PgBouncer versions, so rows are read by name and unknown
// columns are ignored.
func (a *Admin) show(ctx context.Context, what string) ([]row, error) {
	rows, err := a.conn.Query(ctx, "SHOW "+what)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin: SHOW %s: %w", what, err)
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var out []row
	for rows.Next() {
		raw := rows.RawValues()
		r := make(row, len(fields))
		for i, f := range fields {
			r[f.Name] = string(raw[i])
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgbouncer admin: SHOW %s: %w", what, err)
	}
	return out, nil
}
