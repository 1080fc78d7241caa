package mutation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Three mutants of the fixture that timed out in a run under load are run
// again alone, end to end (a real build through an overlay, a real test
// binary): one its tests kill, one they miss, and one whose loop never
// ends, which times out again and is killed by it. The report's statuses
// and counts become what those runs found, and the tree is never written.
func TestRerunTimedOut(t *testing.T) {
	t.Parallel()
	root := filepath.Join("testdata", "fixture")
	clamp := filepath.Join(root, "clamp", "clamp.go")
	before, err := os.ReadFile(clamp)
	require.NoError(t, err)
	r := Report{GoModule: "doublerun.test/fixture", Files: []ReportFile{{FileName: "clamp.go", Mutations: []Mutation{
		{Type: "CONDITIONALS_NEGATION", Status: StatusTimedOut, Line: 14, Column: 7}, // if n > hi
		{Type: "CONDITIONALS_BOUNDARY", Status: StatusTimedOut, Line: 19, Column: 7}, // if n < lo
		{Type: "INCREMENT_DECREMENT", Status: StatusTimedOut, Line: 28, Column: 23},  // i++
		{Type: "CONDITIONALS_NEGATION", Status: StatusKilled, Line: 28, Column: 16},  // i <= n
	}}}}
	r.recount()
	tmp := t.TempDir()
	reruns, err := RerunTimedOut(t.Context(), "clamp", &r, 7*time.Second, RerunOptions{Root: root, TempDir: tmp, Env: []string{"TMPDIR=" + tmp}})
	require.NoError(t, err)
	require.Len(t, reruns, 3)

	killed, lived, endless := reruns[0], reruns[1], reruns[2]
	require.Equal(t, StatusKilled, killed.Status)
	require.False(t, killed.EndlessLoop)
	require.Equal(t, "failed: TestClampCapsAtHigh", killed.Detail)
	require.Equal(t, StatusLived, lived.Status, "n <= lo returns lo, which n already is")
	require.Equal(t, StatusKilled, endless.Status)
	require.True(t, endless.EndlessLoop, "i-- never ends the loop")
	for _, rr := range reruns {
		require.Positive(t, rr.Clean)
		require.Equal(t, rr.Clean, reruns[0].Clean, "one clean run per package")
		require.Equal(t, max(time.Duration(3*float64(rr.Clean)), MinRerunBound), rr.Bound,
			"three times the clean time, and never less than the start-up jitter's floor")
		require.Equal(t, "clamp/clamp.go", rr.File)
		require.Equal(t, 7*time.Second, rr.First)
	}
	require.Less(t, killed.Took, killed.Bound)
	require.GreaterOrEqual(t, endless.Took, endless.Bound, "the endless one ran to its bound")
	require.Contains(t, endless.String(), "clamp/clamp.go:28:23:INCREMENT_DECREMENT TIMED OUT in gremlins' run (gremlins' bound 7s); alone: KILLED by its own endless loop (timed out again alone)")
	require.Contains(t, lived.String(), "alone: LIVED in ")

	var got []string
	for _, m := range r.Files[0].Mutations {
		got = append(got, m.Status)
	}
	require.Equal(t, []string{StatusKilled, StatusLived, StatusKilled, StatusKilled}, got)
	require.Equal(t, 3, r.MutantsKilled)
	require.Equal(t, 1, r.MutantsLived)
	require.Equal(t, 75.0, r.TestEfficacy)
	after, err := os.ReadFile(clamp)
	require.NoError(t, err)
	require.Equal(t, before, after, "the tree is never written")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the re-runs' files are removed")
}

// A report with no timed-out mutant runs nothing; a package whose tests
// fail unmutated cannot judge a mutant; a mutant gremlins' source does
// not have is refused.
func TestRerunTimedOutRefuses(t *testing.T) {
	t.Parallel()
	root := filepath.Join("testdata", "fixture")
	none := Report{Files: []ReportFile{{FileName: "clamp.go", Mutations: []Mutation{{Type: "CONDITIONALS_NEGATION", Status: StatusKilled, Line: 14, Column: 7}}}}}
	reruns, err := RerunTimedOut(t.Context(), "clamp", &none, 0, RerunOptions{Root: root, Go: "/nonexistent/go"})
	require.NoError(t, err)
	require.Empty(t, reruns)

	tmp := t.TempDir()
	broken := Report{Files: []ReportFile{{FileName: "broken.go", Mutations: []Mutation{{Type: "ARITHMETIC_BASE", Status: StatusTimedOut, Line: 1, Column: 1}}}}}
	_, err = RerunTimedOut(t.Context(), "broken", &broken, 0, RerunOptions{Root: root, TempDir: tmp})
	require.ErrorContains(t, err, "./broken: its tests fail unmutated, so no timed-out mutant can be judged")

	moved := Report{Files: []ReportFile{{FileName: "clamp.go", Mutations: []Mutation{{Type: "CONDITIONALS_NEGATION", Status: StatusTimedOut, Line: 14, Column: 8}}}}}
	_, err = RerunTimedOut(t.Context(), "clamp", &moved, 0, RerunOptions{Root: root, TempDir: tmp})
	require.ErrorContains(t, err, "re-run clamp/clamp.go:14:8:CONDITIONALS_NEGATION: no token starts at 14:8; is the tree the one gremlins mutated?")
}

// What a re-run alone found, from its test binary's output.
func TestRerunVerdict(t *testing.T) {
	t.Parallel()
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join("testdata", "gotest", name+".txt"))
		require.NoError(t, err)
		return data
	}
	for _, tc := range []struct {
		out      []byte
		code     int
		timedOut bool
		status   string
		endless  bool
		detail   string
	}{
		{nil, 0, true, StatusKilled, true, "still running after 3s"},
		{read("timed-out"), 1, false, StatusKilled, true, "go test -timeout"},
		{read("pass"), 0, false, StatusLived, false, "every test passed"},
		{read("killed"), 1, false, StatusKilled, false, "failed: "},
		{read("panic"), 2, false, StatusKilled, false, ""},
		{read("build-failed"), 1, false, StatusNotViable, false, "build failed"},
	} {
		status, endless, detail := rerunVerdict(tc.out, tc.code, tc.timedOut, 3*time.Second)
		require.Equal(t, tc.status, status, "%s", detail)
		require.Equal(t, tc.endless, endless, detail)
		require.True(t, strings.HasPrefix(detail, tc.detail), "%q does not start with %q", detail, tc.detail)
	}
}

func TestGremlinsBound(t *testing.T) {
	t.Parallel()
	log := "Gathering coverage... done in 12.5s\nExecuting mutation testing on covered mutants...\n"
	require.Equal(t, 62500*time.Millisecond, GremlinsBound(log, 5))
	require.Zero(t, GremlinsBound("no such line", 5))
	require.Zero(t, GremlinsBound("done in forever", 5))
}

// A re-run's bound is three times its clean time, and never less than
// MinRerunBound: a package whose tests take milliseconds would otherwise
// time out on a test binary's start-up.
func TestRerunBound(t *testing.T) {
	t.Parallel()
	require.Equal(t, 30*time.Second, rerunBound(10*time.Second, 3))
	require.Equal(t, MinRerunBound, rerunBound(5*time.Millisecond, 3))
	require.Equal(t, "bound 30s (3 × clean 10s)", boundText(30*time.Second, 10*time.Second, 3))
	require.Equal(t, "bound 5s (the floor; 3 × clean 0s is less)", boundText(MinRerunBound, 5*time.Millisecond, 3))
}
