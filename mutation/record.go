package mutation

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Record is testdata/mutation/record.json: the commit the last passing
// gate run passed on, the shard count, and per package every mutant by
// identity with the status a run measured for it. The next submission's
// gate compares its mutants with these, one by one; percentages are
// recomputed from them for the printout and never compared. Only a run
// writes it, never a hand: `make mutation` (every mutant), `doublerun
// mutation ci --write-record` (one shard and the change, the rest carried
// over) or `doublerun mutation record` (a dry run: coverage only).
type Record struct {
	// Base is the commit the run passed on; the next gate mutates the
	// lines changed since.
	Base string `json:"base"`
	// Shards is how many shards a package's lines are split into
	// (ShardOf).
	Shards int `json:"shards"`
	// Packages are the gated packages, by package directory.
	Packages map[string]PackageRecord `json:"packages"`
}

// PackageRecord is one package's part of the record.
type PackageRecord struct {
	// SecondsPerMutant is the cost of one mutant's test run, gremlins'
	// wall time over the mutants it ran: the gate's estimate of its own
	// wall time.
	SecondsPerMutant float64 `json:"seconds_per_mutant"`
	// Mutants are every mutant of the package at the base, sorted by file,
	// line and column.
	Mutants []RecordedMutant `json:"mutants"`
}

// The kinds of run that write a recorded mutant's status.
const (
	// KindDryRun is a gremlins dry run: RUNNABLE (a test covers it) or
	// NOT COVERED, measured by its go test -cover; no mutant ran.
	KindDryRun = "dry-run"
	// KindCI is a per-submission gate run (one shard and the change).
	KindCI = "ci"
	// KindFull is a run of every mutant (make mutation, or mutation gate
	// on its reports).
	KindFull = "full"
)

// RecordedMutant is one mutant of the record. Its identity is its file,
// the text of its line (Code, without surrounding blanks), how many lines
// of the same text come before it in the file (Occurrence), its mutator,
// and its rank among the mutants of that mutator on the line: a line that
// moves without changing keeps its mutants, as it keeps its shard. Line
// and Column say where it was at the base.
type RecordedMutant struct {
	// File is relative to the module root ("lease/advisory.go").
	File       string `json:"file"`
	Line       int    `json:"line"`
	Column     int    `json:"column"`
	Mutator    string `json:"mutator"`
	Code       string `json:"code"`
	Occurrence int    `json:"occurrence,omitempty"`
	// Status is KILLED, LIVED, NOT VIABLE, NOT COVERED, or RUNNABLE (a
	// dry run's "a test covers it"). TIMED OUT is never recorded: the gate
	// re-runs such a mutant alone and records what that run measured.
	Status string `json:"status"`
	// Run is the kind of run that measured Status (KindDryRun, KindCI,
	// KindFull).
	Run string `json:"run"`
	// KilledBy names the tests that failed on the mutant, when the run
	// knows them: gremlins v0.6.0 does not say, a re-run alone does.
	KilledBy string `json:"killed_by,omitempty"`
}

// recordStatuses are the statuses a record may hold.
var recordStatuses = []string{StatusKilled, StatusLived, StatusNotViable, StatusNotCovered, StatusRunnable}

// covered says whether a recorded status means a test ran the mutant's
// line: killed, lived or not viable, or RUNNABLE in a dry run.
func covered(status string) bool { return status != StatusNotCovered }

// key is a mutant's identity (see RecordedMutant).
type key struct {
	file, code string
	occurrence int
	mutator    string
	rank       int
}

func (m RecordedMutant) at() string {
	return fmt.Sprintf("%s:%d:%d:%s", m.File, m.Line, m.Column, m.Mutator)
}

// keyed indexes mutants by identity, ranking the mutants of one mutator on
// one line by column.
func keyed(ms []RecordedMutant) map[key]int {
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(ms[a].File, ms[b].File), cmp.Compare(ms[a].Line, ms[b].Line), cmp.Compare(ms[a].Column, ms[b].Column))
	})
	out := map[key]int{}
	rank := map[key]int{}
	for _, i := range order {
		m := ms[i]
		line := key{m.File, m.Code, m.Occurrence, m.Mutator, 0}
		k := line
		k.rank = rank[line]
		rank[line]++
		out[k] = i
	}
	return out
}

// ReadRecord reads a record file and checks it. A missing file is an
// error that says how to make one.
func ReadRecord(file string) (Record, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, fmt.Errorf("%s does not exist: no gate run has passed yet; run make mutation and commit the record it writes", file)
	}
	if err != nil {
		return Record{}, err
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%s: %w (a record from before mutants were recorded one by one? run doublerun mutation record and commit what it writes)", file, err)
	}
	if r.Base == "" || r.Shards < 1 {
		return Record{}, fmt.Errorf("%s names no base commit or no shard count; run make mutation and commit the record it writes", file)
	}
	for name, p := range r.Packages {
		seen := map[string]bool{}
		for _, m := range p.Mutants {
			switch {
			case !slices.Contains(mutators, m.Mutator):
				return Record{}, fmt.Errorf("%s: %s has the unknown mutator %q", file, m.at(), m.Mutator)
			case !slices.Contains(recordStatuses, m.Status):
				return Record{}, fmt.Errorf("%s: %s has the status %q, which a record does not hold", file, m.at(), m.Status)
			case !slices.Contains([]string{KindDryRun, KindCI, KindFull}, m.Run):
				return Record{}, fmt.Errorf("%s: %s names no kind of run (%q)", file, m.at(), m.Run)
			case m.Line < 1 || m.Column < 1 || m.Occurrence < 0 || !strings.HasPrefix(m.File, name+"/"):
				return Record{}, fmt.Errorf("%s: %s is not a mutant of %s", file, m.at(), name)
			}
			if seen[m.at()] {
				return Record{}, fmt.Errorf("%s: %s lists %s twice", file, name, m.at())
			}
			seen[m.at()] = true
		}
	}
	return r, nil
}

// Write writes the record as indented JSON, each package's mutants sorted.
func (r Record) Write(file string) error {
	for _, p := range r.Packages {
		sortMutants(p.Mutants)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

func sortMutants(ms []RecordedMutant) {
	slices.SortFunc(ms, func(a, b RecordedMutant) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), strings.Compare(a.Mutator, b.Mutator))
	})
}

// minCostSample is how many mutants of a package a run must have tested
// for its wall time over them to replace the recorded cost of a mutant.
// gremlins' wall time includes its coverage run of the whole package, so
// a run of a few mutants is mostly that run: at 252f44e worker's shard
// 7/16 tested 6 mutants in 3m15s, 26.65 s a mutant against the 11.79 s
// of the run before, and the budget check would then have refused a
// change of 18 worker mutants instead of 40.
const minCostSample = 20

// Estimate is the wall time the gremlins runs of mutants mutants of pkg
// should take, from the recorded cost of a mutant; 0 when none is
// recorded.
func (r Record) Estimate(pkg string, mutants int) time.Duration {
	return time.Duration(float64(mutants) * r.Packages[pkg].SecondsPerMutant * float64(time.Second))
}

// ShardMutants counts the recorded mutants of pkg in shard k whose tests
// run (every status but NOT COVERED): what a run of that shard costs.
func (r Record) ShardMutants(pkg string, k int) int {
	n := 0
	for _, m := range r.Packages[pkg].Mutants {
		if covered(m.Status) && ShardOf(strings.TrimPrefix(m.File, pkg+"/"), m.Code, m.Occurrence, r.Shards) == k {
			n++
		}
	}
	return n
}

// Identify gives every mutant of a gremlins report of package pkg (a
// directory relative to root) its identity, from the package's sources in
// root, with the given status source: the mutants the report ran, with
// their statuses, SKIPPED ones left out.
func Identify(root, pkg string, r Report, run string) ([]RecordedMutant, error) {
	var out []RecordedMutant
	for _, f := range r.Files {
		data, err := os.ReadFile(filepath.Join(root, pkg, f.FileName))
		if err != nil {
			return nil, fmt.Errorf("identify the mutants of %s: %w", pkg, err)
		}
		lines := strings.Split(string(data), "\n")
		occ := occurrences(lines)
		for _, m := range f.Mutations {
			if m.Status == StatusSkipped {
				continue
			}
			if m.Line > len(lines) {
				return nil, fmt.Errorf("gremlins names %s:%d, but the file has %d lines", f.FileName, m.Line, len(lines))
			}
			out = append(out, RecordedMutant{File: path.Join(pkg, filepath.ToSlash(f.FileName)), Line: m.Line, Column: m.Column,
				Mutator: m.Type, Code: strings.TrimSpace(lines[m.Line-1]), Occurrence: occ[m.Line-1], Status: m.Status, Run: run})
		}
	}
	sortMutants(out)
	return out, nil
}

// occurrences says, for each line, how many lines of the same text
// (without surrounding blanks) come before it.
func occurrences(lines []string) []int {
	seen := map[string]int{}
	out := make([]int, len(lines))
	for i, l := range lines {
		t := strings.TrimSpace(l)
		out[i] = seen[t]
		seen[t]++
	}
	return out
}

// located finds where a recorded line is now in the package's sources
// under root: its line number, or 0 when no line of its file reads its
// text that many times (the line changed or went).
func located(root string, m RecordedMutant, cache map[string][]string) int {
	lines, ok := cache[m.File]
	if !ok {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.File)))
		if err == nil {
			lines = strings.Split(string(data), "\n")
		}
		cache[m.File] = lines
	}
	n := 0
	for i, l := range lines {
		if strings.TrimSpace(l) == m.Code {
			if n == m.Occurrence {
				return i + 1
			}
			n++
		}
	}
	return 0
}

// After is the record of a passing gate run at commit head: head as the
// base; the mutants the run measured, with the statuses it measured
// (re-runs of timed-out mutants applied); every other recorded mutant
// carried over by identity when its line still reads the same in root,
// at its line now, and dropped when its line changed or went. Each
// package's cost of a mutant is the run's when it ran minCostSample
// mutants or more, or when none is recorded.
func (r Record) After(root string, run CIRun, head, kind string) Record {
	out := Record{Base: head, Shards: r.Shards, Packages: map[string]PackageRecord{}}
	for name, p := range r.Packages {
		out.Packages[name] = p
	}
	for i, res := range run.Results {
		p := run.Packages[i]
		pr := out.Packages[res.Name]
		ran := keyed(res.Mutants)
		cache := map[string][]string{}
		var ms []RecordedMutant
		for k, j := range keyed(pr.Mutants) {
			if _, now := ran[k]; now {
				continue
			}
			m := pr.Mutants[j]
			if line := located(root, m, cache); line > 0 {
				m.Line = line
				ms = append(ms, m)
			}
		}
		for _, m := range res.Mutants {
			m.Run = kind
			ms = append(ms, m)
		}
		sortMutants(ms)
		pr.Mutants = ms
		if tested := res.Part.Score.Tested() + res.Changed.Score.Tested(); p.Report.ElapsedTime > 0 &&
			(tested >= minCostSample || tested > 0 && pr.SecondsPerMutant == 0) {
			pr.SecondsPerMutant = math.Ceil(p.Report.ElapsedTime/float64(tested)*100) / 100
		}
		out.Packages[res.Name] = pr
	}
	return out
}
