package mutation

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A record reads back only when every mutant is one the gate can match:
// three mutants of one mutator on one line are three, a mutant listed
// twice, an unknown status, mutator or kind of run, or one outside its
// package are refused with the fix.
func TestReadRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(body string) string {
		f := filepath.Join(dir, "record.json")
		require.NoError(t, os.WriteFile(f, []byte(body), 0o644))
		return f
	}
	m := func(col int, extra string) string {
		return `{"file":"lease/a.go","line":3,"column":` + strconv.Itoa(col) + `,"mutator":"CONDITIONALS_BOUNDARY","code":"a < b && c < d || e < f","status":"KILLED","run":"ci"` + extra + `}`
	}
	rec := func(ms ...string) string {
		return `{"base":"abc","shards":8,"packages":{"lease":{"seconds_per_mutant":1,"mutants":[` + strings.Join(ms, ",") + `]}}}`
	}
	r, err := ReadRecord(write(rec(m(1, ""), m(10, ""), m(19, ""))))
	require.NoError(t, err)
	require.Len(t, r.Packages["lease"].Mutants, 3)
	require.Len(t, keyed(r.Packages["lease"].Mutants), 3, "three mutants of one line, ranked by column")

	for _, tc := range []struct{ body, want string }{
		{rec(m(1, ""), m(1, "")), "lease lists lease/a.go:3:1:CONDITIONALS_BOUNDARY twice"},
		{strings.Replace(rec(m(1, "")), `"KILLED"`, `"TIMED OUT"`, 1), `has the status "TIMED OUT", which a record does not hold`},
		{strings.Replace(rec(m(1, "")), `"ci"`, `"guess"`, 1), `names no kind of run ("guess")`},
		{strings.Replace(rec(m(1, "")), `"CONDITIONALS_BOUNDARY"`, `"SWAP"`, 1), `has the unknown mutator "SWAP"`},
		{strings.Replace(rec(m(1, "")), `"lease/a.go"`, `"worker/a.go"`, 1), "is not a mutant of lease"},
		{strings.Replace(rec(m(1, "")), `"line":3`, `"line":0`, 1), "is not a mutant of lease"},
		{rec(m(1, `,"occurrence":-1`)), "is not a mutant of lease"},
		{`{"base":"abc","shards":8,"packages":{"lease":{"seconds_per_mutant":1,"mutants":23,"shards":[]}}}`, "run doublerun mutation record"},
		{`{"shards":8,"packages":{}}`, "names no base commit"},
	} {
		_, err := ReadRecord(write(tc.body))
		require.ErrorContains(t, err, tc.want, tc.body)
	}
	_, err = ReadRecord(filepath.Join(dir, "none.json"))
	require.ErrorContains(t, err, "no gate run has passed yet")
}

// After a passing run the record holds what the run measured for the
// mutants it ran, carries every other mutant over by identity to where its
// line is now, drops one whose line changed, and keeps its cost of a
// mutant against a run of too few mutants (TestRecordAfterTakesTheCost).
func TestRecordAfter(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "lease"), 0o755))
	// A line was added on top: "if a < b {" moved from 1 to 2, and
	// "if c < d {" became "if c <= d {". The second "x++" moved from 5 to
	// 6 behind the first.
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("new()\nif a < b {\nif c <= d {\nif e < f {\nx++\nx++\n"), 0o644))
	const b = "CONDITIONALS_BOUNDARY"
	rec := Record{Base: "old", Shards: 8, Packages: map[string]PackageRecord{
		"lease": {SecondsPerMutant: 9, Mutants: []RecordedMutant{
			{File: "lease/a.go", Line: 1, Column: 6, Mutator: b, Code: "if a < b {", Status: StatusRunnable, Run: KindDryRun},
			{File: "lease/a.go", Line: 2, Column: 6, Mutator: b, Code: "if c < d {", Status: StatusKilled, Run: KindFull},
			{File: "lease/a.go", Line: 3, Column: 6, Mutator: b, Code: "if e < f {", Status: StatusRunnable, Run: KindDryRun},
			{File: "lease/a.go", Line: 5, Column: 2, Mutator: "INCREMENT_DECREMENT", Code: "x++", Occurrence: 1, Status: StatusKilled, Run: KindFull},
		}},
		"worker": {SecondsPerMutant: 4},
	}}
	r := report("a.go:4:"+b+":KILLED", "a.go:3:"+b+":KILLED")
	r.ElapsedTime = 10
	ms, err := Identify(root, "lease", r, KindCI)
	require.NoError(t, err)
	ms[1].KilledBy = "TestE"
	run := CIRun{Packages: []CIPackage{{Name: "lease", Report: r}}, Results: []CIResult{{Name: "lease", Mutants: ms,
		Part: PackageResult{Score: Score{Killed: 2}}}}}
	got := rec.After(root, run, "new", KindCI)
	require.Equal(t, "new", got.Base)
	require.Equal(t, 8, got.Shards)
	require.Equal(t, 4.0, got.Packages["worker"].SecondsPerMutant, "a package the run did not gate is kept")
	require.Equal(t, 9.0, got.Packages["lease"].SecondsPerMutant, "10 s over two mutants is mostly gremlins' coverage run")
	require.Equal(t, []RecordedMutant{
		{File: "lease/a.go", Line: 2, Column: 6, Mutator: b, Code: "if a < b {", Status: StatusRunnable, Run: KindDryRun},
		{File: "lease/a.go", Line: 3, Column: 1, Mutator: b, Code: "if c <= d {", Status: StatusKilled, Run: KindCI},
		{File: "lease/a.go", Line: 4, Column: 1, Mutator: b, Code: "if e < f {", Status: StatusKilled, Run: KindCI, KilledBy: "TestE"},
		{File: "lease/a.go", Line: 6, Column: 2, Mutator: "INCREMENT_DECREMENT", Code: "x++", Occurrence: 1, Status: StatusKilled, Run: KindFull},
	}, got.Packages["lease"].Mutants)
	require.Len(t, rec.Packages["lease"].Mutants, 4, "the old record is left as it was")
	require.Equal(t, 1, rec.Packages["lease"].Mutants[0].Line)
}

// A run's wall time over its mutants replaces the recorded cost of a
// mutant when it tested minCostSample of them, or when none is recorded.
func TestRecordAfterTakesTheCost(t *testing.T) {
	t.Parallel()
	after := func(recorded float64, killed int) float64 {
		rec := Record{Packages: map[string]PackageRecord{"lease": {SecondsPerMutant: recorded}}}
		r := report()
		r.ElapsedTime = 100
		changed := min(killed, 1)
		run := CIRun{Packages: []CIPackage{{Name: "lease", Report: r}}, Results: []CIResult{{Name: "lease",
			Part: PackageResult{Score: Score{Killed: killed - changed}}, Changed: PackageResult{Score: Score{Killed: changed}}}}}
		return rec.After(t.TempDir(), run, "new", KindCI).Packages["lease"].SecondsPerMutant
	}
	require.Equal(t, 5.0, after(9, minCostSample), "100 s over 20 mutants, the changed lines' counted")
	require.Equal(t, 9.0, after(9, minCostSample-1), "one mutant short: the recorded cost stays")
	require.Equal(t, 50.0, after(0, 2), "none recorded: the run's, however few")
	require.Equal(t, 0.0, after(0, 0), "no mutant tested: nothing to divide")
}

func TestIdentify(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "lease"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "lease", "a.go"), []byte("  i++\n\ti++\n"), 0o644))
	ms, err := Identify(root, "lease", report("a.go:2:INCREMENT_DECREMENT:KILLED", "a.go:1:INCREMENT_DECREMENT:SKIPPED"), KindFull)
	require.NoError(t, err)
	require.Equal(t, []RecordedMutant{{File: "lease/a.go", Line: 2, Column: 1, Mutator: "INCREMENT_DECREMENT", Code: "i++", Occurrence: 1, Status: StatusKilled, Run: KindFull}}, ms)
	_, err = Identify(root, "lease", report("a.go:9:INCREMENT_DECREMENT:KILLED"), KindFull)
	require.ErrorContains(t, err, "gremlins names a.go:9, but the file has 3 lines")
}

// The estimate is the recorded cost of a mutant times the mutants.
func TestRecordEstimate(t *testing.T) {
	t.Parallel()
	rec := Record{Packages: map[string]PackageRecord{"lease": {SecondsPerMutant: 2.5}}}
	require.Equal(t, 10*time.Second, rec.Estimate("lease", 4))
	require.Zero(t, rec.Estimate("worker", 4), "no cost recorded")
}
