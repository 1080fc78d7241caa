package replica

// Jobs mode (Spec.Jobs): beside its leader work, the replica runs the
// durable job worker of package worker on the pair. Every replica
// enqueues, the leader claims and completes, and each replica tells the
// oracle what it was told had happened on the pair: an enqueue that
// returned (oracle.AckEnqueue), a completion whose transaction committed
// (oracle.AckCompleted, from worker.Config.Completed), and every start of
// a handler (oracle.JobRun). After the run the runner reads the jobs the
// new primary still has (JobKeys), and the oracle's Loss names the
// acknowledged enqueues that are gone and the completed jobs that ran
// again.
//
// A job is known by a key of the replica's own in its args, never by its
// id: a promotion that lost the last enqueues can hand their ids out
// again (a sequence's WAL is lost with them), and a lost job would then
// pass for a survivor.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/worker"
)

// JobKind is the kind of the jobs a replica in jobs mode enqueues.
const JobKind = "doublerun-job"

// jobArgs are a job's args: the key it is acknowledged and found by.
type jobArgs struct {
	Key string `json:"key"`
}

// jobRun is how long a job's handler works: short, so that a leader
// completes many jobs in a run, and long enough that a failover can land
// between a start and its completion.
const jobRun = 20 * time.Millisecond

// jobs is a replica's side of jobs mode.
type jobs struct {
	spec Spec
	rec  workRecorder
	pool *pgxpool.Pool
	log  *slog.Logger
	// keys maps a claimed job's id to its key, from its handler's start
	// to its completion.
	keys sync.Map
	// prefix makes the keys of this process unique across runs on one
	// database.
	prefix string
}

func newJobs(spec Spec, rec workRecorder, pool *pgxpool.Pool, log *slog.Logger) *jobs {
	return &jobs{spec: spec, rec: rec, pool: pool, log: log,
		prefix: spec.Replica + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"}
}

// config adds the worker's jobs to cfg.
func (j *jobs) config(cfg worker.Config) worker.Config {
	cfg.Pool = j.pool
	cfg.Handlers = map[string]worker.Handler{JobKind: worker.HandlerFunc(j.handle)}
	cfg.Completed = j.completed
	// A job whose completion a failover lost comes back running: let it
	// be claimed again within the run, as it would be in production after
	// the default 5 min.
	cfg.VisibilityTimeout = max(2*j.spec.TTL, time.Second)
	return cfg
}

// handle tells the oracle of the start, then works. A start it cannot
// tell of fails the attempt, so that every run the oracle does not know
// of is retried and told.
func (j *jobs) handle(ctx context.Context, job *worker.Job) error {
	var a jobArgs
	if err := json.Unmarshal(job.Args, &a); err != nil || a.Key == "" {
		return fmt.Errorf("job %d has no key in its args %s", job.ID, job.Args)
	}
	j.keys.Store(job.ID, a.Key)
	if err := j.rec.JobRun(ctx, a.Key); err != nil {
		return err
	}
	return wait.Sleep(ctx, jobRun)
}

// completed acknowledges each completion that committed.
func (j *jobs) completed(ctx context.Context, ids []int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, id := range ids {
		k, ok := j.keys.LoadAndDelete(id)
		if !ok {
			continue
		}
		if err := j.rec.Ack(ctx, oracle.AckCompleted, k.(string), 0); err != nil {
			j.log.Warn("replica: acknowledge a completion", "job", id, "err", err)
		}
	}
}

// enqueue adds a job every poll interval until ctx ends, and acknowledges
// each whose INSERT returned. One that fails (the primary is down) is
// not acknowledged, and the next is tried at the next tick.
func (j *jobs) enqueue(ctx context.Context) {
	for n := 1; ; n++ {
		key := j.prefix + strconv.Itoa(n)
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := worker.Enqueue(ectx, j.pool, "", worker.NewJob{Kind: JobKind, Args: jobArgs{Key: key}})
		cancel()
		if err == nil {
			actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err = j.rec.Ack(actx, oracle.AckEnqueue, key, 0)
			acancel()
		}
		if err != nil && ctx.Err() == nil {
			j.log.Warn("replica: enqueue", "key", key, "err", err)
		}
		if wait.Sleep(ctx, j.spec.PollInterval) != nil {
			return
		}
	}
}

// JobKeys reads the keys of the jobs db's jobs table holds, done or not:
// oracle.Survivors.Jobs after a failover. A run's database has the table: its replicas migrate it before they start.
func JobKeys(ctx context.Context, db oracle.Rows) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT args->>'key' FROM `+worker.DefaultTable+` WHERE args ? 'key' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read the surviving jobs: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the surviving jobs: %w", err)
	}
	return append([]string{}, keys...), nil
}
