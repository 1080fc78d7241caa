package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/chaos/failover"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

const failoverUsage = `Usage: doublerun failover [--trials N] [--strategy LIST] [--fault LIST] [--topology LIST] [--poll D] [--ttl D] [--out DIR]

Measures how fast each lease fails over: from the instant a fault is
injected into the leader until another lease call returns Leader, over N
trials per cell, and prints a Markdown table of p50, p99, max and n per
topology, strategy and fault (p99 is the nearest rank: with fewer than 100
trials, the worst). Strategies: advisory, advisory-wait, fenced, fenced-wait
by default, or any other of the registry (advisory-unguarded, fenced-epoch).
Faults: KILL_LEADER (SIGKILL of the leader's process),
TERMINATE_LEADER_BACKEND (pg_terminate_backend of its backend),
GRACEFUL_HANDOVER (the leader closes its lease). Topologies: direct
(Postgres) and session (PgBouncer in session pooling); the waiting advisory
lease refuses transaction pooling, so there is no transaction column. All
trials run one at a time on one stack; see package failover.

Prints a line per cell as it finishes. Writes the table to DIR/failover.md
and every trial's figure to DIR/failover.json. Exits 1 if a trial fails, 2
on a usage error, 130 on Ctrl-C (after the table of the cells that ran).
`

// failoverTopologies are the endpoints the failover command measures.
var failoverTopologies = []string{"direct", "session"}

func failoverCommand() command {
	return command{
		name: "failover", summary: "measure each lease's failover latency (p50, p99, max)", usage: failoverUsage,
		run: func(ctx context.Context, e *env, args []string) error {
			fs := newFlagSet("failover", failoverUsage, e)
			trials := fs.Int("trials", 20, "trials per cell, 1 to 1000")
			strategies := fs.String("strategy", strings.Join(failover.Strategies, ","), "comma-separated strategies")
			faults := fs.String("fault", strings.Join(faultNames(failover.Faults), ","), "comma-separated faults")
			topologies := fs.String("topology", strings.Join(failoverTopologies, ","), "comma-separated topologies: direct, session")
			poll := fs.Duration("poll", 100*time.Millisecond, "each replica's poll interval, 1ms to 10s")
			ttl := fs.Duration("ttl", 2*time.Second, "the fenced lease's TTL, 100ms to 1m")
			out := fs.String("out", "reports/failover", "directory for failover.md and failover.json; empty for none")
			if err := parse(fs, args); err != nil {
				return err
			}
			cfg, topos, err := failoverConfig(*trials, *strategies, *faults, *topologies, *poll, *ttl)
			if err != nil {
				return err
			}
			s, done, err := stackFor(ctx, e, "", *out, "")
			if err != nil {
				return err
			}
			defer done()
			db, err := s.CreateDatabase(ctx, "failover_")
			if err != nil {
				return err
			}
			defer func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				_ = s.DropDatabase(dctx, db)
			}()
			cfg.Admin = s.Postgres().WithDatabase(db).DSN
			for _, t := range topos {
				ep := s.Postgres()
				if t == "session" {
					ep = s.Session()
				}
				cfg.Endpoints = append(cfg.Endpoints, failover.Endpoint{Name: t, DSN: ep.WithDatabase(db).DSN})
			}
			total := len(cfg.Endpoints) * len(cfg.Strategies) * len(cfg.Faults)
			fmt.Fprintf(e.stdout, "failover: %d cell(s) × %d trials on %s; poll %s, fenced TTL %s\n",
				total, cfg.Trials, strings.Join(topos, ", "), cfg.Poll, cfg.TTL)
			cfg.Progress = func(done, total int, c failover.Measurement) {
				fmt.Fprintf(e.stdout, "[%d/%d] %s\n", done, total, c.Line())
			}
			begin := time.Now()
			cells, runErr := failover.Measure(ctx, cfg)
			if len(cells) > 0 {
				fmt.Fprintf(e.stdout, "\n%s\n", failover.Table(cells))
				fmt.Fprintf(e.stdout, "%d cell(s) in %s\n", len(cells), time.Since(begin).Round(time.Second))
			}
			if *out != "" && len(cells) > 0 {
				if err := writeFailover(*out, cells); err != nil && runErr == nil {
					runErr = err
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted after %d of %d cells; the table above covers those", len(cells), total)
			}
			return runErr
		},
	}
}

// failoverConfig checks the flags: each bad value is a usage error that
// says what is valid.
func failoverConfig(trials int, strategies, faults, topologies string, poll, ttl time.Duration) (failover.Config, []string, error) {
	cfg := failover.Config{Trials: trials, Poll: poll, TTL: ttl}
	if trials < 1 || trials > 1000 {
		return cfg, nil, usageError{fmt.Sprintf("--trials must be from 1 to 1000, not %d", trials)}
	}
	if poll < time.Millisecond || poll > 10*time.Second {
		return cfg, nil, usageError{fmt.Sprintf("--poll must be from 1ms to 10s, not %s", poll)}
	}
	if ttl < 100*time.Millisecond || ttl > time.Minute {
		return cfg, nil, usageError{fmt.Sprintf("--ttl must be from 100ms to 1m, not %s", ttl)}
	}
	var err error
	if cfg.Strategies, err = list("strategy", strategies, strategy.Check); err != nil {
		return cfg, nil, err
	}
	names, err := list("fault", faults, func(name string) error {
		_, err := failoverFault(name)
		return err
	})
	if err != nil {
		return cfg, nil, err
	}
	for _, name := range names {
		f, _ := failoverFault(name)
		cfg.Faults = append(cfg.Faults, f)
	}
	topos, err := list("topology", topologies, func(t string) error {
		for _, ok := range failoverTopologies {
			if t == ok {
				return nil
			}
		}
		return fmt.Errorf("unknown topology %q; valid: %s (the waiting advisory lease refuses transaction pooling)", t, strings.Join(failoverTopologies, ", "))
	})
	return cfg, topos, err
}

// list splits a comma-separated flag value, drops repeats and blanks, and
// checks each item; an empty list is a usage error too.
func list(flagName, value string, check func(string) error) ([]string, error) {
	var out []string
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if err := check(item); err != nil {
			return nil, usageError{fmt.Sprintf("--%s: %v", flagName, err)}
		}
		dup := false
		for _, o := range out {
			dup = dup || o == item
		}
		if !dup {
			out = append(out, item)
		}
	}
	if len(out) == 0 {
		return nil, usageError{fmt.Sprintf("--%s is empty; leave it out for all", flagName)}
	}
	return out, nil
}

// failoverFault is the fault of the catalog called name when a trial
// injects it; the error lists those it does.
func failoverFault(name string) (fault.Fault, error) {
	if f, ok := fault.Lookup(name); ok && slices.Contains(failover.Faults, f) {
		return f, nil
	}
	return nil, fmt.Errorf("unknown fault %q; valid: %s", name, strings.Join(faultNames(failover.Faults), ", "))
}

// faultNames are the names of faults, in order.
func faultNames(faults []fault.Fault) []string {
	names := make([]string, len(faults))
	for i, f := range faults {
		names[i] = f.Name()
	}
	return names
}

// writeFailover writes the table and the raw figures under dir.
func writeFailover(dir string, cells []failover.Measurement) error {
	data, err := json.MarshalIndent(cells, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "failover.md"), []byte(failover.Table(cells)), 0o644),
		os.WriteFile(filepath.Join(dir, "failover.json"), append(data, '\n'), 0o644),
	)
}
