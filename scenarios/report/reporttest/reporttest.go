// Package reporttest checks scenario reports the way a reader of
// report.json would, for tests: Recompute parses the file as plain JSON
// and computes every figure of its metrics, the linearizability verdict
// and the verdict's pass from its history with code of its own, written
// from the definitions in package oracle's documentation rather than
// from its code, and names every figure that differs. Save writes a
// report a test produced, keeps it where CI checks it again with
// `doublerun check` (DOUBLERUN_TEST_REPORTS), and requires that
// Recompute agrees with it.
//
// A figure that cannot be recomputed from the file, because the history
// lacks something it came from, shows here as a difference.
package reporttest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/report"
)

// EnvReports names the directory under which the tests that produce
// reports keep them, for `doublerun check` after `go test` (the Makefile's
// test target sets it); when it is unset nothing is kept.
const EnvReports = "DOUBLERUN_TEST_REPORTS"

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_./-]+`)

// Dir is where the reports of t are kept: EnvReports/<test binary>/<test
// name>, or a temp dir of t's when EnvReports is unset.
func Dir(t testing.TB) string {
	root := os.Getenv(EnvReports)
	if root == "" {
		return t.TempDir()
	}
	bin := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	return filepath.Join(root, unsafe.ReplaceAllString(bin, "_"), filepath.FromSlash(unsafe.ReplaceAllString(t.Name(), "_")))
}

// Save writes rep's files (report.Write) under Dir(t), reads report.json
// back and requires that every figure recomputes from it.
func Save(t testing.TB, rep *scenarios.Report) {
	t.Helper()
	dir := Dir(t)
	require.NoError(t, report.Write(dir, rep))
	Check(t, filepath.Join(dir, filepath.FromSlash(rep.Scenario.Name), "report.json"))
}

// Keep copies every report.json under dir (a run's --out) to Dir(t) and
// requires that each recomputes.
func Keep(t testing.TB, dir string) {
	t.Helper()
	into := Dir(t)
	found := 0
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "report.json" {
			return err
		}
		found++
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(into, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
		Check(t, dst)
		return nil
	}))
	require.Positive(t, found, "no report.json under %s", dir)
}

// Check requires that every figure of the report.json at path recomputes
// from its history, and that doublerun check agrees with the report as it
// is and as `jq -c .` and a Python round trip write it back.
func Check(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	diffs, err := Recompute(data)
	require.NoError(t, err, path)
	require.Empty(t, diffs, "%s: figures that do not recompute from the history", path)
	for _, f := range []struct {
		name   string
		format func([]byte) ([]byte, error)
	}{
		{"as written", func(b []byte) ([]byte, error) { return b, nil }},
		{"after jq -c .", JQ},
		{"after a Python json round trip", Python},
	} {
		again, err := f.format(data)
		require.NoError(t, err, path)
		r, err := report.Recompute(again)
		require.NoError(t, err, "%s %s", path, f.name)
		require.Empty(t, r.Diffs, "%s %s: doublerun check differs", path, f.name)
	}
}
