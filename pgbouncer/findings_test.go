package pgbouncer_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// envFindings runs the measurements of the package documentation's
// "Findings by version": each takes its own stack and up to a minute.
const envFindings = "DOUBLERUN_MEASURE_FINDINGS"

func measuring(t *testing.T) {
	t.Helper()
	if os.Getenv(envFindings) != "1" {
		t.Skipf("a measurement of the package documentation; set %s=1 to run it", envFindings)
	}
}

// query runs SELECT 1 on a fresh connection to dsn within timeout, as a
// new client of the pool would.
func query(ctx context.Context, dsn string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// TestMeasurePoolRefusalAfterPostgresRestart measures how long the
// transaction pool refuses clients after a Postgres restart during which a
// client asked for a server connection: from the moment Postgres answers
// directly again to the first query that succeeds through PgBouncer.
// PgBouncer 1.18 refused for server_login_retry (15 s) after a failed
// login.
func TestMeasurePoolRefusalAfterPostgresRestart(t *testing.T) {
	measuring(t)
	s := stacktest.Own(t)
	ctx := context.Background()
	ep := s.Transaction()
	require.NoError(t, query(ctx, ep.DSN, 5*time.Second))
	require.NoError(t, s.StopPostgres(ctx))
	// A client while Postgres is down: PgBouncer tries to log in and fails.
	down := query(ctx, ep.DSN, 3*time.Second)
	require.Error(t, down)
	require.NoError(t, s.StartPostgres(ctx))
	for query(ctx, s.Postgres().DSN, time.Second) != nil {
		time.Sleep(20 * time.Millisecond)
	}
	up := time.Now()
	var last error
	for time.Since(up) < 40*time.Second {
		if last = query(ctx, ep.DSN, 2*time.Second); last == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, last, "the pool still refused 40s after Postgres was back")
	t.Logf("MEASURED PgBouncer %s: the transaction pool answered %s after Postgres did (during the outage: %v; last refusal: none after)",
		ep.Version, time.Since(up).Round(10*time.Millisecond), firstLine(down))
}

// TestMeasureCancelStorm sends many cancel requests whose clients
// disconnect at once (a context that ends mid-query, as pgx handles it)
// and counts how often the transaction bouncer stopped answering.
// PgBouncer 1.18 crashed so, now and then, under the chaos matrix
// (pgbouncer/pgbouncer#801).
func TestMeasureCancelStorm(t *testing.T) {
	measuring(t)
	s := stacktest.Own(t)
	ctx := context.Background()
	const rounds, clients, each = 10, 8, 25
	crashed := 0
	var seen []string
	for r := range rounds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range clients {
			wg.Go(func() {
				for range each {
					qctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond+time.Duration(r)*time.Millisecond)
					err := func() error {
						c, err := pgx.Connect(ctx, s.Transaction().DSN)
						if err != nil {
							return err
						}
						defer c.Close(ctx)
						_, err = c.Exec(qctx, "SELECT pg_sleep(0.05)")
						return err
					}()
					cancel()
					if err != nil && !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
						mu.Lock()
						if l := firstLine(err); len(seen) < 5 && !slices.Contains(seen, l) {
							seen = append(seen, l)
						}
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if query(ctx, s.Transaction().DSN, 5*time.Second) != nil {
			crashed++
			t.Logf("round %d: the transaction bouncer no longer answers; %v", r+1, s.Repair(ctx))
		}
	}
	t.Logf("MEASURED PgBouncer %s: %d of %d rounds (%d cancelled queries each) left the bouncer not answering; other errors seen: %v",
		s.Transaction().Version, crashed, rounds, clients*each, seen)
}

func firstLine(err error) string {
	if err == nil {
		return "none"
	}
	l, _, _ := strings.Cut(err.Error(), "\n")
	return l
}
