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
// A go test that fails before any test starts is ERROR. A guard that
// reaches TIMED_OUT is run again alone before it is judged (see "A
// timeout is not a verdict"). Guards with the
// same package and run pattern share one unmutated run. A guard is exact
// and cheap, a handful of tests per mutant, so the whole manifest can run
// on every submission.
//
// gremlins answers the broad question, "how much of the code could change
// without any test noticing?". It mutates every arithmetic operator and
// comparison it can find and runs the whole package's tests on each, so it
// finds gaps nobody wrote a guard for, at the price of many times the
// guards' run time. [ReadReport] reads its JSON report; [Identify] gives
// each mutant its identity (file, the text of its line and how many lines
// of that text precede it, mutator, rank among that mutator's mutants on
// the line), so that a line that moves without changing keeps its
// mutants. The gates compare mutants, one by one, with the committed
// [Record] ([JudgeCI]); test efficacy (killed / (killed + lived)) and
// mutant coverage ((killed + lived) / (killed + lived + not covered)) are
// printed and never compared. ([Gate], behind `doublerun mutation gate`,
// still gates reports given to it by hand against thresholds or a
// [Baseline], as a user may want for code of their own.)
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
//	                testdata/mutation/record.json names
//	one shard       the mutants of 1/N of the gated packages' lines, the
//	                shard 1 + (commits in HEAD's history mod N): N
//	                submissions in a row cover every mutant
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
// Each mutant that ran is compared with the record's entry for it. A
// submission fails only on
//
//   - a mutant of a changed line that is not KILLED or NOT VIABLE, so new
//     code comes with tests that kill its mutants;
//   - a mutant the record has covered (KILLED, LIVED, NOT VIABLE, or
//     RUNNABLE from a dry run) that is now NOT COVERED: a test stopped
//     running it;
//   - a LIVED mutant, named with what the record had (and the tests that
//     killed it, where a run knew them; gremlins v0.6.0 does not say): a
//     recorded KILLED one is a weakened test, which is how a deleted
//     assertion, a change to no source line, is caught when its shard
//     comes round; one the record lacks is new code no test constrains;
//
// and listed equivalents are excused from all three. No percentage is
// compared: gremlins' TIMED OUT, which depends on the machine's load,
// left both sides of a ratio, and a gate comparing ratios with recorded
// ones flipped on one commit.
//
// # A timeout is not a verdict
//
// A mutant gremlins reports TIMED OUT is run again alone when gremlins is
// done ([RerunTimedOut]): the package's test binary is built and run once
// unmutated to measure its clean time in this run, with the same flags and
// stack, then the mutant, applied with gremlins' own token table
// ([ApplyMutant]) through go test -overlay, is built and run bounded by
// three times that, and at least [MinRerunBound]. Its tests failing make it KILLED, passing LIVED, and
// running to the bound again KILLED by its own endless loop; a mutant that
// does not build is NOT VIABLE. Only the test run is timed, never the
// build. A named guard that times out is re-run alone the same way,
// bounded by three times its tests' unmutated run, with the same floor. The gate's output
// names every mutant and guard classified so, with both runs' times.
//
// # The record
//
// testdata/mutation/record.json holds every mutant of the gated packages
// at its base commit by identity, with its status and the kind of run
// that measured it: "full" (make mutation), "ci" (a gate run with
// --write-record, which updates the mutants it ran and carries the rest
// over by identity, dropping those whose line changed), or "dry-run"
// (`doublerun mutation record`: a gremlins dry run of a commit in a
// worktree of it, which measures each mutant's coverage, RUNNABLE or NOT
// COVERED, from a real go test -cover and runs no mutant). A dry run's
// record is weaker than a full run's only in what it knows: its RUNNABLE
// mutants fail when they live or lose their coverage, like KILLED ones,
// and passing gate runs replace its statuses with what the mutants did.
//
// A line's shard is a hash of its file, its text and how many lines of the
// same text precede it ([ShardOf]), so a line keeps its shard while code
// around it moves. The lines reach gremlins v0.6.0 as the git diff its
// --diff flag reads ([Unleash]), which is also how they get the
// package-relative names its mutants have.
//
// Before any mutant runs, the gate estimates its own wall time from the
// record's cost of a mutant and its count of the shard's covered mutants
// (counting the changed lines' mutants with a dry run) and fails at once
// when the change's own mutants, those outside the shard, would take
// longer than its budget: a change that large is gated by a full run,
// make mutation (`doublerun mutation full`), which judges every mutant
// against the record the same way and whose pass writes a new one.
// Nightly, the full run is one job per shard plus one that joins their
// reports ([MergeReports]). Only a passing run on a clean working tree
// writes a record: its base is the commit that passed.
//
// Two readings of gremlins v0.6.0's figures matter here. Mutant coverage
// is understated: Go's coverage profile has no counter for the condition
// of a tagless switch's case clause or for a constant expression, so
// gremlins reports every such mutant NOT COVERED and never runs it
// (gremlins#298), however well it is tested. The case conditions that
// guard something (the health threshold, running out of attempts, the
// endpoint verdicts) are named guards instead. And a TIMED OUT mutant
// counts in neither of gremlins' scores; the gate never leaves one so.
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
