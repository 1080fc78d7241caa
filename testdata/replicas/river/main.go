// Command river is a doublerun replica built on River
// (github.com/riverqueue/river) and its pgx v5 driver, used through the
// library's public API as a service that runs River's client does.
//
// River elects one leader among its clients to run its maintenance
// services (periodic jobs, the job rescuer, the pruner): a TTL lease in
// the river_leader table, renewed by the leader and taken by another
// client once it has expired, with no fencing token. This program starts
// a client that works one queue, and every poll interval reads River's
// own state, its river_leader row: while the row names this client's ID
// and has not expired, the client leads, and the program does a piece of
// leader work (DOUBLERUN_WORK_MS, with a side-effect write through the
// work endpoint) as River's periodic jobs would.
//
// Two settings: River's defaults, and with --poll-only the one River
// documents for PgBouncer's transaction pooling (Config.PollOnly: no
// LISTEN, leadership changes noticed by polling).
//
// River's tables are made by rivermigrate on the oracle's direct
// connection at start-up, as a deploy's migration step would.
//
// Build it as a user builds a program (its go.mod is its own):
//
//	cd testdata/replicas/river && go build -o /tmp/doublerun-replicas/river .
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// NoopArgs is the one kind of job the client can work: River elects a
// leader only among clients that work jobs.
type NoopArgs struct{}

// Kind names the job kind.
func (NoopArgs) Kind() string { return "doublerun_noop" }

type noopWorker struct{ river.WorkerDefaults[NoopArgs] }

func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

func main() {
	pollOnly := flag.Bool("poll-only", false, "run the client with PollOnly, River's setting for PgBouncer's transaction pooling")
	flag.Parse()
	cfg, err := readEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", cfg.replica)
	if err := run(ctx, cfg, *pollOnly, log); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
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

// simple is a pool whose statements go unprepared: the program's own
// reports and writes, which must not fail for a reason of River's.
func simple(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pc.ConnConfig.ConnectTimeout = 2 * time.Second
	pc.MaxConns = 2
	return pgxpool.NewWithConfig(ctx, pc)
}

func run(ctx context.Context, cfg config, pollOnly bool, log *slog.Logger) error {
	oracle, err := simple(ctx, cfg.oracleDSN)
	if err != nil {
		return fmt.Errorf("DOUBLERUN_ORACLE_DSN: %w", err)
	}
	defer oracle.Close()
	work, err := simple(ctx, cfg.workDSN)
	if err != nil {
		return fmt.Errorf("DOUBLERUN_WORK_DSN: %w", err)
	}
	defer work.Close()
	if err := migrateRiver(ctx, oracle); err != nil {
		return fmt.Errorf("rivermigrate: %w", err)
	}
	// The client's pool on the lease endpoint with pgx's defaults, as
	// River's documentation starts one.
	pc, err := pgxpool.ParseConfig(cfg.leaseDSN)
	if err != nil {
		return fmt.Errorf("DOUBLERUN_LEASE_DSN: %w", err)
	}
	pc.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("DOUBLERUN_LEASE_DSN: %w", err)
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	id := "doublerun-" + cfg.replica
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:       id,
		Logger:   log,
		PollOnly: pollOnly,
		Queues:   map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:  workers,
	})
	if err != nil {
		return fmt.Errorf("river.NewClient: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("client.Start: %w", err)
	}
	fmt.Printf("replica %s started as River client %s (poll-only %t)\n", cfg.replica, client.ID(), pollOnly)
	r := &reports{db: oracle, log: log}
	var token int64
	leading := false
	for ctx.Err() == nil {
		if r.leads(ctx, id) {
			if !leading {
				leading = true
				token = r.call(`SELECT doublerun.next_token()`)
				fmt.Printf("became leader (token %d)\n", token)
			}
			piece := r.call(`SELECT doublerun.work_begin($1, $2, 0)`, cfg.replica, token)
			sleep(ctx, cfg.work)
			sideEffect(work, cfg.replica, token, log)
			r.call(`SELECT doublerun.work_end($1)`, piece)
		} else if leading {
			leading = false
			fmt.Println("lost leadership")
		}
		sleep(ctx, cfg.poll)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)
	fmt.Printf("replica %s stopped\n", cfg.replica)
	return nil
}

// migrateRiver makes River's tables; replicas start together, so a
// migration another replica is running can fail this one's: again.
func migrateRiver(ctx context.Context, db *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(db), nil)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err == nil || attempt == 20 || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

type reports struct {
	db  *pgxpool.Pool
	log *slog.Logger
}

// leads reads River's river_leader row: this client leads while the row
// names its ID and has not expired.
func (r *reports) leads(ctx context.Context, id string) bool {
	var leader string
	err := r.db.QueryRow(ctx, `SELECT leader_id FROM river_leader WHERE expires_at > now()`).Scan(&leader)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
		r.log.Warn("reading river_leader", "err", err)
	}
	return err == nil && leader == id
}

// call runs a doublerun.* function on the oracle, again until it answers.
func (r *reports) call(query string, args ...any) int64 {
	var v *int64
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.db.QueryRow(ctx, query, args...).Scan(&v)
		cancel()
		if err == nil {
			if v == nil {
				return 0
			}
			return *v
		}
		if attempt == 50 {
			r.log.Error("cannot report", "query", query, "err", err)
			os.Exit(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sideEffect is the piece's write, in a transaction on the work endpoint;
// unfenced: River's leadership has no token to check.
func sideEffect(db *pgxpool.Pool, replica string, token int64, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT doublerun.side_effect($1, $2, false)`, replica, token)
		return err
	})
	if err != nil {
		log.Warn("side-effect write failed", "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
