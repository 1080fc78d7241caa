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
// gremlins mutant that lives is code no test constrains. Both fail the
// gate, unless testdata/mutation/equivalents.json lists the mutant with
// why no test can or should kill it ([Equivalents]); the listed ones count
// in no score.
//
// # Every submission, and every mutant nightly
//
// gremlins runs the package's whole test suite once per mutant, so every
// mutant of lease, worker and scenarios/oracle takes longer than one CI
// run may. The gate of every submission ([RunCI], `doublerun mutation ci`,
// make mutation-ci) runs slices of them instead, and a slice of the
// named guards:
//
//	changed lines   every mutant on a line changed since the base
//	                testdata/mutation/record.json names: each must be
//	                KILLED, so new code comes with tests that kill it
//	one shard       the mutants of 1/N of the gated packages' lines, the
//	                shard 1 + (commits in HEAD's history mod N): N
//	                submissions in a row cover every mutant; a LIVED one
//	                fails, which is how a deleted assertion, a change to
//	                no source line, is caught when its shard comes round;
//	                the shard's figures must reach its record
//	whole packages  every mutant of a package cheap enough (CIOptions.Whole;
//	                none is at present: scenarios/oracle was, until its
//	                tests checked its SQL on a server)
//	named guards    every guard whose mutated file, package directory
//	                (tests and testdata included) or manifest changed
//	                since the base, and the guards of the same shard
//	                number ([PickGuards]): a change to a guard or to the
//	                test that claims it runs that guard at once, and N
//	                submissions in a row run them all
//
// A line's shard is a hash of its file, its text and how many lines of the
// same text precede it ([ShardOf]), so a line keeps its shard while code
// around it moves. The lines reach gremlins v0.6.0 as the git diff its
// --diff flag reads ([Unleash]), which is also how they get the
// package-relative names its mutants have.
//
// Before any mutant runs, the gate estimates its own wall time from the
// record's cost of a mutant (counting the changed lines' mutants with a
// dry run) and fails at once when the change's own mutants, those outside
// the shard, would take longer than its budget: a change that
// large is gated by a full run, make mutation (`doublerun mutation full`),
// whose pass writes a new record. Nightly, the full run is one job per
// shard plus one that joins their reports ([MergeReports]) and gates the
// whole. Only a passing run on a clean working tree writes a record
// ([Record]): its base is the commit that passed.
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
