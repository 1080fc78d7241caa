package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/doublerun/doublerun/chaos"
)

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
it lists. Prints the summary, and writes it to DIR/summary.md with --out,
and beside it summary.html, whose cells link to their reports under
DIR/<version set>/ (copy each shard's directory there to follow them).
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
	m, err := chaos.MergeDirs(dirs...)
	if err != nil {
		return err
	}
	summary := m.Summary()
	fmt.Fprint(e.stdout, summary)
	if *out != "" {
		if err := writeFile(filepath.Join(*out, "summary.md"), summary); err != nil {
			return err
		}
		if err := m.WriteSummaryHTML(*out); err != nil {
			return err
		}
	}
	if err := m.Verdict().Err(); err != nil {
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
