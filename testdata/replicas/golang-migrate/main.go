// Command golang-migrate is a doublerun replica built on golang-migrate
// (github.com/golang-migrate/migrate/v4) and its postgres driver, used
// through the library's public API as a service that migrates at start-up
// uses it.
//
// The driver's Lock takes a session advisory lock, pg_advisory_lock(id),
// on one connection and holds it until Unlock; every replica of a service
// runs its migrations at once and the lock is what keeps two of them from
// running a migration together. doublerun runs this program as each
// replica and reports what it does over the doublerun.* SQL functions.
//
// Two modes:
//
//	lock (the default)  the driver's own Lock, then a "migration" of
//	                    --pieces pieces of work (DOUBLERUN_WORK_MS each,
//	                    each with a side-effect write through the work
//	                    endpoint), then Unlock; again after the poll interval
//	up                  migrate up itself (Migrate.Up) with --pieces
//	                    migrations that each sleep DOUBLERUN_WORK_MS and
//	                    write, every replica at once; the library's own
//	                    Lock and version table decide who runs them
//
// Build it as a user builds a program (its go.mod is its own):
//
//	cd testdata/replicas/golang-migrate && go build -o /tmp/golang-migrate-replica .
//
// and run the matrix's advisory column with it:
//
//	doublerun chaos --strategy advisory --replica testdata/replicas/golang-migrate/replica.json
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/lib/pq"
)

func main() {
	mode := flag.String("mode", "lock", "lock: the driver's Lock/Unlock around pieces of work; up: migrate up with migrations that sleep and write")
	pieces := flag.Int("pieces", 3, "pieces of work per lock (lock), or migrations (up)")
	flag.Parse()
	if *mode != "lock" && *mode != "up" {
		fmt.Fprintf(os.Stderr, "golang-migrate: --mode %q: give lock or up\n", *mode)
		os.Exit(2)
	}
	if *pieces < 1 {
		fmt.Fprintf(os.Stderr, "golang-migrate: --pieces %d: give at least 1\n", *pieces)
		os.Exit(2)
	}
	cfg, err := readEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "golang-migrate:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", cfg.replica)
	r, err := newReplica(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "golang-migrate:", err)
		os.Exit(1)
	}
	defer r.close()
	log.Info("started", "mode", *mode, "pieces", *pieces)
	for ctx.Err() == nil {
		if *mode == "lock" {
			err = r.lockRound(ctx, *pieces)
		} else {
			err = r.upRound(ctx, *pieces)
		}
		if err != nil && ctx.Err() == nil {
			// A service that fails to migrate is restarted by its
			// supervisor; this one starts its round again.
			log.Warn("round failed", "err", err)
		}
		sleep(ctx, cfg.poll)
	}
	log.Info("stopped")
}

type config struct {
	replica, leaseDSN, workDSN, oracleDSN string
	poll, work                            time.Duration
}

func readEnv() (config, error) {
	var c config
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	c.replica = get("DOUBLERUN_REPLICA_ID")
	c.leaseDSN = get("DOUBLERUN_LEASE_DSN")
	c.workDSN = get("DOUBLERUN_WORK_DSN")
	c.oracleDSN = get("DOUBLERUN_ORACLE_DSN")
	poll, work := get("DOUBLERUN_POLL_INTERVAL_MS"), get("DOUBLERUN_WORK_MS")
	if len(missing) > 0 {
		return c, fmt.Errorf("%s not set; doublerun starts this program as a replica with the DOUBLERUN_* variables set", strings.Join(missing, ", "))
	}
	for _, p := range []struct {
		s string
		d *time.Duration
	}{{poll, &c.poll}, {work, &c.work}} {
		ms, err := strconv.Atoi(p.s)
		if err != nil {
			return c, fmt.Errorf("a DOUBLERUN_*_MS variable is %q, not a number of milliseconds", p.s)
		}
		*p.d = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

// replica holds the three connections: the driver's on the lease endpoint,
// the work endpoint's for the side-effect writes, and the oracle's for the
// reports.
type replica struct {
	cfg    config
	log    *slog.Logger
	lease  *sql.DB
	work   *sql.DB
	oracle *sql.DB
}

func open(dsn string) (*sql.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", "2")
	}
	u.RawQuery = q.Encode()
	return sql.Open("postgres", u.String())
}

func newReplica(ctx context.Context, cfg config, log *slog.Logger) (*replica, error) {
	r := &replica{cfg: cfg, log: log}
	var err error
	if r.lease, err = open(cfg.leaseDSN); err != nil {
		return nil, fmt.Errorf("DOUBLERUN_LEASE_DSN: %w", err)
	}
	if r.work, err = open(cfg.workDSN); err != nil {
		return nil, fmt.Errorf("DOUBLERUN_WORK_DSN: %w", err)
	}
	if r.oracle, err = open(cfg.oracleDSN); err != nil {
		return nil, fmt.Errorf("DOUBLERUN_ORACLE_DSN: %w", err)
	}
	r.oracle.SetMaxOpenConns(2)
	return r, nil
}

func (r *replica) close() {
	for _, db := range []*sql.DB{r.lease, r.work, r.oracle} {
		if db != nil {
			_ = db.Close()
		}
	}
}

// report calls a doublerun.* function on the oracle connection, again
// until it answers: a report lost would be a measurement lost.
func (r *replica) report(query string, args ...any) int64 {
	var id sql.NullInt64
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.oracle.QueryRowContext(ctx, query, args...).Scan(&id)
		cancel()
		if err == nil {
			return id.Int64
		}
		if attempt == 50 {
			r.log.Error("cannot report", "query", query, "err", err)
			os.Exit(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holder is the backend that holds the driver's lock, read from pg_locks
// on the oracle connection: a bigint advisory key shows as classid (high
// half), objid (low half) and objsubid 1. 0 when nobody holds it.
func (r *replica) holder(key int64) int64 {
	return r.report(`SELECT coalesce((SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1), 0)`, key)
}

// driver opens golang-migrate's postgres driver on one connection of the
// lease endpoint, the way WithInstance does, and returns its lock's key.
func (r *replica) driver(ctx context.Context) (database.Driver, *sql.Conn, int64, error) {
	conn, err := r.lease.Conn(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	cfg := &postgres.Config{}
	d, err := postgres.WithConnection(ctx, conn, cfg)
	if err != nil {
		_ = conn.Close()
		return nil, nil, 0, err
	}
	var dbName, schema string
	if err := r.oracle.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&dbName, &schema); err != nil {
		_ = d.Close()
		return nil, nil, 0, err
	}
	key, err := database.GenerateAdvisoryLockId(dbName, schema, postgres.DefaultMigrationsTable)
	if err != nil {
		_ = d.Close()
		return nil, nil, 0, err
	}
	k, _ := strconv.ParseInt(key, 10, 64)
	return d, conn, k, nil
}

// lockRound takes the driver's lock, does pieces pieces of work under it,
// and unlocks: what a migration run looks like to the lock.
func (r *replica) lockRound(ctx context.Context, pieces int) error {
	d, _, key, err := r.driver(ctx)
	if err != nil {
		return fmt.Errorf("open driver: %w", err)
	}
	defer func() { _ = d.Close() }()
	locked := make(chan error, 1)
	go func() { locked <- d.Lock() }()
	select {
	case err = <-locked:
	case <-ctx.Done():
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	token := r.report(`SELECT doublerun.next_token()`)
	pid := r.holder(key)
	r.log.Info("locked", "token", token, "backend", pid)
	for i := 0; i < pieces && ctx.Err() == nil; i++ {
		piece := r.report(`SELECT doublerun.work_begin($1, $2, $3)`, r.cfg.replica, token, pid)
		sleep(ctx, r.cfg.work)
		r.sideEffect(token)
		r.report(`SELECT doublerun.work_end($1)`, piece)
	}
	if err := d.Unlock(); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	r.log.Info("unlocked", "token", token)
	return nil
}

// sideEffect is the piece's write, in a transaction of its own on the
// work endpoint; unfenced: the driver's lock has no token to check.
func (r *replica) sideEffect(token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := r.work.BeginTx(ctx, nil)
	if err == nil {
		if _, err = tx.ExecContext(ctx, `SELECT doublerun.side_effect($1, $2, false)`, r.cfg.replica, token); err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
	}
	if err != nil {
		r.log.Warn("side-effect write failed", "err", err)
	}
}

// upRound runs migrate up with pieces migrations, each of which sleeps for
// a piece of work and writes; reporting wraps the driver's Run, so a piece
// of leader work is one migration's run.
func (r *replica) upRound(ctx context.Context, pieces int) error {
	d, _, key, err := r.driver(ctx)
	if err != nil {
		return fmt.Errorf("open driver: %w", err)
	}
	fs := fstest.MapFS{}
	for v := 1; v <= pieces; v++ {
		fs[fmt.Sprintf("%d_work.up.sql", v)] = &fstest.MapFile{Data: fmt.Appendf(nil,
			"SELECT pg_sleep(%f);\nCREATE TABLE IF NOT EXISTS migrated (version int PRIMARY KEY, replica text, at timestamptz DEFAULT clock_timestamp());\n"+
				"INSERT INTO migrated (version, replica) VALUES (%d, '{{replica}}');\nSELECT doublerun.side_effect('{{replica}}', {{token}}, false);\n",
			r.cfg.work.Seconds(), v)}
		fs[fmt.Sprintf("%d_work.down.sql", v)] = &fstest.MapFile{Data: []byte("SELECT 1;\n")}
	}
	src, err := iofs.New(fs, ".")
	if err != nil {
		_ = d.Close()
		return err
	}
	w := &reporting{Driver: d, r: r, key: key}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", w)
	if err != nil {
		_ = d.Close()
		return err
	}
	defer func() { _, _ = m.Close() }()
	go func() {
		<-ctx.Done()
		m.GracefulStop <- true
	}()
	err = m.Up()
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// reporting is the driver with each migration's run reported as a piece
// of leader work under the token of its lock.
type reporting struct {
	database.Driver
	r     *replica
	key   int64
	token int64
}

func (w *reporting) Lock() error {
	if err := w.Driver.Lock(); err != nil {
		return err
	}
	w.token = w.r.report(`SELECT doublerun.next_token()`)
	return nil
}

func (w *reporting) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	text := strings.NewReplacer("{{replica}}", w.r.cfg.replica, "{{token}}", strconv.FormatInt(w.token, 10)).Replace(string(body))
	piece := w.r.report(`SELECT doublerun.work_begin($1, $2, $3)`, w.r.cfg.replica, w.token, w.r.holder(w.key))
	defer w.r.report(`SELECT doublerun.work_end($1)`, piece)
	return w.Driver.Run(strings.NewReader(text))
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
