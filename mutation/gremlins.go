package mutation

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Report is the JSON file that `gremlins unleash --output FILE` writes, as
// of gremlins v0.6.0 (internal/report/internal/structure.go there).
type Report struct {
	GoModule          string       `json:"go_module"`
	Files             []ReportFile `json:"files"`
	TestEfficacy      float64      `json:"test_efficacy"`
	MutationsCoverage float64      `json:"mutations_coverage"`
	// MutantsTotal is killed + lived + not viable, not every mutant.
	MutantsTotal      int     `json:"mutants_total"`
	MutantsKilled     int     `json:"mutants_killed"`
	MutantsLived      int     `json:"mutants_lived"`
	MutantsNotViable  int     `json:"mutants_not_viable"`
	MutantsNotCovered int     `json:"mutants_not_covered"`
	ElapsedTime       float64 `json:"elapsed_time"`
	// MutatorStatistics counts mutants per mutator; kept so that a report
	// with fields gremlins v0.6.0 does not write is refused.
	MutatorStatistics map[string]int `json:"mutator_statistics,omitempty"`
}

// ReportFile is one source file's mutants. FileName is relative to the
// directory gremlins was pointed at (for `unleash ./lease`, "advisory.go").
type ReportFile struct {
	FileName  string     `json:"file_name"`
	Mutations []Mutation `json:"mutations"`
}

// Mutation is one mutant.
type Mutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// The mutant statuses gremlins v0.6.0 writes.
const (
	StatusKilled     = "KILLED"
	StatusLived      = "LIVED"
	StatusNotCovered = "NOT COVERED"
	StatusTimedOut   = "TIMED OUT"
	StatusNotViable  = "NOT VIABLE"
	StatusSkipped    = "SKIPPED"
	StatusRunnable   = "RUNNABLE"
)

// statuses and mutators are every status and mutator type gremlins v0.6.0
// writes (internal/mutator there). Anything else is refused: a gate that
// scores what it does not understand passes by accident.
var (
	statuses = []string{StatusKilled, StatusLived, StatusNotCovered, StatusTimedOut, StatusNotViable, StatusSkipped, StatusRunnable}
	mutators = []string{"ARITHMETIC_BASE", "CONDITIONALS_BOUNDARY", "CONDITIONALS_NEGATION", "INCREMENT_DECREMENT",
		"INVERT_ASSIGNMENTS", "INVERT_BITWISE", "INVERT_BWASSIGN", "INVERT_LOGICAL", "INVERT_LOOPCTRL",
		"INVERT_NEGATIVES", "REMOVE_SELF_ASSIGNMENTS"}
)

// ReadReport reads and checks a gremlins report of a whole package, as
// `mutation gate` scores it: it must list at least one mutant. See
// readReport.
func ReadReport(file string) (Report, error) { return readReport(file, readOptions{}) }

// readOptions loosen readReport for the gate's own runs: a selection may
// hold no mutant, and a dry run lists its mutants as RUNNABLE.
type readOptions struct {
	allowEmpty, dryRun bool
}

// readReport reads and checks a gremlins report. It refuses anything that
// is not one, so that the gate never scores a file it does not understand:
// a field gremlins v0.6.0 does not write, a missing module, file name or
// mutator, an unknown status or mutator, a line or column below 1, counts
// that disagree with the list of mutants (a truncated or hand-edited
// file), a dry run, and, unless allowEmpty, a report with no mutant at all
// (gremlins' report of an empty selection, or `{}`).
func readReport(file string, opts readOptions) (Report, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return Report{}, fmt.Errorf("gremlins report %s does not exist; gremlins writes none when it is interrupted or finds no mutants, so run it again (mutation/run.sh)", file)
	}
	if err != nil {
		return Report{}, err
	}
	notReport := func(why string) error {
		return fmt.Errorf("%s is not a gremlins v0.6.0 report: %s; give the file `gremlins unleash --output` wrote", file, why)
	}
	var r Report
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Report{}, notReport(strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return Report{}, notReport("more follows its JSON object")
	}
	if r.GoModule == "" {
		return Report{}, notReport("it names no go_module")
	}
	for _, f := range r.Files {
		if f.FileName == "" {
			return Report{}, notReport("a file has no file_name")
		}
		for _, m := range f.Mutations {
			switch {
			case !slices.Contains(statuses, m.Status):
				return Report{}, notReport(fmt.Sprintf("%s:%d has the unknown status %q", f.FileName, m.Line, m.Status))
			case !slices.Contains(mutators, m.Type):
				return Report{}, notReport(fmt.Sprintf("%s:%d has the unknown mutator %q", f.FileName, m.Line, m.Type))
			case m.Line < 1 || m.Column < 1:
				return Report{}, notReport(fmt.Sprintf("a %s mutant in %s has line %d, column %d", m.Type, f.FileName, m.Line, m.Column))
			}
		}
	}
	s := r.count()
	if s.Killed != r.MutantsKilled || s.Lived != r.MutantsLived || s.NotCovered != r.MutantsNotCovered || s.NotViable != r.MutantsNotViable {
		return Report{}, fmt.Errorf("%s is inconsistent: it lists %d killed, %d lived, %d not covered and %d not viable mutants but states %d, %d, %d and %d; regenerate it",
			file, s.Killed, s.Lived, s.NotCovered, s.NotViable, r.MutantsKilled, r.MutantsLived, r.MutantsNotCovered, r.MutantsNotViable)
	}
	if s.Runnable > 0 && !opts.dryRun {
		return Report{}, fmt.Errorf("%s comes from a dry run (%d mutants RUNNABLE); run gremlins without --dry-run", file, s.Runnable)
	}
	if s.total() == 0 && !opts.allowEmpty {
		return Report{}, notReport("it lists no mutant")
	}
	coverage := s.Coverage()
	if opts.dryRun {
		// A dry run's coverage counts the RUNNABLE mutants as covered:
		// its tests would run them.
		coverage = Score{Killed: s.Killed + s.Runnable, Lived: s.Lived, NotCovered: s.NotCovered, Excused: s.Excused}.Coverage()
	}
	if math.Abs(s.Efficacy()-r.TestEfficacy) > 1e-6 || math.Abs(coverage-r.MutationsCoverage) > 1e-6 {
		return Report{}, fmt.Errorf("%s states efficacy %.4f%% and coverage %.4f%% but its mutants give %.4f%% and %.4f%%; is it from gremlins v0.6.0?",
			file, r.TestEfficacy, r.MutationsCoverage, s.Efficacy(), coverage)
	}
	return r, nil
}

// Score is the tally of one package's mutants. Excused counts the lived
// mutants a strict gate excuses as equivalent: their tests ran them, so
// they count as covered, but in no efficacy.
type Score struct {
	Killed, Lived, NotCovered, TimedOut, NotViable, Skipped, Runnable, Excused int
}

// Efficacy is gremlins' test efficacy: killed over killed + lived, in
// percent; 0 when nothing was killed.
func (s Score) Efficacy() float64 {
	if s.Killed == 0 {
		return 0
	}
	return float64(s.Killed) / float64(s.Killed+s.Lived) * 100
}

// Coverage is gremlins' mutant coverage: killed + lived over killed +
// lived + not covered, in percent, with excused lived mutants counted as
// covered. Timed-out and not-viable mutants count in neither, as in
// gremlins.
func (s Score) Coverage() float64 {
	covered := s.Killed + s.Lived + s.Excused
	if covered == 0 {
		return 0
	}
	return float64(covered) / float64(covered+s.NotCovered) * 100
}

// total counts every mutant, whatever its status.
func (s Score) total() int {
	return s.Killed + s.Lived + s.NotCovered + s.TimedOut + s.NotViable + s.Skipped + s.Runnable
}

// Tested is the number of mutants whose tests ran: killed, lived, timed
// out or not viable. Not-covered and skipped mutants cost no test run.
func (s Score) Tested() int { return s.Killed + s.Lived + s.TimedOut + s.NotViable }

// PerMutant is elapsed spread over the mutants whose tests ran: the cost of
// one mutant's test run, the figure that decides the gate's wall time. It
// is 0 when no test ran.
func (s Score) PerMutant(elapsed time.Duration) time.Duration {
	if s.Tested() == 0 {
		return 0
	}
	return elapsed / time.Duration(s.Tested())
}

func (s Score) add(o Score) Score {
	return Score{s.Killed + o.Killed, s.Lived + o.Lived, s.NotCovered + o.NotCovered, s.TimedOut + o.TimedOut,
		s.NotViable + o.NotViable, s.Skipped + o.Skipped, s.Runnable + o.Runnable, s.Excused + o.Excused}
}

// Count tallies the report's mutants by status.
func (r Report) Count() Score { return r.count() }

func (r Report) count() Score {
	var s Score
	for _, f := range r.Files {
		for _, m := range f.Mutations {
			s = s.add(statusScore(m.Status))
		}
	}
	return s
}

// Figures are a package's two gate scores, in percent.
type Figures struct {
	Efficacy float64 `json:"efficacy"`
	Coverage float64 `json:"coverage"`
}

// Baseline is the committed floor per package
// (testdata/mutation/baseline.json): a package's scores may rise, never
// fall below it.
type Baseline map[string]Figures

// ReadBaseline reads a baseline file.
func ReadBaseline(file string) (Baseline, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b Baseline
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("baseline %s: %w", file, err)
	}
	return b, nil
}

// Write writes the baseline as indented JSON.
func (b Baseline) Write(file string) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// Raise returns b with each measured package's figures raised to the
// measured ones, rounded down to two decimals so that the same run passes
// again. It never lowers a figure: lowering the floor is a decision to
// make by hand, in review.
func (b Baseline) Raise(measured []PackageResult) Baseline {
	out := Baseline{}
	for k, v := range b {
		out[k] = v
	}
	for _, p := range measured {
		f := out[p.Name]
		f.Efficacy = max(f.Efficacy, floor2(p.Score.Efficacy()))
		f.Coverage = max(f.Coverage, floor2(p.Score.Coverage()))
		out[p.Name] = f
	}
	return out
}

func floor2(x float64) float64 { return math.Floor(x*100) / 100 }

// PackageReport names a gremlins report by the package directory it
// covers, relative to the module root ("lease").
type PackageReport struct {
	Name   string
	Report Report
}

// GateOptions are the gate's thresholds, in percent. A score equal to a
// threshold or to the baseline passes.
type GateOptions struct {
	MinEfficacy, MinCoverage float64
	// Baseline, if not nil, is the committed floor. A package it names
	// must have a report.
	Baseline Baseline
	// Equivalents, when Strict, excuses the mutants it lists: they count
	// in no score, and every other LIVED mutant fails the gate. Without
	// Strict, scores are gremlins' own and lived mutants only lower them.
	Equivalents Equivalents
	Strict      bool
}

// PackageResult is one package's figures and the mutants that count
// against them.
type PackageResult struct {
	Name  string
	Score Score
	// Excused counts the mutants Equivalents listed; lived ones count in
	// Score as Excused, not-covered ones in nothing.
	Excused int
	// Elapsed is gremlins' wall time for the package, coverage run
	// included.
	Elapsed time.Duration
	// Lived and NotCovered are file:line:type, with the file relative to
	// the module root, sorted; listed equivalents are left out.
	Lived, NotCovered []string
}

// GateResult is the gate's verdict.
type GateResult struct {
	Packages []PackageResult
	Total    Score
	// Elapsed is the packages' wall times added up.
	Elapsed time.Duration
	// Failures says, one line each, why the gate fails; empty when it
	// passes.
	Failures []string
}

// tolerance absorbs float rounding, so that a figure written to the
// baseline and read back compares as equal.
const tolerance = 1e-9

// Gate scores each package and checks it against the thresholds and the
// baseline, and with opts.Strict fails every LIVED mutant that
// opts.Equivalents does not list.
func Gate(reports []PackageReport, opts GateOptions) GateResult {
	var res GateResult
	seen := map[string]bool{}
	for _, pr := range reports {
		p := scorePackage(pr.Name, pr.Report, opts, nil)
		res.Packages = append(res.Packages, p)
		res.Total = res.Total.add(p.Score)
		res.Elapsed += p.Elapsed
		if seen[p.Name] {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: two reports for one package", p.Name))
		}
		seen[p.Name] = true
		res.Failures = append(res.Failures, checkFigures(p.Name, p.Score, Figures{opts.MinEfficacy, opts.MinCoverage}, "the threshold")...)
		if b, ok := opts.Baseline[p.Name]; ok {
			res.Failures = append(res.Failures, checkFigures(p.Name, p.Score, b, "the baseline")...)
		}
		if opts.Strict {
			res.Failures = append(res.Failures, livedFailures(p.Lived)...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Baseline)) {
		if !seen[name] {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: the baseline names it but no report covers it; run gremlins on ./%s", name, name))
		}
	}
	return res
}

// livedFailures is the gate's line for each unlisted lived mutant.
func livedFailures(lived []string) []string {
	var out []string
	for _, l := range lived {
		out = append(out, fmt.Sprintf("%s LIVED: no test fails without that code; write one that does, or list the mutant in testdata/mutation/equivalents.json with why", l))
	}
	return out
}

// checkFigures says, one line each, which of s's figures is below floor.
func checkFigures(name string, s Score, floor Figures, source string) []string {
	var out []string
	check := func(what string, got, min float64) {
		if got+tolerance < min {
			g, f := fmt.Sprintf("%.2f", got), fmt.Sprintf("%.2f", min)
			if g == f {
				g, f = fmt.Sprintf("%.4f", got), fmt.Sprintf("%.4f", min)
			}
			out = append(out, fmt.Sprintf("%s: %s %s%% is below %s %s%%", name, what, g, source, f))
		}
	}
	check("efficacy", s.Efficacy(), floor.Efficacy)
	check("mutant coverage", s.Coverage(), floor.Coverage)
	return out
}

// scorePackage tallies the mutants of a package's report that keep
// selects (all of them when keep is nil), leaving out the listed
// equivalents when opts.Strict.
func scorePackage(name string, r Report, opts GateOptions, keep func(file string, m Mutation) bool) PackageResult {
	p := PackageResult{Name: name, Elapsed: time.Duration(r.ElapsedTime * float64(time.Second))}
	var lived, notCovered []loc
	for _, f := range r.Files {
		file := path.Join(name, filepath.ToSlash(f.FileName))
		for _, m := range f.Mutations {
			if keep != nil && !keep(f.FileName, m) {
				continue
			}
			if opts.Strict && m.Status != StatusSkipped && opts.Equivalents.Has(file, m.Line, m.Column, m.Type) {
				p.Excused++
				if m.Status == StatusLived {
					p.Score.Excused++
				}
				continue
			}
			p.Score = p.Score.add(statusScore(m.Status))
			switch m.Status {
			case StatusLived:
				lived = append(lived, loc{file, m.Line, m.Type})
			case StatusNotCovered:
				notCovered = append(notCovered, loc{file, m.Line, m.Type})
			}
		}
	}
	p.Lived, p.NotCovered = sortLocs(lived), sortLocs(notCovered)
	return p
}

// statusScore is one mutant of status s as a Score.
func statusScore(s string) Score {
	switch s {
	case StatusKilled:
		return Score{Killed: 1}
	case StatusLived:
		return Score{Lived: 1}
	case StatusNotCovered:
		return Score{NotCovered: 1}
	case StatusTimedOut:
		return Score{TimedOut: 1}
	case StatusNotViable:
		return Score{NotViable: 1}
	case StatusSkipped:
		return Score{Skipped: 1}
	case StatusRunnable:
		return Score{Runnable: 1}
	}
	return Score{}
}

type loc struct {
	file string
	line int
	typ  string
}

// sortLocs returns ls as file:line:type, sorted by file and line.
func sortLocs(ls []loc) []string {
	slices.SortFunc(ls, func(a, b loc) int {
		return cmp.Or(strings.Compare(a.file, b.file), cmp.Compare(a.line, b.line), strings.Compare(a.typ, b.typ))
	})
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = fmt.Sprintf("%s:%d:%s", l.file, l.line, l.typ)
	}
	return out
}
