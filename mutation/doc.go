// Package mutation is doublerun's mutation gate: it shows that the tests
// catch the bugs they claim to catch.
//
// # Why a gate
//
// Every guard in lease and worker exists because a specific failure is
// possible: a PID that no longer matches, a Faulted lease routed like a
// healthy Follower, a heartbeat stamped on a failed poll, a stale token
// accepted. A test that passes proves nothing about a guard unless the same
// test fails once the guard is gone. The service doublerun comes from
// checked that by hand, with one script per guard: make one exact-string
// edit that must match exactly once, rebuild, run one named test, classify
// the result as killed or survived, restore the file. This package keeps
// the method and drops the hand: the edits are data, the runs are parallel
// and the working tree is never touched.
//
// # Two tools, two questions
//
// Named guards answer "does the test that claims this guard catch its
// removal?". Each [Guard] in testdata/mutation/*.guards.json names a file,
// an exact snippet, its replacement and a go test -run pattern.
// [RunGuards] runs those tests twice, through go test -overlay so the
// mutant only ever exists in a temp dir:
//
//	snippet exactly once in file? ── no ──────▶ NOT_APPLIED
//	        │ yes
//	        ▼
//	named tests, unmutated ───────── fail ────▶ BASELINE_FAILED
//	        │                  ───── none ran ▶ NO_TESTS_RAN
//	        │ pass
//	        ▼
//	named tests on the mutant ────── fail ────▶ KILLED (the only pass)
//	                           ───── pass ────▶ SURVIVED
//	                           ───── no build ▶ BUILD_FAILED
//	                           ───── hang ────▶ TIMED_OUT
//
// A go test that fails before any test starts is ERROR. Guards with the
// same package and run pattern share one unmutated run. A guard is exact
// and cheap, a handful of tests per mutant, so the whole manifest can run
// on every submission.
//
// gremlins answers the broad question, "how much of the code could change
// without any test noticing?". It mutates every arithmetic operator and
// comparison it can find and runs the whole package's tests on each, so it
// finds gaps nobody wrote a guard for, at the price of many times the
// guards' run time. [ReadReport] and [Gate] turn its JSON report into per-package
// test efficacy (killed / (killed + lived)) and mutant coverage ((killed +
// lived) / (killed + lived + not covered)), list every LIVED and NOT
// COVERED mutant as file:line:type, and fail when a package falls below a
// threshold or below the committed [Baseline]. The gate compares with "at
// least": gremlins' own thresholds fail a score equal to them, so they are
// off in .gremlins.yaml.
//
// A guard that survives is a test that lies about what it covers; a
// gremlins mutant that lives is code no test constrains. The first must be
// fixed before a merge, the second is a ratchet: the baseline only rises.
//
// Two readings of gremlins v0.6.0's figures matter here. Mutant coverage
// is understated: Go's coverage profile has no counter for the condition
// of a tagless switch's case clause or for a constant expression, so
// gremlins reports every such mutant NOT COVERED and never runs it
// (gremlins#298), however well it is tested. The case conditions that
// guard something (the health threshold, running out of attempts, the
// endpoint verdicts) are named guards instead. And a TIMED OUT mutant, one
// that makes a test wait until gremlins' timeout, counts in neither score.
//
// # Leaving nothing behind
//
// Every go test runs in a process group of its own. Cancelling
// [RunGuards] (Ctrl-C in `doublerun mutation guards`) sends the group
// SIGTERM, which lets a test binary's TestMain close the stack it started,
// and SIGKILL after a grace period; the runner waits for every process and
// removes its one temp dir, which also holds go's build directories
// (GOTMPDIR).
//
// # Fixture
//
// testdata/fixture is a module of its own (the go tool skips testdata
// directories) with a guard for every verdict, so the runner is tested
// end to end without depending on lease or worker. testdata/gotest holds
// real go test output and testdata/gremlins real gremlins reports, each
// with the script that captured it.
package mutation
