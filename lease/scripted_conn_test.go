package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// scriptedConn is a conn that plays a script of statements. It stands in
// for pgxmock (see README, Dependencies): pgxmock v4.9.0, the newest
// release, does not compile against pgx v5.12 (pgx.Rows gained TypeMap and
// pgx.BatchResults gained Tx), so this small fake of the unexported conn
// interface plays its part. Like pgxmock it matches each statement's SQL
// and arguments exactly and in order, can delay an answer while honouring
// ctx, and reports unmet expectations.
type scriptedConn struct {
	mu     sync.Mutex
	steps  []*scriptStep
	next   int
	closed bool
	errs   []error
}

type scriptStep struct {
	sql   string
	args  []any
	row   []any
	err   error
	delay time.Duration
}

func (s *scriptStep) WillDelayFor(d time.Duration) *scriptStep { s.delay = d; return s }

func (c *scriptedConn) expect(sql string, args ...any) *scriptStep {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &scriptStep{sql: sql, args: args}
	c.steps = append(c.steps, st)
	return st
}

// ExpectQuery, WithArgs, WillReturnRow and WillReturnError mirror
// pgxmock's names so the tests read the same.
func (c *scriptedConn) ExpectQuery(sql string) *scriptStep { return c.expect(sql) }
func (s *scriptStep) WithArgs(args ...any) *scriptStep     { s.args = args; return s }
func (s *scriptStep) WillReturnRow(values ...any) *scriptStep {
	s.row = values
	return s
}
func (s *scriptStep) WillReturnError(err error) *scriptStep { s.err = err; return s }

func (c *scriptedConn) play(ctx context.Context, sql string, args []any) ([]any, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("scripted: conn closed")
	}
	if c.next >= len(c.steps) {
		err := fmt.Errorf("scripted: unexpected statement %q", sql)
		c.errs = append(c.errs, err)
		c.mu.Unlock()
		return nil, err
	}
	st := c.steps[c.next]
	c.next++
	if st.sql != sql || !reflect.DeepEqual(st.args, args) {
		err := fmt.Errorf("scripted: got %q %v, want %q %v", sql, args, st.sql, st.args)
		c.errs = append(c.errs, err)
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Unlock()
	if st.delay > 0 {
		select {
		case <-time.After(st.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return st.row, st.err
}

func (c *scriptedConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	row, err := c.play(ctx, sql, args)
	return scriptedRow{values: row, err: err}
}

func (c *scriptedConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	_, err := c.play(ctx, sql, args)
	return pgconn.CommandTag{}, err
}

func (c *scriptedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *scriptedConn) Close(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// met reports statements not played and statements that did not match.
func (c *scriptedConn) met() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := c.errs
	for _, st := range c.steps[c.next:] {
		errs = append(errs, fmt.Errorf("scripted: statement %q %v never ran", st.sql, st.args))
	}
	return errors.Join(errs...)
}

type scriptedRow struct {
	values []any
	err    error
}

func (r scriptedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.values) {
		return fmt.Errorf("scripted: scan %d values into %d destinations", len(r.values), len(dest))
	}
	for i, v := range r.values {
		if dest[i] == nil {
			continue // pgx skips a nil destination
		}
		reflect.ValueOf(dest[i]).Elem().Set(reflect.ValueOf(v))
	}
	return nil
}
