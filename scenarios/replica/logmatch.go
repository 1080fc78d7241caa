package replica

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
)

// LogMatcher turns the lines a replica command prints into oracle records,
// each as soon as it is read: log mode. Its timestamps are the runner's
// receipt of each line, on the oracle's clock; lags are how long each
// record took from the line's receipt to the record's return.
type LogMatcher struct {
	became, lost, started, ended *regexp.Regexp
	leaderIsWork                 bool
	rec                          *oracle.Recorder
	tokens                       *atomic.Int64

	mu      sync.Mutex
	lines   int
	matched int
	lags    []time.Duration
	token   int64
	open    int64 // the id of the piece of work begun and not ended, 0 for none
}

// NewLogMatcher matches lines against p (Command.Validate compiled every
// pattern), records through rec, which it closes on Close, and takes each
// new leadership's token from tokens, one counter for the run.
func NewLogMatcher(p *LogPatterns, rec *oracle.Recorder, tokens *atomic.Int64) *LogMatcher {
	compile := func(re string) *regexp.Regexp {
		if re == "" {
			return nil
		}
		return regexp.MustCompile(re) // Validate compiled it
	}
	return &LogMatcher{
		became: compile(p.BecameLeader), lost: compile(p.LostLeadership),
		started: compile(p.WorkStarted), ended: compile(p.WorkEnded),
		leaderIsWork: p.WorkStarted == "",
		rec:          rec, tokens: tokens,
	}
}

// Read copies every line from src to log and records its matches, until
// src ends.
func (m *LogMatcher) Read(ctx context.Context, src io.Reader, log io.Writer) {
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		got := time.Now()
		line := sc.Text()
		_, _ = fmt.Fprintln(log, line)
		m.line(ctx, line, got)
	}
}

// line records what one line says, in the order a line could say several
// things: leadership before work begins, work ends before leadership is
// lost.
func (m *LogMatcher) line(ctx context.Context, line string, got time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lines++
	hit := false
	match := func(re *regexp.Regexp) bool {
		ok := re != nil && re.MatchString(line)
		hit = hit || ok
		return ok
	}
	if match(m.became) {
		m.lead(ctx)
		if m.leaderIsWork {
			m.begin(ctx)
		}
	}
	if match(m.started) {
		if m.token == 0 {
			m.lead(ctx)
		}
		m.begin(ctx)
	}
	if match(m.ended) {
		m.end(ctx)
	}
	if match(m.lost) {
		m.end(ctx)
		m.token = 0
	}
	if hit {
		m.matched++
		m.lags = append(m.lags, time.Since(got))
	}
}

func (m *LogMatcher) lead(ctx context.Context) {
	m.token = m.tokens.Add(1)
	_ = m.rec.Grant(ctx, m.token)
}

func (m *LogMatcher) begin(ctx context.Context) {
	m.end(ctx) // a piece begun twice: the first ended at the second
	if id, err := m.rec.Begin(ctx, m.token, 0); err == nil {
		m.open = id
	}
}

func (m *LogMatcher) end(ctx context.Context) {
	if m.open != 0 {
		_ = m.rec.End(ctx, m.open)
		m.open = 0
	}
}

// Counts is how many lines were read, and how many matched a pattern.
func (m *LogMatcher) Counts() (lines, matched int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines, m.matched
}

// ReceiptLags is, per matching line, how long its record took from the
// line's receipt to the record's return.
func (m *LogMatcher) ReceiptLags() []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.lags)
}

// Close closes the matcher's recorder, once no more lines come.
func (m *LogMatcher) Close() { m.rec.Close() }
