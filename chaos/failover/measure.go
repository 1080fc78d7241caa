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

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Endpoint is where a cell's leases connect: Postgres itself or PgBouncer
// in session pooling, pointed at a database of the run's own.
type Endpoint struct {
	Name string
	DSN  string
}

// Config configures Measure. Zero fields take the defaults in their
// comments.
type Config struct {
	// Admin is a direct DSN to the database every endpoint points at: the
	// fenced lease's table is created there, and a leader's backend is
	// terminated from there. Required.
	Admin string
	// Endpoints are measured in order. Required.
	Endpoints []Endpoint
	// Strategies names strategies of the registry (package
	// scenarios/strategy), in order; default all of Strategies.
	Strategies []string
	// Faults are faults of the catalog (package scenarios/fault) that a
	// trial injects, in order; default all of Faults.
	Faults []fault.Fault
	// Trials per cell; default 20.
	Trials int
	// Poll is a replica's pace; default 100ms.
	Poll time.Duration
	// TTL is the fenced lease's; default 2s.
	TTL time.Duration
	// Progress, if set, sees each cell's measurement as it is done.
	Progress func(done, total int, m Measurement)
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
		if err := strategy.Check(s); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range c.Faults {
		if !slices.Contains(Faults, f) {
			errs = append(errs, notInjected(f))
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

// Measurement is what one cell of the table (an endpoint, a strategy and
// a fault) measured: every trial's failover.
type Measurement struct {
	Endpoint string          `json:"endpoint"`
	Strategy string          `json:"strategy"`
	Fault    string          `json:"fault"`
	Samples  []time.Duration `json:"samples_ns"`
	Stats    Stats           `json:"stats"`
	// Woken counts the trials whose new leader came from a call already
	// under way at the fault (TrialResult.Woken).
	Woken int `json:"woken"`
}

// Stats sums up a measurement's samples.
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

// Measure measures every cell of cfg, one trial at a time (a trial's
// timing must not compete with another's), and returns the measurements
// done. It stops at the first trial that fails, or when ctx ends,
// returning the measurements finished before with the error.
func Measure(ctx context.Context, cfg Config) ([]Measurement, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, cfg.Admin)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	for _, name := range cfg.Strategies {
		// Each strategy's tables, before any trial: as a run sets up its
		// strategy before any replica starts.
		if st, _ := strategy.Lookup(name); st.Setup != nil {
			if err := st.Setup(ctx, admin); err != nil {
				return nil, fmt.Errorf("strategy %s setup: %w", name, err)
			}
		}
	}
	total := len(cfg.Endpoints) * len(cfg.Strategies) * len(cfg.Faults)
	var cells []Measurement
	key := int32(1000)
	for _, ep := range cfg.Endpoints {
		for _, name := range cfg.Strategies {
			for _, f := range cfg.Faults {
				c := Measurement{Endpoint: ep.Name, Strategy: name, Fault: f.Name()}
				for i := range cfg.Trials {
					key++
					spec := Spec{Strategy: name, DSN: ep.DSN, Key: key, TTL: cfg.TTL, Poll: cfg.Poll,
						Name: fmt.Sprintf("failover-%s-%s-%s-%d", ep.Name, name, strings.ToLower(f.Name()), i)}
					o, err := Trial(ctx, admin, spec, f)
					if err != nil {
						if ctx.Err() != nil {
							return cells, ctx.Err()
						}
						return cells, fmt.Errorf("%s/%s/%s trial %d: %w", ep.Name, name, f.Name(), i+1, err)
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

// Line is a measurement's progress line.
func (c Measurement) Line() string {
	s := c.Stats
	return fmt.Sprintf("%-8s %-14s %-25s p50 %8s  p99 %8s  max %8s  n %d", c.Endpoint, c.Strategy, c.Fault, Ms(s.P50), Ms(s.P99), Ms(s.Max), s.N)
}

// Table renders measurements as a Markdown table.
func Table(cells []Measurement) string {
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
