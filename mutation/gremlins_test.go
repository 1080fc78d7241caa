package mutation

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testdata/gremlins/clamp.json is what gremlins v0.6.0 wrote for the
// fixture's clamp package (testdata/gremlins/capture.sh). It printed
// "Killed: 6, Lived: 6, Not covered: 2 / Timed out: 2, Not viable: 0 /
// Test efficacy: 50.00% / Mutator coverage: 85.71%".
func readClamp(t *testing.T) Report {
	t.Helper()
	r, err := ReadReport(filepath.Join("testdata", "gremlins", "clamp.json"))
	require.NoError(t, err)
	return r
}

func TestReadReport(t *testing.T) {
	t.Parallel()
	r := readClamp(t)
	s := r.count()
	require.Equal(t, Score{Killed: 6, Lived: 6, NotCovered: 2, TimedOut: 2}, s)
	require.Equal(t, 50.0, s.Efficacy())
	require.InDelta(t, 85.71, s.Coverage(), 0.005)
	require.Equal(t, r.MutationsCoverage, s.Coverage(), "same formula as gremlins, to the bit")
	require.Equal(t, "doublerun.test/fixture", r.GoModule)

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		_, err := ReadReport(filepath.Join(t.TempDir(), "lease.json"))
		require.ErrorContains(t, err, "does not exist; gremlins writes none when it is interrupted")
	})
	t.Run("DryRunIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := ReadReport(filepath.Join("testdata", "gremlins", "clamp-dry-run.json"))
		require.ErrorContains(t, err, "comes from a dry run")
	})
	// The gate's own dry runs count the mutants of changed lines; gremlins
	// counts their RUNNABLE mutants as covered (3 runnable, none not
	// covered: 100 %; 14 and 2: 87.5 %).
	t.Run("DryRunReadAsOne", func(t *testing.T) {
		t.Parallel()
		for file, runnable := range map[string]int{"lease-dry-run.json": 3, "clamp-dry-run.json": 14} {
			r, err := readReport(filepath.Join("testdata", "gremlins", file), readOptions{allowEmpty: true, dryRun: true})
			require.NoError(t, err, file)
			require.Equal(t, runnable, r.count().Runnable, file)
		}
	})
	t.Run("InconsistentIsRefused", func(t *testing.T) {
		t.Parallel()
		edited := r
		edited.Files = []ReportFile{{FileName: r.Files[0].FileName, Mutations: append([]Mutation(nil), r.Files[0].Mutations...)}}
		for i, m := range edited.Files[0].Mutations {
			if m.Status == StatusLived {
				edited.Files[0].Mutations[i].Status = StatusKilled
				break
			}
		}
		_, err := ReadReport(writeJSON(t, edited))
		require.ErrorContains(t, err, "is inconsistent: it lists 7 killed, 5 lived")
	})
	// Anything that is not a whole gremlins v0.6.0 report is refused with
	// one line naming the file, however its counts add up.
	for _, tc := range []struct {
		name, json, want string
	}{
		{"EmptyObject", `{}`, "it names no go_module"},
		{"NoMutants", `{"go_module":"m","files":[]}`, "it lists no mutant"},
		{"UnknownField", `{"go_module":"m","efficacy":100}`, `unknown field "efficacy"`},
		{"UnknownStatus", `{"go_module":"m","files":[{"file_name":"a.go","mutations":[{"type":"ARITHMETIC_BASE","status":"SURVIVED","line":3,"column":2}]}]}`,
			`a.go:3 has the unknown status "SURVIVED"`},
		{"UnknownMutator", `{"go_module":"m","files":[{"file_name":"a.go","mutations":[{"type":"SWAP","status":"KILLED","line":3,"column":2}]}]}`,
			`a.go:3 has the unknown mutator "SWAP"`},
		{"MissingMutator", `{"go_module":"m","files":[{"file_name":"a.go","mutations":[{"status":"KILLED","line":3,"column":2}]}]}`,
			`a.go:3 has the unknown mutator ""`},
		{"MissingLine", `{"go_module":"m","files":[{"file_name":"a.go","mutations":[{"type":"ARITHMETIC_BASE","status":"KILLED","column":2}]}]}`,
			"a ARITHMETIC_BASE mutant in a.go has line 0, column 2"},
		{"MissingFileName", `{"go_module":"m","files":[{"mutations":[]}]}`, "a file has no file_name"},
		{"TwoObjects", `{"go_module":"m","files":[{"file_name":"a.go","mutations":[{"type":"ARITHMETIC_BASE","status":"NOT COVERED","line":3,"column":2}]}],"mutants_not_covered":1}{}`,
			"more follows its JSON object"},
		{"NotJSON", `Killed: 5`, "invalid character 'K' looking for beginning of value"},
	} {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "lease.json")
			require.NoError(t, os.WriteFile(f, []byte(tc.json), 0o644))
			_, err := ReadReport(f)
			require.EqualError(t, err, f+" is not a gremlins v0.6.0 report: "+tc.want+"; give the file `gremlins unleash --output` wrote")
		})
	}
}

// testdata/gremlins/lease-first-run.json is the first full run on lease
// (mutation/run.sh with MUTATION_PACKAGES=lease and the native provider,
// 30m43s): "Killed: 89, Lived: 14, Not covered: 14 / Timed out: 0 / Test
// efficacy: 86.41% / Mutator coverage: 88.03%". Its line numbers belong to
// the lease code of that day. 89/103 is 86.4078%, which gremlins prints as
// 86.41%; the baseline floor of that run is 86.40.
func TestReadRealLeaseReport(t *testing.T) {
	t.Parallel()
	r, err := ReadReport(filepath.Join("testdata", "gremlins", "lease-first-run.json"))
	require.NoError(t, err)
	require.Equal(t, "github.com/doublerun/doublerun", r.GoModule)
	res := Gate([]PackageReport{{"lease", r}}, GateOptions{MinEfficacy: 86.40, MinCoverage: 88.03})
	require.Empty(t, res.Failures)
	p := res.Packages[0]
	require.Equal(t, Score{Killed: 89, Lived: 14, NotCovered: 14}, p.Score)
	require.Len(t, p.Lived, 14)
	require.Equal(t, "lease/advisory.go:91:CONDITIONALS_BOUNDARY", p.Lived[0])
	require.Len(t, p.NotCovered, 14)
}

func TestGate(t *testing.T) {
	t.Parallel()
	r := readClamp(t)
	reports := []PackageReport{{Name: "clamp", Report: r}}

	res := Gate(reports, GateOptions{})
	require.Empty(t, res.Failures)
	require.Len(t, res.Packages, 1)
	p := res.Packages[0]
	// Sorted by line; two mutants of one line (different columns) are
	// two entries.
	require.Equal(t, []string{
		"clamp/clamp.go:14:CONDITIONALS_BOUNDARY",
		"clamp/clamp.go:19:CONDITIONALS_BOUNDARY",
		"clamp/clamp.go:60:CONDITIONALS_NEGATION",
		"clamp/clamp.go:64:CONDITIONALS_NEGATION",
		"clamp/clamp.go:65:ARITHMETIC_BASE",
		"clamp/clamp.go:65:ARITHMETIC_BASE",
	}, p.Lived)
	require.Equal(t, []string{"clamp/clamp.go:52:CONDITIONALS_NEGATION", "clamp/clamp.go:55:ARITHMETIC_BASE"}, p.NotCovered)
	require.Equal(t, p.Score, res.Total)

	for _, tc := range []struct {
		name string
		opts GateOptions
		want []string
	}{
		// gremlins fails a score equal to its threshold; the gate does not.
		{"EqualToThresholdsPasses", GateOptions{MinEfficacy: 50, MinCoverage: r.MutationsCoverage}, nil},
		{"EqualToBaselinePasses", GateOptions{Baseline: Baseline{"clamp": {Efficacy: 50, Coverage: r.MutationsCoverage}}}, nil},
		{"BaselineRoundedDownPasses", GateOptions{Baseline: Baseline{"clamp": {Efficacy: 50, Coverage: 85.71}}}, nil},
		{"BelowEfficacyThreshold", GateOptions{MinEfficacy: 50.01}, []string{"clamp: efficacy 50.00% is below the threshold 50.01%"}},
		{"BelowCoverageThresholdByLessThanARoundedDigit", GateOptions{MinCoverage: 85.7145}, []string{"clamp: mutant coverage 85.7143% is below the threshold 85.7145%"}},
		{"BelowBaseline", GateOptions{Baseline: Baseline{"clamp": {Efficacy: 80, Coverage: 90}}}, []string{
			"clamp: efficacy 50.00% is below the baseline 80.00%",
			"clamp: mutant coverage 85.71% is below the baseline 90.00%",
		}},
		{"BaselinePackageWithoutReport", GateOptions{Baseline: Baseline{"clamp": {}, "worker": {}}}, []string{
			"worker: the baseline names it but no report covers it; run gremlins on ./worker",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Gate(reports, tc.opts).Failures)
		})
	}

	t.Run("TotalsAddUp", func(t *testing.T) {
		t.Parallel()
		res := Gate([]PackageReport{{"lease", r}, {"worker", r}}, GateOptions{})
		require.Equal(t, Score{Killed: 12, Lived: 12, NotCovered: 4, TimedOut: 4}, res.Total)
		require.Equal(t, "worker/clamp.go:14:CONDITIONALS_BOUNDARY", res.Packages[1].Lived[0])
	})
	t.Run("TwoReportsForOnePackage", func(t *testing.T) {
		t.Parallel()
		res := Gate([]PackageReport{{"lease", r}, {"lease", r}}, GateOptions{})
		require.Equal(t, []string{"lease: two reports for one package"}, res.Failures)
	})
}

// The gate's wall time is decided by the cost of one mutant's test run;
// clamp.json's 20.4 s went to 14 test runs (6 killed, 6 lived, 2 timed
// out; its 2 not-covered mutants ran no test).
func TestGateReportsTheCostOfAMutant(t *testing.T) {
	t.Parallel()
	r := readClamp(t)
	res := Gate([]PackageReport{{Name: "clamp", Report: r}, {Name: "clamp2", Report: r}}, GateOptions{})
	p := res.Packages[0]
	require.Equal(t, 20418503029*time.Nanosecond, p.Elapsed)
	require.Equal(t, 14, p.Score.Tested())
	require.Equal(t, p.Elapsed/14, p.Score.PerMutant(p.Elapsed))
	require.Equal(t, 2*p.Elapsed, res.Elapsed, "the total adds the packages up")
	require.Zero(t, Score{NotCovered: 3, Skipped: 1}.PerMutant(time.Minute), "no test ran, no cost per test run")
	require.Equal(t, 30*time.Second, Score{NotViable: 1, Killed: 1}.PerMutant(time.Minute), "a not-viable mutant still builds")
}

func TestBaselineRaiseNeverLowers(t *testing.T) {
	t.Parallel()
	r := readClamp(t)
	measured := Gate([]PackageReport{{"lease", r}, {"worker", r}}, GateOptions{}).Packages
	b := Baseline{"lease": {Efficacy: 0, Coverage: 0}, "worker": {Efficacy: 90, Coverage: 10}, "other": {Efficacy: 1, Coverage: 1}}
	got := b.Raise(measured)
	require.Equal(t, Baseline{
		"lease":  {Efficacy: 50, Coverage: 85.71},
		"worker": {Efficacy: 90, Coverage: 85.71},
		"other":  {Efficacy: 1, Coverage: 1},
	}, got)
	require.Equal(t, Figures{}, b["lease"], "Raise does not modify its receiver")

	f := filepath.Join(t.TempDir(), "baseline.json")
	require.NoError(t, got.Write(f))
	back, err := ReadBaseline(f)
	require.NoError(t, err)
	require.Equal(t, got, back)
	require.Empty(t, Gate([]PackageReport{{"lease", r}}, GateOptions{Baseline: Baseline{"lease": back["lease"]}}).Failures,
		"a raised baseline passes the run it came from")
}

func TestCommittedBaselineParses(t *testing.T) {
	t.Parallel()
	b, err := ReadBaseline(filepath.Join("..", "testdata", "mutation", "baseline.json"))
	require.NoError(t, err)
	require.Contains(t, b, "lease")
	require.Contains(t, b, "worker")
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "report.json")
	require.NoError(t, os.WriteFile(f, data, 0o644))
	return f
}
