package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// connectTimeout bounds one connection's login to the stack's servers. A
// server that is down refuses at once; the timeout is for one that is up
// and slow. It was 2 s, and beside two CPU hogs and two more test
// binaries (load average 33) logins took longer: the lease package's
// attach to make test's shared stack and a stack's version read failed
// on it, with the servers up.
const connectTimeout = 10 * time.Second

// connectOnce opens one connection to dsn in the simple protocol, which
// any server answers, bounded by connectTimeout.
func connectOnce(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = connectTimeout
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

// execOn runs each statement of sqls, in turn, on one connection to dsn.
func execOn(ctx context.Context, dsn string, sqls ...string) error {
	conn, err := connectOnce(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range sqls {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// queryOn scans the one value sql returns on dsn into dst.
func queryOn(ctx context.Context, dsn, sql string, dst any, args ...any) error {
	conn, err := connectOnce(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// pollUntil calls try every interval until it returns nil, and returns
// its last error when ctx ends first.
func pollUntil(ctx context.Context, interval time.Duration, try func(context.Context) error) error {
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
