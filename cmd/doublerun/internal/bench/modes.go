package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/worker"
)

// history drains a whole backlog with one worker and reports jobs/s and
// jobs per CPU-second for every segment of the given size, so that a cost
// that grows as completed jobs pile up shows as a falling rate.
func (b *bench) history(ctx context.Context, out io.Writer, c cell, segment int, limit time.Duration) error {
	r, cleanup, err := b.prepare(ctx, c)
	if err != nil {
		return err
	}
	defer cleanup()
	w, err := worker.New(r.config)
	if err != nil {
		return err
	}
	defer w.Close()

	fmt.Fprintf(out, "\nHistory: %s, drained in segments of %d jobs (load %.2f at the start)\n\n", c, segment, loadavg())
	fmt.Fprintln(out, "| completed jobs | jobs/s | jobs per CPU-second | load |")
	fmt.Fprintln(out, "|---|---|---|---|")
	prevCPU, err := b.procs.read()
	if err != nil {
		return err
	}
	prevAt, prevJobs := time.Now(), int64(0)
	deadline := prevAt.Add(limit)
	if err := w.Start(ctx); err != nil {
		return err
	}
	for next := int64(segment); next <= int64(c.Backlog); next += int64(segment) {
		if err := waitDone(ctx, w, next, deadline); err != nil {
			return err
		}
		jobs := w.Stats().JobsCompleted
		now := time.Now()
		cur, err := b.procs.read()
		if err != nil {
			return err
		}
		s := sample{Jobs: jobs - prevJobs, Elapsed: now.Sub(prevAt), CPU: cur.sub(prevCPU)}
		fmt.Fprintf(out, "| %d | %.0f | %.0f | %.2f |\n", jobs, s.jobsPerSecond(), s.jobsPerCPUSecond(), loadavg())
		if jobs < next {
			fmt.Fprintf(out, "\n(stopped after %s)\n", limit)
			break
		}
		prevCPU, prevAt, prevJobs = cur, now, jobs
	}
	return nil
}

// explain shows the claim's plan after a run has made history: it runs the
// cell for the window, stops the worker, and starts a second one whose
// connections load auto_explain and send every plan back as a notice. The
// first claims' plans, with ANALYZE and BUFFERS, are printed. The worker's
// SQL is not copied here, so the same command explains any version of it.
func (b *bench) explain(ctx context.Context, out io.Writer, c cell, plans int) error {
	r, cleanup, err := b.prepare(ctx, c)
	if err != nil {
		return err
	}
	defer cleanup()
	config := r.config
	w, err := worker.New(config)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	if err := waitDone(ctx, w, int64(c.Backlog), time.Now().Add(b.window)); err != nil {
		return err
	}
	w.Close()
	done := w.Stats().JobsCompleted

	var mu sync.Mutex
	var got []string
	enough := make(chan struct{})
	pool, err := newPool(ctx, r.ep, func(cfg *pgxpool.Config) {
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			for _, sql := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
				`SET auto_explain.log_analyze = on`, `SET auto_explain.log_buffers = on`, `SET auto_explain.log_level = notice`} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					return fmt.Errorf("%s: %w", sql, err)
				}
			}
			return nil
		}
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if !strings.Contains(n.Message, "SKIP LOCKED") {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if got = append(got, n.Message); len(got) == plans {
				close(enough)
			}
		}
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	config.DSN, config.Pool = "", pool
	w2, err := worker.New(config)
	if err != nil {
		return err
	}
	defer w2.Close()
	if err := w2.Start(ctx); err != nil {
		return err
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	w2.Close()
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "\nThe claim's plan: %s, after %d jobs completed in %s\n", c, done, b.window)
	for i, p := range got {
		if i == plans {
			break
		}
		fmt.Fprintf(out, "\n-- claim %d of the next worker --\n%s\n", i+1, p)
	}
	return nil
}
