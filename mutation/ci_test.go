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

func TestJudgeCI(t *testing.T) {
	t.Parallel()
	const b, n = "CONDITIONALS_BOUNDARY", "CONDITIONALS_NEGATION"
	eq := Equivalents{{File: "lease/a.go", Line: 9, Mutator: b, Code: "x", Why: "y"}}
	shard := Selection{"a.go": {5, 6, 9}}
	for _, tc := range []struct {
		name    string
		changed Selection
		whole   bool
		mutants []string
		floor   Figures
		want    []string
	}{
		{"KilledChangedLinePasses", Selection{"a.go": {1}}, false,
			[]string{"a.go:1:" + b + ":KILLED", "a.go:1:" + n + ":NOT VIABLE"}, Figures{}, nil},
		{"EveryOtherStatusOfAChangedLineFails", Selection{"a.go": {1, 2, 3}}, false,
			[]string{"a.go:1:" + b + ":LIVED", "a.go:2:" + b + ":NOT COVERED", "a.go:3:" + b + ":TIMED OUT", "a.go:4:" + b + ":SKIPPED"}, Figures{},
			[]string{"lease/a.go:1:" + b + " LIVED on a changed line: no test fails", "lease/a.go:2:" + b + " NOT COVERED on a changed line: no test runs that line",
				"lease/a.go:3:" + b + " TIMED OUT on a changed line: the mutant makes a test wait"}},
		// Line 6 timed out, which counts in no score; line 7 is outside
		// the shard and unchanged.
		{"LivedInTheShardFails", nil, false,
			[]string{"a.go:5:" + b + ":LIVED", "a.go:6:" + b + ":TIMED OUT", "a.go:7:" + b + ":LIVED"}, Figures{},
			[]string{"lease/a.go:5:" + b + " LIVED: no test fails without that code"}},
		{"AListedEquivalentIsExcusedEverywhere", Selection{"a.go": {9}}, false,
			[]string{"a.go:9:" + b + ":LIVED", "a.go:9:" + n + ":KILLED"}, Figures{Efficacy: 100, Coverage: 100}, nil},
		{"ALivedMutantOfAChangedLineInTheShardFailsOnce", Selection{"a.go": {5}}, false,
			[]string{"a.go:5:" + b + ":LIVED"}, Figures{},
			[]string{"lease/a.go:5:" + b + " LIVED on a changed line"}},
		{"WholePackageFailsAnyLived", nil, true,
			[]string{"a.go:70:" + b + ":LIVED", "a.go:71:" + b + ":KILLED"}, Figures{},
			[]string{"lease/a.go:70:" + b + " LIVED: no test fails"}},
		{"FiguresBelowTheFloorFail", nil, false,
			[]string{"a.go:5:" + b + ":KILLED", "a.go:6:" + b + ":NOT COVERED"}, Figures{Efficacy: 100, Coverage: 60},
			[]string{"lease: mutant coverage 50.00% is below shard 2's record 60.00%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := CIPackage{Name: "lease", Whole: tc.whole, Changed: tc.changed, Floor: tc.floor, FloorSource: "shard 2's record", Report: report(tc.mutants...)}
			if !tc.whole {
				p.Shard = shard
			}
			res := JudgeCI([]CIPackage{p}, eq)
			require.Len(t, res, 1)
			require.Len(t, res[0].Failures, len(tc.want), "%q", res[0].Failures)
			for i, w := range tc.want {
				require.True(t, strings.HasPrefix(res[0].Failures[i], w), "%q does not start with %q", res[0].Failures[i], w)
			}
		})
	}
}

// The shards of a nightly run merge into the report of the whole package,
// and a record built from it scores each shard as the per-submission gate
// selects it.
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
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("if a < b {\nif c < d {\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "b.go"), []byte("\n\nx := y + z\n"), 0o644))
	const shards = 3
	eq := Equivalents{{File: "lease/a.go", Line: 2, Mutator: "CONDITIONALS_BOUNDARY", Code: "if c < d {", Why: "w"}}
	rec, err := RecordFrom(root, "abc", shards, []PackageReport{{"lease", m}}, eq)
	require.NoError(t, err)
	p := rec.Packages["lease"]
	require.Equal(t, 1, p.Mutants, "the listed lived mutant counts in no score")
	require.Equal(t, 30.0, p.SecondsPerMutant)
	require.Len(t, p.Shards, shards)
	total := 0
	for k, sf := range p.Shards {
		sel, err := ShardSelection(filepath.Join(root, "lease"), k, shards)
		require.NoError(t, err)
		want := 0
		if sel.Has("a.go", 1) {
			want = 1
		}
		require.Equal(t, want, sf.Mutants, "shard %d", k)
		total += sf.Mutants
	}
	require.Equal(t, 1, total)
	require.Empty(t, eq.Stale(root))
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
	require.Empty(t, eq.Stale(root))

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

	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("new\na\n  if x < 0 {\nb\n"), 0o644))
	require.Equal(t, []string{`equivalent lease/a.go:2:CONDITIONALS_BOUNDARY: line 2 no longer reads "if x < 0 {"; it is now on line 3; update the entry`}, eq.Stale(root))
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("a\n"), 0o644))
	require.Equal(t, []string{`equivalent lease/a.go:2:CONDITIONALS_BOUNDARY: line 2 no longer reads "if x < 0 {"; the code is gone; remove the entry`}, eq.Stale(root))

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
