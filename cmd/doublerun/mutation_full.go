package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/mutation"
)

// mutationFull is `doublerun mutation full` (make mutation): gremlins on
// every mutant of the gated packages, or of one shard of their lines
// (--shard, a nightly job's slice), on one shared stack. Unsharded, it
// gates the reports (the baseline, and every LIVED mutant not listed as
// equivalent) and on a pass can write the record the per-submission gate
// starts from. A shard only writes its reports; `mutation gate --merge`
// joins the shards' and gates the whole.
func mutationFull(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mutation full", mutationUsage, e)
	packages := fs.String("packages", strings.Join(gatedPackages, ","), "the packages to mutate, comma-separated directories")
	shardFlag := fs.String("shard", "", "run only shard K of N of the packages' lines (K from 1), as K/N")
	shards := fs.Int("shards", recordShards, "how many shards the record splits each package's lines into")
	out := fs.String("out", "out/mutation", "directory for gremlins' reports")
	eqFile := fs.String("equivalents", "testdata/mutation/equivalents.json", "listed equivalent mutants, relative to the repository root unless given")
	recordFile := fs.String("record", "testdata/mutation/record.json", "where --write-record writes, relative to the repository root unless given")
	write := fs.Bool("write-record", false, "after a passing run on a clean working tree, write the record")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkShards(*shards); err != nil {
		return err
	}
	k, n := -1, 0
	if *shardFlag != "" {
		var err error
		if k, n, err = parseShard(*shardFlag); err != nil {
			return usageError{"--shard: " + err.Error()}
		}
		if *write {
			return usageError{"--write-record needs every shard; merge the shards' reports with mutation gate --merge --write-record"}
		}
	}
	root, err := repoRoot(fs, "mutation full", fileFlag{"record", recordFile}, fileFlag{"equivalents", eqFile})
	if err != nil {
		return err
	}
	var pkgs []string
	for _, p := range strings.Split(*packages, ",") {
		p = strings.Trim(strings.TrimSpace(p), "./")
		if st, err := os.Stat(filepath.Join(root, p)); p == "" || err != nil || !st.IsDir() {
			return usageError{fmt.Sprintf("--packages: %q is not a package directory of the repository, such as lease", p)}
		}
		pkgs = append(pkgs, p)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	g, err := newGateRun(ctx, e, root)
	if err != nil {
		return err
	}
	defer g.close()
	var prs []mutation.PackageReport
	var reruns [][]mutation.Rerun
	for _, p := range pkgs {
		var sel mutation.Selection
		if k >= 0 {
			if sel, err = mutation.ShardSelection(filepath.Join(root, p), k-1, n); err != nil {
				return err
			}
		}
		file := filepath.Join(outDir, strings.ReplaceAll(p, "/", "-")+".json")
		fmt.Fprintf(e.stderr, "mutation: gremlins on ./%s\n", p)
		start := time.Now()
		var log bytes.Buffer
		r, err := mutation.Unleash(ctx, mutation.UnleashOptions{Gremlins: g.gremlins, Root: root, Package: p,
			Config: filepath.Join(root, ".gremlins.yaml"), Selection: sel, Output: file, Env: g.env, TempDir: g.tmp, Log: &log})
		if errors.Is(err, mutation.ErrNothingSelected) {
			continue
		}
		if err != nil {
			return err
		}
		rr, err := mutation.RerunTimedOut(ctx, p, &r, mutation.GremlinsBound(log.String(), gremlinsCoefficient(root)),
			mutation.RerunOptions{Root: root, Tags: gateTags, Env: g.env, TempDir: g.tmp})
		if err != nil {
			return err
		}
		for _, x := range rr {
			fmt.Fprintf(e.stderr, "mutation: %s\n", x)
		}
		if len(rr) > 0 {
			// The report on disk is what a nightly merge reads: it gets
			// the re-runs' verdicts.
			if err := writeReport(file, r); err != nil {
				return err
			}
		}
		fmt.Fprintf(e.stderr, "mutation: ./%s done in %s; report %s\n", p, time.Since(start).Round(time.Second), file)
		prs = append(prs, mutation.PackageReport{Name: p, Report: r})
		reruns = append(reruns, rr)
	}
	if k >= 0 {
		fmt.Fprintf(e.stdout, "shard %d/%d: reports in %s; join every shard's with doublerun mutation gate --merge\n", k, n, outDir)
		return nil
	}
	eq, err := mutation.ReadEquivalents(*eqFile)
	if err != nil {
		return err
	}
	eq, stale := eq.Locate(root)
	// Every mutant is compared with the record's, as in the gate of a
	// submission; a first run, with no record, fails only on what lives.
	rec, err := mutation.ReadRecord(*recordFile)
	known := err == nil
	if !known {
		fmt.Fprintf(e.stderr, "mutation: no record to compare with (%v): every LIVED mutant fails, nothing else can\n", err)
		rec = mutation.Record{Shards: *shards}
	}
	var cps []mutation.CIPackage
	for i, pr := range prs {
		cp := mutation.CIPackage{Name: pr.Name, Whole: true, Report: pr.Report, Reruns: reruns[i]}
		if known {
			if cp.Changed, err = mutation.ChangedLines(ctx, root, rec.Base, pr.Name); err != nil {
				return err
			}
		}
		if cp.Mutants, err = mutation.Identify(root, pr.Name, pr.Report, mutation.KindFull); err != nil {
			return err
		}
		cps = append(cps, cp)
	}
	run := mutation.CIRun{Packages: cps, Results: mutation.JudgeCI(cps, rec, eq)}
	failures := printCI(e, run, 0, *shards)
	failures = append(failures, stale...)
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(e.stdout, "FAIL "+f)
		}
		return fmt.Errorf("gate failed: %s (%d in all)", failures[0], len(failures))
	}
	if !*write {
		return nil
	}
	head, err := cleanHead(ctx, root)
	if err != nil {
		return err
	}
	out2, err := mutation.RecordFrom(root, head, *shards, prs, mutation.KindFull)
	if err != nil {
		return err
	}
	if err := out2.Write(*recordFile); err != nil {
		return fmt.Errorf("write the record: %w", err)
	}
	fmt.Fprintf(e.stdout, "record %s: base %s, every mutant; commit it\n", *recordFile, head[:12])
	return nil
}

// writeReport writes a gremlins report back as JSON.
func writeReport(file string, r mutation.Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// parseShard reads K/N with 1 <= K <= N.
func parseShard(s string) (k, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	k, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 1 || k > n {
		return 0, 0, fmt.Errorf("want K/N with 1 <= K <= N, such as 2/8, not %q", s)
	}
	return k, n, nil
}
