package pgbouncer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
)

// execModes are pgx's query exec modes, in the order the table shows them.
var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
}

// execLoad runs 3 connections at once, each 200 parameterised queries of
// four shapes, through ep in mode, and returns how many failed and the
// SQLSTATEs seen.
func execLoad(ctx context.Context, t *testing.T, dsn string, mode pgx.QueryExecMode) (failed int, codes []string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = mode
	queries := []string{"SELECT $1::int + 1", "SELECT $1::int * 2", "SELECT $1::int - 3", "SELECT $1::int / 4"}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 3 {
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		wg.Go(func() {
			defer c.Close(ctx)
			for i := range 200 {
				var n int
				err := c.QueryRow(ctx, queries[i%len(queries)], i).Scan(&n)
				if err == nil {
					continue
				}
				code := "other"
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) {
					code = pgErr.Code
				}
				mu.Lock()
				failed++
				if !slices.Contains(codes, code) {
					codes = append(codes, code)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed, codes
}

// TestExecModeTable measures every pgx exec mode through transaction
// pooling, with pools of one and two server connections, with and (on
// PgBouncer 1.21 and later) without protocol-level prepared statements
// (max_prepared_statements 0 and 100, and the bouncer's default), and
// checks that the mode pgbouncer.ExecMode picks for each bouncer failed no
// query. `go test -run TestExecModeTable -v ./pgbouncer/` prints the table
// (package doc, "Exec modes by version").
func TestExecModeTable(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	version := db.Transaction.Version
	ctx := context.Background()
	type column struct {
		name     string
		pool     int
		prepared int // as pgbouncer.Config takes it
	}
	var columns []column
	for _, pool := range []int{1, 2} {
		columns = append(columns, column{fmt.Sprintf("pool %d, default", pool), pool, 0})
		if pgbouncer.SupportsPreparedStatements(version) {
			columns = append(columns,
				column{fmt.Sprintf("pool %d, mps=0", pool), pool, -1},
				column{fmt.Sprintf("pool %d, mps=100", pool), pool, 100})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pgx exec modes through PgBouncer %s transaction pooling (Postgres %s), failed of 600 queries:\n", version, db.Transaction.PostgresVersion)
	fmt.Fprintf(&b, "%-16s", "mode")
	for _, c := range columns {
		fmt.Fprintf(&b, "| %-22s", c.name)
	}
	b.WriteString("\n")
	results := map[pgx.QueryExecMode][]string{}
	var picks []string
	for _, c := range columns {
		ep := db.AddBouncer(t, pgbouncer.Config{PoolMode: pgbouncer.PoolTransaction, DefaultPoolSize: c.pool, MaxPreparedStatements: c.prepared})
		pick := ep.ExecMode()
		picks = append(picks, fmt.Sprintf("%s (max_prepared_statements read back: %d): ExecMode picks %s", c.name, ep.MaxPreparedStatements, pick))
		for _, mode := range execModes {
			failed, codes := execLoad(ctx, t, ep.DSN, mode)
			cell := fmt.Sprint(failed)
			if failed > 0 {
				cell += " " + strings.Join(codes, ",")
			}
			if mode == pick {
				cell += " *"
				require.Zero(t, failed, "%s: the mode ExecMode picks, %s, failed %d queries (%v)", c.name, mode, failed, codes)
			}
			results[mode] = append(results[mode], cell)
		}
	}
	for _, mode := range execModes {
		fmt.Fprintf(&b, "%-16s", mode)
		for _, cell := range results[mode] {
			fmt.Fprintf(&b, "| %-22s", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("* the mode pgbouncer.ExecMode picks\n")
	b.WriteString(strings.Join(picks, "\n"))
	t.Log("\n" + b.String())
}
