package mutation

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The samples are real `go test -v` output of the fixture module, captured
// by testdata/gotest/capture.sh.
func TestClassifyRealGoTestOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sample string
		want   Outcome
		detail string
	}{
		{"pass", Survived, "tests passed"},
		{"killed", Killed, "failed: TestClampCapsAtHigh"},
		{"killed-subtests", Killed, "failed: TestFloorTable/0"},
		{"goroutine-panic", Killed, "test binary exited 1: panic: inside f"},
		{"panic", Killed, "failed: TestClampCapsAtHigh"},
		{"testmain-exits", Errored, "go test exited 1 before any test ran: stack: no provider can start a stack"},
		{"build-failed", BuildFailed, "build failed: /tmp/tmp."},
		{"vet-failed", BuildFailed, "redundant or: n > hi || n > hi"},
		{"setup-failed", BuildFailed, "setup failed: clamp/clamp.go:7:2: no required module provides package"},
		{"no-package", BuildFailed, "setup failed: stat "},
		{"no-tests", NoTestsRan, "matches no test"},
		{"baseline-failed", Killed, "failed: TestKnownBroken"},
		{"timed-out", TimedOut, "go test -timeout 3s expired"},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			t.Parallel()
			out, code := readSample(t, tc.sample)
			got, detail := Classify(out, code)
			require.Equal(t, tc.want, got, "detail: %s", detail)
			require.Contains(t, detail, tc.detail)
		})
	}
}

// The one case no fixture run produces.
func TestClassifyNoOutputIsNoTestsRan(t *testing.T) {
	t.Parallel()
	got, _ := Classify(nil, 0)
	require.Equal(t, NoTestsRan, got)
}

func readSample(t *testing.T, name string) ([]byte, int) {
	t.Helper()
	out, err := os.ReadFile(filepath.Join("testdata", "gotest", name+".txt"))
	require.NoError(t, err)
	code, err := os.ReadFile(filepath.Join("testdata", "gotest", name+".exit"))
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(code)))
	require.NoError(t, err)
	return out, n
}
