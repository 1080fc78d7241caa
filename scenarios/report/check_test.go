package report_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
)

// saved is the directory of reports of real runs.
var saved = filepath.Join("..", "..", "testdata", "reports")

// check compares values, not their text: a number as a number at the
// precision the report stores (the recomputed text's decimals), a time as
// an instant. Every saved report agrees as written, after `jq -c .` and
// after a Python round trip, with the same count of figures.
func TestCheckComparesValuesNotText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		file, again any
		same        bool
	}{
		{"ZeroAsJQWritesIt", json.Number("0"), json.Number("0.000"), true},
		{"ZeroAsPythonWritesIt", json.Number("0.0"), json.Number("0.000"), true},
		{"TrailingZerosDropped", json.Number("1.5"), json.Number("1.500"), true},
		{"ADoubleWrittenInFull", json.Number("2021.9680000000001"), json.Number("2021.968"), true},
		{"AnExponent", json.Number("1e-05"), json.Number("0.000"), true},
		{"BelowThePrecisionStored", json.Number("1.5004"), json.Number("1.500"), true},
		{"HalfAUnitRoundsAway", json.Number("0.0005"), json.Number("0.000"), false},
		{"AThousandthApart", json.Number("1.501"), json.Number("1.500"), false},
		{"AnotherWholeNumber", json.Number("18"), json.Number("17"), false},
		{"ANegativeNumber", json.Number("-1.5"), json.Number("1.500"), false},
		{"ANumberAsText", "0", json.Number("0.000"), false},
		{"TheSameInstantInAnotherZone", "2026-12-02T05:27:42.677071+01:00", "2026-12-02T04:27:42.677071Z", true},
		{"TheSameInstantWithTrailingZeros", "2026-12-02T04:27:42.677071000Z", "2026-12-02T04:27:42.677071Z", true},
		{"AnotherInstant", "2026-12-02T04:27:42.677072Z", "2026-12-02T04:27:42.677071Z", false},
		{"AnotherText", "no", "yes", false},
		{"AFlag", false, true, false},
		{"Missing", nil, json.Number("0"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.same, report.Same(tc.file, tc.again), "%v against %v", tc.file, tc.again)
		})
	}

	dirs, err := os.ReadDir(saved)
	require.NoError(t, err)
	checked := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(saved, d.Name(), "report.json"))
		require.NoError(t, err)
		as, err := report.Recompute(data)
		require.NoError(t, err)
		require.Empty(t, as.Diffs, d.Name())
		for name, format := range map[string]func([]byte) ([]byte, error){"jq -c .": reporttest.JQ, "python": reporttest.Python} {
			again, err := format(data)
			require.NoError(t, err)
			require.NotEqual(t, string(data), string(again), "%s changes the text", name)
			r, err := report.Recompute(again)
			require.NoError(t, err, "%s after %s", d.Name(), name)
			require.Empty(t, r.Diffs, "%s after %s", d.Name(), name)
			require.Equal(t, as.Figures, r.Figures, "%s after %s", d.Name(), name)
		}
		checked++
	}
	require.Equal(t, 5, checked)
}
