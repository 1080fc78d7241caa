package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/doublerun/doublerun/chaos"
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/report"
)

// matrixRun is `doublerun chaos` across version sets: one stack per set,
// its shard of the cells, and what every set's run gave.
type matrixRun struct {
	e             *env
	cells         []scenarios.Scenario
	out           string
	shard, shards int
	several       bool

	results []report.Cell
	walls   map[string]time.Duration
	planned int
	// ran maps each version set that ran to the one asked for, so that a
	// provider that runs the same servers whatever is asked (native) does
	// not run them twice.
	ran map[string]string
}

// runOn runs the shard of the cells on a stack of the version set set.
func (m *matrixRun) runOn(ctx context.Context, set string) error {
	s, closeStack, err := startStackOn(ctx, m.e, set)
	if err != nil {
		return err
	}
	defer closeStack()
	have := s.Versions().Set
	if m.ran == nil {
		m.ran = map[string]string{}
	}
	if asked, done := m.ran[have]; done {
		fmt.Fprintf(m.e.stdout, "chaos: %s: the %s provider runs %s, which already ran for %s; skipped\n", set, s.Provider(), have, asked)
		return nil
	}
	m.ran[have] = set
	cells := chaos.OnVersions(m.cells, have)
	index := chaos.Shard(cells, m.shard, m.shards)
	picked := make([]scenarios.Scenario, len(index))
	for k, i := range index {
		picked[k] = cells[i]
	}
	m.planned += len(picked)
	dir := m.out
	if dir != "" && m.several {
		dir = filepath.Join(m.out, set)
	}
	shardText := ""
	if m.shards > 1 {
		shardText = fmt.Sprintf(", shard %d/%d of %d", m.shard, m.shards, len(cells))
	}
	fmt.Fprintln(m.e.stdout, versionsLine(s))
	replicas := 0
	if len(picked) > 0 {
		replicas = picked[0].WithDefaults().Replicas
	}
	fmt.Fprintf(m.e.stdout, "chaos: %d cell(s)%s, %d replicas each, reports in %s\n", len(picked), shardText, replicas, orNone(dir))
	begin := time.Now()
	results := chaos.RunMatrix(ctx, picked, scenarios.RunOptions{Stack: s, OutDir: dir, Logger: m.e.log},
		func(done, total int, c report.Cell) {
			fmt.Fprintf(m.e.stdout, "[%d/%d] %s\n", done, total, c.Line())
		})
	wall := time.Since(begin)
	for i := range results {
		results[i].Versions = have
	}
	// As report.json holds them, so that this summary and a merge of
	// this directory agree to the character.
	results = report.Canonical(results)
	m.results = append(m.results, results...)
	m.walls[have] += wall
	if dir == "" {
		return nil
	}
	run := report.Run{Versions: have, Shard: m.shard, Shards: m.shards, Total: len(cells), Wall: wall, Cells: results, Index: index[:len(results)]}
	if err := report.WriteCells(dir, run); err != nil {
		return err
	}
	return report.WriteSummary(dir, results, wall)
}

func writeFile(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func orNone(dir string) string {
	if dir == "" {
		return "no directory (--out is empty)"
	}
	return dir
}

const chaosMergeUsage = `Usage: doublerun chaos merge [--out DIR] DIR...

Joins the runs of ` + "`doublerun chaos --out DIR`" + ` (the shards of one
matrix, ` + "`--shard I/N`" + `, on one or more version sets) into one summary,
the one an unsharded run would have printed, with the shards' total as its
wall time. Reads every cells.json under each DIR and the report.json files
it lists. Prints the summary, and writes it to DIR/summary.md with --out.
Exits 1 if a cell did not match its expectation, 2 on a usage error, and 1
with a line naming it when a shard is missing or there twice.
`

// chaosMerge is `doublerun chaos merge`.
func chaosMerge(e *env, args []string) error {
	fs := newFlagSet("chaos merge", chaosMergeUsage, e)
	out := fs.String("out", "", "directory to write summary.md to; empty for none")
	dirs, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	usage := func(msg string) error { return flagError{msg: "merge: " + msg, usage: fs.fullUsage()} }
	if len(dirs) == 0 {
		return usage("give the directories of the runs to merge, such as reports/shard-1 reports/shard-2")
	}
	for _, d := range dirs {
		fi, err := os.Stat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return usage(fmt.Sprintf("%s does not exist; pass the --out directories of `doublerun chaos` runs", d))
		case err != nil:
			return fmt.Errorf("merge: cannot read %s (%v); pass a directory you can read", d, err)
		case !fi.IsDir():
			return usage(fmt.Sprintf("%s is a file, not a directory; pass the --out directories of `doublerun chaos` runs, which hold cells.json", d))
		}
	}
	dropEmptyOut, err := outDir("out", *out)
	if err != nil {
		return err
	}
	defer dropEmptyOut()
	m, err := report.MergeDirs(dirs...)
	if err != nil {
		return err
	}
	summary := m.Summary()
	fmt.Fprint(e.stdout, summary)
	if *out != "" {
		if err := writeFile(filepath.Join(*out, "summary.md"), summary); err != nil {
			return err
		}
	}
	if err := report.Verdict(m.Cells).Err(); err != nil {
		return fmt.Errorf("%w; see the table above", err)
	}
	return nil
}

// parseInterspersed parses args, whose flags may come before, between or
// after the positional arguments (`merge DIR --out X` as well as `merge
// --out X DIR`), and returns the positional ones. "--" ends the flags.
// --help prints the usage on stdout and returns flag.ErrHelp; a bad flag
// is a flagError.
func parseInterspersed(fs *flagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(fs.e.stdout, fs.fullUsage())
				return nil, err
			}
			return nil, flagError{msg: flagMessage(fs.FlagSet, err), usage: fs.fullUsage()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse stopped at a positional argument, or after "--", which
		// it consumed: then everything left is positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}
