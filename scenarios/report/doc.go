// Package report is where one run's measurements become something to
// read: report.json, report.md and timeline.svg per run (Write, Markdown,
// SVG), and linearizability.html, porcupine's view of the fence, when the
// run's fence was checked; Recompute, which `doublerun check` runs, reads a
// report.json back strictly, refuses a history that lacks the evidence of
// its figures, and recomputes every figure from it, comparing values
// rather than their text; the progress line (Line) and the #556
// reproduction's text (Repro556). What a matrix of runs makes of its
// cells (their summary, cells.json, the comparison across version sets)
// is package chaos's.
//
// The runner, package scenarios, returns a Report as data and writes no
// file; the callers (the CLI, the chaos matrix, the reproductions) write
// through this package. Every judgement is one scenarios.Verdict, whose
// Err the CLI returns: a run's (Report.Verdict), and the #556
// reproduction's (Repro556Result.Verdict); a matrix cell's and a whole
// matrix's are package chaos's (CellResult.Verdict, Verdict).
package report
