package failover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doublerun/doublerun/lease"
)

// Endpoint is where a cell's leases connect: Postgres itself or PgBouncer
// in session pooling, pointed at a database of the run's own.
type Endpoint struct {
	Name string
	DSN  string
}

// Config configures Run. Zero fields take the defaults in their comments.
type Config struct {
	// Admin is a direct DSN to the database every endpoint points at: the
	// fenced lease's table is created there, and a leader's backend is
	// terminated from there. Required.
	Admin string
	// Endpoints are measured in order. Required.
	Endpoints []Endpoint
	// Strategies, in order; default all of Strategies.
	Strategies []string
	// Faults, in order; default all of Faults.
	Faults []string
	// Trials per cell; default 20.
	Trials int
	// Poll is a replica's pace; default 100ms.
	Poll time.Duration
	// TTL is the fenced lease's; default 2s.
	TTL time.Duration
	// Progress, if set, sees each cell as it is done.
	Progress func(done, total int, r Result)
}

func (c Config) withDefaults() Config {
	if len(c.Strategies) == 0 {
		c.Strategies = Strategies
	}
	if len(c.Faults) == 0 {
		c.Faults = Faults
	}
	c.Trials = cmp.Or(c.Trials, 20)
	c.Poll = cmp.Or(c.Poll, 100*time.Millisecond)
	c.TTL = cmp.Or(c.TTL, 2*time.Second)
	return c
}

// Validate says what is wrong with c, naming the valid choices.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Admin == "" {
		errs = append(errs, errors.New("no admin DSN"))
	}
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("no endpoint to measure"))
	}
	for _, s := range c.Strategies {
		if err := CheckStrategy(s); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range c.Faults {
		if err := CheckFault(f); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Trials < 1 {
		errs = append(errs, fmt.Errorf("trials %d: need at least 1", c.Trials))
	}
	if c.Poll <= 0 || c.TTL <= 0 {
		errs = append(errs, fmt.Errorf("poll %s and TTL %s must be positive", c.Poll, c.TTL))
	}
	return errors.Join(errs...)
}

// Result is what one cell of the table (an endpoint, a strategy and a
// fault) measured: every trial's failover.
type Result struct {
	Endpoint string          `json:"endpoint"`
	Strategy string          `json:"strategy"`
	Fault    string          `json:"fault"`
	Samples  []time.Duration `json:"samples_ns"`
	Stats    Stats           `json:"stats"`
	// Woken counts the trials whose new leader came from a call already
	// under way at the fault (Outcome.Woken).
	Woken int `json:"woken"`
}

// Stats sums up a result's samples.
type Stats struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// Summarize computes the stats of samples: nearest-rank percentiles, so
// with fewer than 100 samples p99 is the largest.
func Summarize(samples []time.Duration) Stats {
	sorted := slices.Sorted(slices.Values(samples))
	if len(sorted) == 0 {
		return Stats{}
	}
	return Stats{N: len(sorted), P50: Percentile(sorted, 50), P99: Percentile(sorted, 99), Max: sorted[len(sorted)-1]}
}

// Percentile is the nearest-rank p-th percentile of sorted samples; 0 for
// none.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100 // nearest rank
	return sorted[max(i, 1)-1]
}

// Run measures every cell of cfg, one trial at a time (a trial's timing
// must not compete with another's), and returns the results done. It stops
// at the first trial that fails, or when ctx ends, returning the results
// finished before with the error.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, cfg.Admin)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if err := lease.MigrateFenced(ctx, admin, ""); err != nil {
		return nil, err
	}
	total := len(cfg.Endpoints) * len(cfg.Strategies) * len(cfg.Faults)
	var cells []Result
	key := int32(1000)
	for _, ep := range cfg.Endpoints {
		for _, strategy := range cfg.Strategies {
			for _, fault := range cfg.Faults {
				c := Result{Endpoint: ep.Name, Strategy: strategy, Fault: fault}
				for i := range cfg.Trials {
					key++
					spec := Spec{Strategy: strategy, DSN: ep.DSN, Key: key, TTL: cfg.TTL, Poll: cfg.Poll,
						Name: fmt.Sprintf("failover-%s-%s-%s-%d", ep.Name, strategy, strings.ToLower(fault), i)}
					o, err := Trial(ctx, admin, spec, fault)
					if err != nil {
						if ctx.Err() != nil {
							return cells, ctx.Err()
						}
						return cells, fmt.Errorf("%s/%s/%s trial %d: %w", ep.Name, strategy, fault, i+1, err)
					}
					c.Samples = append(c.Samples, o.Latency)
					if o.Woken {
						c.Woken++
					}
				}
				c.Stats = Summarize(c.Samples)
				cells = append(cells, c)
				if cfg.Progress != nil {
					cfg.Progress(len(cells), total, c)
				}
			}
		}
	}
	return cells, nil
}

// Line is a result's progress line.
func (c Result) Line() string {
	s := c.Stats
	return fmt.Sprintf("%-8s %-14s %-25s p50 %8s  p99 %8s  max %8s  n %d", c.Endpoint, c.Strategy, c.Fault, Ms(s.P50), Ms(s.P99), Ms(s.Max), s.N)
}

// Table renders results as a Markdown table.
func Table(cells []Result) string {
	var b strings.Builder
	b.WriteString("| endpoint | strategy | fault | p50 | p99 | max | n |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, c := range cells {
		s := c.Stats
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d |\n", c.Endpoint, c.Strategy, c.Fault, Ms(s.P50), Ms(s.P99), Ms(s.Max), s.N)
	}
	return b.String()
}

// Ms formats d in milliseconds to a tenth, with a thousands separator
// above 1,000 ms: "3.2 ms", "1,962.4 ms".
func Ms(d time.Duration) string {
	tenths := d.Round(100*time.Microsecond) / (100 * time.Microsecond)
	whole, frac := int64(tenths/10), int64(tenths%10)
	digits := fmt.Sprint(whole)
	for i := len(digits) - 3; i > 0; i -= 3 {
		digits = digits[:i] + "," + digits[i:]
	}
	return fmt.Sprintf("%s.%d ms", digits, frac)
}
