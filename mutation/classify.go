package mutation

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Outcome is what happened to one guard.
type Outcome string

// The outcomes. Only Killed passes the gate.
const (
	// Killed: the named tests pass unmutated and fail with the mutant.
	Killed Outcome = "KILLED"
	// Survived: the named tests pass with the mutant; they do not catch
	// the guard's removal.
	Survived Outcome = "SURVIVED"
	// NotApplied: the snippet is missing from the file or occurs more than
	// once, so the manifest no longer describes the code.
	NotApplied Outcome = "NOT_APPLIED"
	// BuildFailed: the mutant does not compile (or go test's setup fails
	// on it), so no test judged it.
	BuildFailed Outcome = "BUILD_FAILED"
	// NoTestsRan: the run pattern matches no test in the package.
	NoTestsRan Outcome = "NO_TESTS_RAN"
	// BaselineFailed: the named tests already fail, or do not build,
	// without the mutant, so their failure with it proves nothing.
	BaselineFailed Outcome = "BASELINE_FAILED"
	// TimedOut: the tests ran into the guard's timeout. A test that hangs
	// on a mutant is inconclusive, not a catch; give it a deadline of its
	// own that fails.
	TimedOut Outcome = "TIMED_OUT"
	// Errored: go test failed without a test failing, for example a
	// TestMain that exits before running any test, or go itself could not
	// start.
	Errored Outcome = "ERROR"
)

var (
	runLine      = regexp.MustCompile(`(?m)^=== RUN\s+\S`)
	failLine     = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	buildFailed  = regexp.MustCompile(`(?m)^FAIL\s+\S+ \[(build|setup) failed\]$`)
	testTimedOut = regexp.MustCompile(`(?m)^panic: test timed out after (\S+)`)
	noTests      = regexp.MustCompile(`(?m)^testing: warning: no tests to run$|\[no tests to run\]$`)
)

// Classify judges one `go test -v` run of one package from its combined
// output and its exit code. It does not know whether the code was mutated:
// a run of unmutated code that comes back Survived is a passing baseline.
// The detail names the failing tests or the first compiler error.
//
// A failure counts as a test failure (Killed) when at least one test
// started (a `=== RUN` line) and the run did not end in go test's own
// timeout; a `--- FAIL` line is not required, because a mutant that
// crashes the test binary from a goroutine prints a panic and no
// `--- FAIL`.
func Classify(output []byte, exitCode int) (Outcome, string) {
	if m := buildFailed.FindSubmatch(output); m != nil {
		return BuildFailed, string(m[1]) + " failed: " + firstError(output)
	}
	if m := testTimedOut.FindSubmatch(output); m != nil {
		return TimedOut, "go test -timeout " + string(m[1]) + " expired"
	}
	ran := runLine.Match(output)
	if exitCode == 0 {
		if !ran || noTests.Match(output) {
			return NoTestsRan, "the run pattern matches no test"
		}
		return Survived, "tests passed"
	}
	if !ran {
		return Errored, fmt.Sprintf("go test exited %d before any test ran: %s", exitCode, firstError(output))
	}
	if failed := failedTests(output); len(failed) > 0 {
		return Killed, "failed: " + strings.Join(failed, ", ")
	}
	return Killed, fmt.Sprintf("test binary exited %d: %s", exitCode, firstPanic(output))
}

// failedTests lists the tests with a `--- FAIL` line, in order of
// appearance, leaving out a parent whose subtest failed: the subtest says
// more.
func failedTests(output []byte) []string {
	var all []string
	for _, m := range failLine.FindAllSubmatch(output, -1) {
		all = append(all, string(m[1]))
	}
	var names []string
	for _, n := range all {
		if !slices.ContainsFunc(all, func(o string) bool { return strings.HasPrefix(o, n+"/") }) {
			names = append(names, n)
		}
	}
	return names
}

// firstError returns the first line of output that is not a `# package`
// header: the compiler's first error, or what a TestMain said before it
// exited.
func firstError(output []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(output))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return line
	}
	return "(no compiler output)"
}

func firstPanic(output []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(output))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			return line
		}
	}
	return lastLine(output)
}

func lastLine(output []byte) string {
	lines := strings.Split(strings.TrimSpace(string(output)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && l != "FAIL" {
			return l
		}
	}
	return "(no output)"
}

// tail returns the last n lines of output.
func tail(output []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(output), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
