package mutation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// report builds a gremlins report of package-relative file:line:type
// mutants with their statuses.
func report(mutants ...string) Report {
	var r Report
	r.GoModule = "github.com/doublerun/doublerun"
	for _, spec := range mutants {
		parts := strings.Split(spec, ":")
		file, line, typ, status := parts[0], atoi(parts[1]), parts[2], parts[3]
		if len(r.Files) == 0 || r.Files[len(r.Files)-1].FileName != file {
			r.Files = append(r.Files, ReportFile{FileName: file})
		}
		f := &r.Files[len(r.Files)-1]
		f.Mutations = append(f.Mutations, Mutation{Type: typ, Status: status, Line: line, Column: 1})
	}
	return r
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// judged runs JudgeCI on one package of lease whose mutants are mutants,
// against a record holding recorded, and returns its failures.
func judged(t *testing.T, changed Selection, recorded, mutants []RecordedMutant, eq Equivalents) []string {
	t.Helper()
	r := Report{GoModule: "m"}
	for _, m := range mutants {
		r.Files = append(r.Files, ReportFile{FileName: strings.TrimPrefix(m.File, "lease/"),
			Mutations: []Mutation{{Type: m.Mutator, Status: m.Status, Line: m.Line, Column: m.Column}}})
	}
	rec := Record{Base: "0123456789abcdef", Shards: 8, Packages: map[string]PackageRecord{"lease": {Mutants: recorded}}}
	res := JudgeCI([]CIPackage{{Name: "lease", Shard: Selection{"a.go": {1, 2, 3, 4, 5, 6, 7, 8, 9}}, Changed: changed, Report: r, Mutants: mutants}}, rec, eq)
	require.Len(t, res, 1)
	require.Equal(t, mutants, res[0].Mutants, "the result keeps the measured mutants for the next record")
	return res[0].Failures
}

// rm is a mutant of lease/a.go whose line reads code.
func rm(line, col int, mutator, code, status string) RecordedMutant {
	return RecordedMutant{File: "lease/a.go", Line: line, Column: col, Mutator: mutator, Code: code, Status: status, Run: KindCI}
}

// Every rule of the per-submission gate, one case each: what fails, what
// passes, and that the verdict never depends on a percentage.
func TestJudgeCI(t *testing.T) {
	t.Parallel()
	const b, n = "CONDITIONALS_BOUNDARY", "CONDITIONALS_NEGATION"
	eq := Equivalents{{File: "lease/a.go", Line: 9, Mutator: b, Code: "x", Why: "y"}}
	dry := func(m RecordedMutant) RecordedMutant { m.Run = KindDryRun; return m }
	for _, tc := range []struct {
		name     string
		changed  Selection
		recorded []RecordedMutant
		mutants  []RecordedMutant
		want     []string
	}{
		{"KilledOrNotViableOnAChangedLinePasses", Selection{"a.go": {1}}, nil,
			[]RecordedMutant{rm(1, 5, b, "if a < b {", StatusKilled), rm(1, 5, n, "if a < b {", StatusNotViable)}, nil},
		{"EveryOtherStatusOfAChangedLineFails", Selection{"a.go": {1, 2, 3}}, nil,
			[]RecordedMutant{rm(1, 5, b, "l1", StatusLived), rm(2, 5, b, "l2", StatusNotCovered), rm(3, 5, b, "l3", StatusTimedOut)},
			[]string{"lease/a.go:1:5:" + b + " LIVED on a changed line: no test fails", "lease/a.go:2:5:" + b + " NOT COVERED on a changed line: no test runs that line",
				"lease/a.go:3:5:" + b + " TIMED OUT on a changed line: the mutant was not re-run alone"}},
		{"ARecordedKilledMutantThatLivesFailsNamingItsTest", nil,
			[]RecordedMutant{{File: "lease/a.go", Line: 2, Column: 5, Mutator: b, Code: "if a < b {", Status: StatusKilled, Run: KindCI, KilledBy: "TestA"}},
			[]RecordedMutant{rm(5, 5, b, "if a < b {", StatusLived)},
			[]string{"lease/a.go:5:5:" + b + " LIVED, where the record (ci run at 0123456789ab) has it KILLED by TestA: a test that caught it no longer does"}},
		{"ADryRunCoveredMutantThatLivesFails", nil,
			[]RecordedMutant{dry(rm(2, 5, b, "if a < b {", StatusRunnable))}, []RecordedMutant{rm(2, 5, b, "if a < b {", StatusLived)},
			[]string{"lease/a.go:2:5:" + b + " LIVED, where the record (dry-run run at 0123456789ab) has it RUNNABLE: a test that caught it no longer does"}},
		{"ACoveredMutantNowNotCoveredFails", nil,
			[]RecordedMutant{dry(rm(2, 5, b, "if a < b {", StatusRunnable)), rm(3, 5, b, "y++", StatusKilled)},
			[]RecordedMutant{rm(2, 5, b, "if a < b {", StatusNotCovered), rm(3, 5, b, "y++", StatusNotCovered)},
			[]string{"lease/a.go:2:5:" + b + " NOT COVERED, where the record (dry-run run at 0123456789ab) has it RUNNABLE: no test runs that line any more",
				"lease/a.go:3:5:" + b + " NOT COVERED, where the record (ci run at 0123456789ab) has it KILLED: no test runs that line any more"}},
		{"NotCoveredBeforeAndNowPasses", nil,
			[]RecordedMutant{rm(2, 5, b, "if a < b {", StatusNotCovered)}, []RecordedMutant{rm(2, 5, b, "if a < b {", StatusNotCovered)}, nil},
		{"ANewMutantThatLivesFails", nil, nil, []RecordedMutant{rm(4, 5, b, "if c < d {", StatusLived)},
			[]string{"lease/a.go:4:5:" + b + " LIVED, a mutant the record does not have: no test fails"}},
		{"ANewMutantNotCoveredOffTheChangedLinesPasses", nil, nil, []RecordedMutant{rm(4, 5, b, "if c < d {", StatusNotCovered)}, nil},
		{"AMutantStillTimedOutFails", nil, []RecordedMutant{rm(4, 5, b, "x", StatusKilled)}, []RecordedMutant{rm(4, 5, b, "x", StatusTimedOut)},
			[]string{"lease/a.go:4:5:" + b + " TIMED OUT and not re-run alone"}},
		{"KilledWhereTheRecordHasItNotCoveredPasses", nil,
			[]RecordedMutant{rm(2, 5, b, "if a < b {", StatusNotCovered)}, []RecordedMutant{rm(2, 5, b, "if a < b {", StatusKilled)}, nil},
		// The line's text matches, not its number, and the rank among a
		// line's mutants of one mutator, not its column: re-indented
		// code keeps its record.
		{"AMovedLineKeepsItsRecord", nil,
			[]RecordedMutant{rm(2, 5, b, "if a < b && c < d {", StatusKilled), rm(2, 14, b, "if a < b && c < d {", StatusNotCovered)},
			[]RecordedMutant{rm(7, 9, b, "if a < b && c < d {", StatusKilled), rm(7, 18, b, "if a < b && c < d {", StatusNotCovered)}, nil},
		{"TheSecondOfTwoSameLinesIsItsOwnMutant", nil,
			[]RecordedMutant{rm(2, 5, b, "i++", StatusKilled), {File: "lease/a.go", Line: 6, Column: 5, Mutator: b, Code: "i++", Occurrence: 1, Status: StatusNotCovered, Run: KindCI}},
			[]RecordedMutant{rm(2, 5, b, "i++", StatusKilled), {File: "lease/a.go", Line: 6, Column: 5, Mutator: b, Code: "i++", Occurrence: 1, Status: StatusLived, Run: KindCI}},
			[]string{"lease/a.go:6:5:" + b + " LIVED, where the record (ci run at 0123456789ab) has it NOT COVERED"}},
		{"AnotherMutatorIsAnotherMutant", nil,
			[]RecordedMutant{rm(2, 5, n, "if a < b {", StatusKilled)}, []RecordedMutant{rm(2, 5, b, "if a < b {", StatusLived)},
			[]string{"lease/a.go:2:5:" + b + " LIVED, a mutant the record does not have"}},
		{"AListedEquivalentIsExcusedEverywhere", Selection{"a.go": {9}},
			[]RecordedMutant{rm(9, 5, b, "x", StatusKilled)}, []RecordedMutant{rm(9, 5, b, "x", StatusLived), rm(9, 5, n, "x", StatusKilled)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := judged(t, tc.changed, tc.recorded, tc.mutants, eq)
			require.Len(t, got, len(tc.want), "%q", got)
			for i, w := range tc.want {
				require.True(t, strings.HasPrefix(got[i], w), "%q does not start with %q", got[i], w)
			}
		})
	}
}

// The shards of a nightly run merge into the report of the whole package,
// and a record built from it lists every mutant by identity.
func TestMergeAndRecord(t *testing.T) {
	t.Parallel()
	a := report("a.go:1:CONDITIONALS_BOUNDARY:KILLED", "a.go:2:CONDITIONALS_BOUNDARY:SKIPPED", "b.go:3:ARITHMETIC_BASE:SKIPPED")
	a.ElapsedTime = 10
	b := report("a.go:1:CONDITIONALS_BOUNDARY:SKIPPED", "a.go:2:CONDITIONALS_BOUNDARY:LIVED", "b.go:3:ARITHMETIC_BASE:NOT COVERED")
	b.ElapsedTime = 20
	m, err := MergeReports([]Report{a, b})
	require.NoError(t, err)
	require.Equal(t, Score{Killed: 1, Lived: 1, NotCovered: 1}, m.count())
	require.Equal(t, 30.0, m.ElapsedTime)
	require.Equal(t, 50.0, m.TestEfficacy)
	f := writeJSON(t, m)
	_, err = ReadReport(f)
	require.NoError(t, err, "a merged report reads as gremlins' own")

	c := report("a.go:1:CONDITIONALS_BOUNDARY:LIVED")
	_, err = MergeReports([]Report{a, c})
	require.ErrorContains(t, err, "a.go:1:CONDITIONALS_BOUNDARY ran in two reports, KILLED and LIVED")

	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "lease"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("if a < b {\n  if a < b {\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "b.go"), []byte("\n\nx := y + z\n"), 0o644))
	rec, err := RecordFrom(root, "abc", 3, []PackageReport{{"lease", m}}, KindFull)
	require.NoError(t, err)
	p := rec.Packages["lease"]
	require.Equal(t, 15.0, p.SecondsPerMutant, "30 s over the two mutants whose tests ran")
	require.Equal(t, []RecordedMutant{
		{File: "lease/a.go", Line: 1, Column: 1, Mutator: "CONDITIONALS_BOUNDARY", Code: "if a < b {", Status: StatusKilled, Run: KindFull},
		{File: "lease/a.go", Line: 2, Column: 1, Mutator: "CONDITIONALS_BOUNDARY", Code: "if a < b {", Occurrence: 1, Status: StatusLived, Run: KindFull},
		{File: "lease/b.go", Line: 3, Column: 1, Mutator: "ARITHMETIC_BASE", Code: "x := y + z", Status: StatusNotCovered, Run: KindFull},
	}, p.Mutants)
	total := 0
	for k := range rec.Shards {
		total += rec.ShardMutants("lease", k)
	}
	require.Equal(t, 2, total, "the shards' runnable mutants add up to the package's; the not covered one costs nothing")
	file := filepath.Join(t.TempDir(), "record.json")
	require.NoError(t, rec.Write(file))
	back, err := ReadRecord(file)
	require.NoError(t, err)
	require.Equal(t, rec, back)

	_, err = RecordFrom(root, "abc", 3, []PackageReport{{"lease", report("gone.go:1:ARITHMETIC_BASE:KILLED")}}, KindFull)
	require.ErrorContains(t, err, "gone.go")
}

func TestEquivalents(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "lease"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("a\n  if x < 0 {\nb\n"), 0o644))
	f := filepath.Join(root, "eq.json")
	require.NoError(t, os.WriteFile(f, []byte(`{"equivalents":[{"file":"lease/a.go","line":2,"mutator":"CONDITIONALS_BOUNDARY","code":"if x < 0 {","why":"zero is defaulted"}]}`), 0o644))
	eq, err := ReadEquivalents(f)
	require.NoError(t, err)
	require.True(t, eq.Has("lease/a.go", 2, 8, "CONDITIONALS_BOUNDARY"), "an entry without a column lists every column")
	require.True(t, eq.Has("lease/a.go", 2, 20, "CONDITIONALS_BOUNDARY"))
	require.False(t, eq.Has("lease/a.go", 2, 8, "CONDITIONALS_NEGATION"))
	require.False(t, eq.Has("lease/a.go", 3, 8, "CONDITIONALS_BOUNDARY"))
	require.False(t, eq.Has("lease/b.go", 2, 8, "CONDITIONALS_BOUNDARY"))
	located, problems := eq.Locate(root)
	require.Empty(t, problems)
	require.Equal(t, eq, located)

	// With a column, only that mutant of the line; the same line may be
	// listed once per column.
	require.NoError(t, os.WriteFile(f, []byte(`{"equivalents":[`+
		`{"file":"lease/a.go","line":2,"column":8,"mutator":"CONDITIONALS_BOUNDARY","code":"if x < 0 {","why":"w"},`+
		`{"file":"lease/a.go","line":2,"column":9,"mutator":"CONDITIONALS_BOUNDARY","code":"if x < 0 {","why":"w"}]}`), 0o644))
	cols, err := ReadEquivalents(f)
	require.NoError(t, err)
	require.True(t, cols.Has("lease/a.go", 2, 8, "CONDITIONALS_BOUNDARY"))
	require.True(t, cols.Has("lease/a.go", 2, 9, "CONDITIONALS_BOUNDARY"))
	require.False(t, cols.Has("lease/a.go", 2, 20, "CONDITIONALS_BOUNDARY"), "another mutant of the same kind on the line")
	require.NoError(t, os.WriteFile(f, []byte(`{"equivalents":[{"file":"lease/a.go","line":2,"column":8,"mutator":"CONDITIONALS_BOUNDARY","code":"c","why":"w"},`+
		`{"file":"lease/a.go","line":2,"column":8,"mutator":"CONDITIONALS_BOUNDARY","code":"c","why":"w"}]}`), 0o644))
	_, err = ReadEquivalents(f)
	require.ErrorContains(t, err, "lease/a.go:2:8:CONDITIONALS_BOUNDARY is listed twice")

	// A line that moved unchanged takes its entry along, as a recorded
	// mutant's does: the entry excuses the mutant on its new line only.
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("new\na\n  if x < 0 {\nb\n"), 0o644))
	located, problems = eq.Locate(root)
	require.Empty(t, problems)
	require.True(t, located.Has("lease/a.go", 3, 8, "CONDITIONALS_BOUNDARY"))
	require.False(t, located.Has("lease/a.go", 2, 8, "CONDITIONALS_BOUNDARY"))
	require.Equal(t, 2, eq[0].Line, "the entries read are left as they were")

	// Code on several lines but not the entry's: which one is meant is
	// not known, so it excuses none.
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("new\na\n  if x < 0 {\nif x < 0 {\n"), 0o644))
	located, problems = eq.Locate(root)
	require.Empty(t, located)
	require.Equal(t, []string{`equivalent lease/a.go:2:CONDITIONALS_BOUNDARY: line 2 no longer reads "if x < 0 {"; lines [3 4] do; set the entry's line to the one meant`}, problems)

	// On the entry's own line it stays there, whatever else reads the same.
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("a\n  if x < 0 {\nif x < 0 {\n"), 0o644))
	located, problems = eq.Locate(root)
	require.Empty(t, problems)
	require.True(t, located.Has("lease/a.go", 2, 8, "CONDITIONALS_BOUNDARY"))

	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("a\n"), 0o644))
	located, problems = eq.Locate(root)
	require.Empty(t, located)
	require.Equal(t, []string{`equivalent lease/a.go:2:CONDITIONALS_BOUNDARY: line 2 no longer reads "if x < 0 {" and no line of the file does; the code is gone, remove the entry`}, problems)
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "b.go"), nil, 0o644))
	_, problems = Equivalents{{File: "lease/c.go", Line: 1, Mutator: "CONDITIONALS_BOUNDARY", Code: "x", Why: "w"}}.Locate(root)
	require.Len(t, problems, 1)
	require.Contains(t, problems[0], "remove or update the entry")

	for _, bad := range []string{
		`{"equivalents":[{"file":"lease/a.go","line":2,"mutator":"SWAP","code":"c","why":"w"}]}`,
		`{"equivalents":[{"file":"lease/a.go","line":2,"mutator":"CONDITIONALS_BOUNDARY","code":"c"}]}`,
		`{"equivalents":[{"file":"lease/a.go","line":2,"mutator":"CONDITIONALS_BOUNDARY","code":"c","why":"w","extra":1}]}`,
		`{"equivalents":[{"file":"lease/a.go","line":2,"column":-1,"mutator":"CONDITIONALS_BOUNDARY","code":"c","why":"w"}]}`,
		`{"equivalents":[{"file":"lease/a.go","line":0,"mutator":"CONDITIONALS_BOUNDARY","code":"c","why":"w"}]}`,
	} {
		require.NoError(t, os.WriteFile(f, []byte(bad), 0o644))
		_, err := ReadEquivalents(f)
		require.Error(t, err, bad)
	}
	eq, err = ReadEquivalents(filepath.Join(root, "none.json"))
	require.NoError(t, err)
	require.Empty(t, eq)
}

// The budget bounds the change's own mutants, not the shard's fixed cost:
// equal passes, a second more fails with the fix, and 0 bounds nothing.
func TestCheckBudget(t *testing.T) {
	t.Parallel()
	base := "0123456789abcdef0123"
	require.NoError(t, checkBudget(0, 8*time.Minute, base))
	require.NoError(t, checkBudget(8*time.Minute, 8*time.Minute, base))
	err := checkBudget(8*time.Minute+time.Second, 8*time.Minute, base)
	require.ErrorIs(t, err, ErrOverBudget)
	require.EqualError(t, err, "over the gate's budget: the mutants of the change since 0123456789ab would take about 8m1s where the budget is 8m0s; run make mutation and commit the record it writes")
	require.NoError(t, checkBudget(time.Hour, 0, base))
}
