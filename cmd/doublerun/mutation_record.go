package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/doublerun/doublerun/mutation"
)

// mutationRecord is `doublerun mutation record`: the record of a commit
// from a gremlins dry run of each gated package, in a worktree of that
// commit, on one shared stack. A dry run runs each package's tests once,
// with coverage, and lists every mutant RUNNABLE (a test runs its line) or
// NOT COVERED; no mutant runs, so it takes minutes where make mutation
// takes most of an hour. The record says so of every mutant (run
// "dry-run"): the per-submission gate then fails a mutant it has covered
// that is NOT COVERED or LIVED, and each passing gate run with
// --write-record, or make mutation, replaces those statuses with what the
// mutants did.
func mutationRecord(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mutation record", mutationUsage, e)
	recordFile := fs.String("record", "testdata/mutation/record.json", "the record to write, relative to the repository root unless given; its cost of a mutant is kept")
	at := fs.String("at", "", "the commit to record; default: the base the record names")
	shards := fs.Int("shards", recordShards, "how many shards the record splits each package's lines into")
	out := fs.String("out", "out/mutation-record", "directory for gremlins' dry-run reports")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkShards(*shards); err != nil {
		return err
	}
	root, err := repoRoot(fs, "mutation record", fileFlag{"record", recordFile})
	if err != nil {
		return err
	}
	old := oldCosts(*recordFile)
	commit := *at
	if commit == "" {
		commit = old.Base
	}
	if commit == "" {
		return usageError{"--at: no commit given and " + *recordFile + " names none"}
	}
	if commit, err = gitOutput(ctx, root, "rev-parse", "--verify", commit+"^{commit}"); err != nil {
		return fmt.Errorf("--at: %v", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	tree, err := os.MkdirTemp("", "doublerun-record-")
	if err != nil {
		return err
	}
	_ = os.Chmod(tree, 0o755)
	if _, err := gitOutput(ctx, root, "worktree", "add", "--detach", tree, commit); err != nil {
		os.RemoveAll(tree)
		return err
	}
	defer func() {
		_, _ = gitOutput(context.WithoutCancel(ctx), root, "worktree", "remove", "--force", tree)
		os.RemoveAll(tree)
	}()
	g, err := newGateRun(ctx, e, tree)
	if err != nil {
		return err
	}
	defer g.close()
	var prs []mutation.PackageReport
	for _, p := range gatedPackages {
		start := time.Now()
		r, err := mutation.Unleash(ctx, mutation.UnleashOptions{Gremlins: g.gremlins, Root: tree, Package: p,
			Config: filepath.Join(tree, ".gremlins.yaml"), DryRun: true,
			Output: filepath.Join(outDir, strings.ReplaceAll(p, "/", "-")+".json"), Env: g.env, TempDir: g.tmp})
		if err != nil {
			return err
		}
		s := r.Count()
		fmt.Fprintf(e.stderr, "mutation: ./%s at %s: %d runnable, %d not covered, %d not viable (dry run, %s)\n",
			p, commit[:12], s.Runnable, s.NotCovered, s.NotViable, time.Since(start).Round(time.Second))
		prs = append(prs, mutation.PackageReport{Name: p, Report: r})
	}
	rec, err := mutation.RecordFrom(tree, commit, *shards, prs, mutation.KindDryRun)
	if err != nil {
		return err
	}
	for name, p := range rec.Packages {
		p.SecondsPerMutant = old.Packages[name].SecondsPerMutant
		rec.Packages[name] = p
	}
	if err := rec.Write(*recordFile); err != nil {
		return fmt.Errorf("write the record: %w", err)
	}
	fmt.Fprintf(e.stdout, "record %s: base %s, every mutant's coverage from a dry run; commit it\n", *recordFile, commit[:12])
	return nil
}

// oldCosts reads what a record file, in any format this command has
// written, says of the base and each package's cost of a mutant: a dry
// run measures no cost, so it keeps the last one measured. Nothing when
// the file cannot be read.
func oldCosts(file string) (old struct {
	Base     string `json:"base"`
	Packages map[string]struct {
		SecondsPerMutant float64 `json:"seconds_per_mutant"`
	} `json:"packages"`
}) {
	data, err := os.ReadFile(file)
	if err == nil {
		_ = json.Unmarshal(data, &old)
	}
	return old
}
