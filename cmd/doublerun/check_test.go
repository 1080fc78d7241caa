package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/report/reporttest"
)

// saved is the directory of reports of real runs.
var saved = filepath.Join("..", "..", "testdata", "reports")

// Every figure of the saved reports recomputes from their histories: one
// line per report, and a summary.
func TestCheckRecomputesSavedReports(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := cli(t, nil, "check", saved)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 6, stdout)
	for _, l := range lines[:5] {
		require.True(t, strings.HasPrefix(l, "ok      "), l)
		require.Contains(t, l, "figures agree")
		require.Contains(t, l, "fence linearizable yes")
	}
	require.Equal(t, "check: 5 agree, 0 differ, 0 refused", lines[5])
	require.Contains(t, stdout, "fenced-transaction-freeze-leader/report.json: ")
	require.Contains(t, stdout, "failover 2.093s, stale writes 0/1")
}

// A report whose figures do not follow from its history fails, and every
// figure that differs is named with both values; the other reports still
// pass.
func TestCheckNamesWhatDiffers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rep := edited(t, dir, "issue-556", func(rep map[string]any) {
		m := rep["metrics"].(map[string]any)
		m["double_run"].(map[string]any)["total"] = json.Number("1.500")
		m["linearizability"].(map[string]any)["operations"] = json.Number("3")
		rep["verdict"].(map[string]any)["pass"] = false
	})
	ok := filepath.Join(saved, "fenced-transaction-freeze-leader", "report.json")
	stdout, stderr, code := cli(t, nil, "check", rep, ok)
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "DIFFERS "+rep+": 3 of ")
	require.Contains(t, stdout, "        metrics.double_run.total: report 1.500, recomputed 2021.968\n")
	require.Contains(t, stdout, "        metrics.linearizability.operations: report 3, recomputed 22\n")
	require.Contains(t, stdout, "        verdict.pass: report false, recomputed true\n")
	require.Contains(t, stdout, "ok      "+ok+": ")
	require.Contains(t, stdout, "check: 1 agree, 1 differ, 0 refused\n")
	require.Equal(t, "doublerun check: 1 report(s) differ and 0 refused; see the lines above\n", stderr)
}

// edited writes the saved report name to dir after change, and returns
// its path.
func edited(t *testing.T, dir, name string, change func(map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(saved, name, "report.json"))
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var rep map[string]any
	require.NoError(t, dec.Decode(&rep))
	change(rep)
	out, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	f, err := os.CreateTemp(dir, name+"-*.json")
	require.NoError(t, err)
	_, err = f.Write(out)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

// What is not a report of this doublerun is refused with one line each,
// never passed: a check that passed {} could not fail.
func TestCheckRefusesWhatItDoesNotUnderstand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"EmptyObject", write("empty.json", "{}"), `not a doublerun report: schema missing, this doublerun reads "doublerun.report/v2"`},
		{"NotJSON", write("text.json", "PASS issue-556"), "not a doublerun report: invalid character 'P' looking for beginning of value"},
		{"AnArray", write("array.json", "[]"), "not a doublerun report: json: cannot unmarshal array"},
		{"AnOlderSchema", edited(t, dir, "issue-556", func(r map[string]any) { r["schema"] = "doublerun.report/v1" }),
			`not a doublerun report: schema "doublerun.report/v1", this doublerun reads "doublerun.report/v2"`},
		{"NoMetrics", edited(t, dir, "issue-556", func(r map[string]any) { delete(r, "metrics") }), `not a doublerun report: it has no "metrics"`},
		{"NoHistory", edited(t, dir, "issue-556", func(r map[string]any) { delete(r, "history") }), `not a doublerun report: it has no "history"`},
		{"AnUnknownField", edited(t, dir, "issue-556", func(r map[string]any) {
			r["metrics"].(map[string]any)["triple_run"] = 0
		}), `not a doublerun report this doublerun understands: json: unknown field "triple_run"`},
		{"SomethingAfterIt", write("two.json", mustRead(t, filepath.Join(saved, "issue-556", "report.json"))+"{}"), "not a doublerun report: invalid character '{' after top-level value"},
		{"NoSuchFile", filepath.Join(dir, "missing.json"), "no such file or directory"},
		{"ADirectoryWithNoReport", empty, "no report.json under it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, nil, "check", tc.path)
			require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			require.Equal(t, "REFUSED "+tc.path+": ", stdout[:min(len(stdout), len("REFUSED "+tc.path+": "))], stdout)
			first, _, _ := strings.Cut(stdout, "\n")
			require.Contains(t, first, tc.want)
			require.Equal(t, "check: 0 agree, 0 differ, 1 refused", strings.Split(stdout, "\n")[1])
		})
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(data)
}

// No report named is a usage error.
func TestCheckWithoutReportsIsAUsageError(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := cli(t, nil, "check")
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.True(t, strings.HasPrefix(stderr, "doublerun check: check needs report.json files or directories holding them, such as reports/chaos\n\nUsage: doublerun check"), stderr)
	_, stderr, code = cli(t, nil, "check", "--strict", saved)
	require.Equal(t, 2, code)
	require.True(t, strings.HasPrefix(stderr, "doublerun check: unknown flag --strict"), stderr)
}

// A report written back by `jq -c .` or by Python's json.load and
// json.dump is the same report: check agrees with every saved one after
// either, as with the originals. reporttest's JQ and Python, which Check
// applies to every report the tests write, reprint numbers as these
// tools do.
func TestCheckAgreesAfterJQAndPython(t *testing.T) {
	t.Parallel()
	jq, err := exec.LookPath("jq")
	require.NoError(t, err, "install jq (apt-get install jq): users post-process reports with it")
	dirs, err := os.ReadDir(saved)
	require.NoError(t, err)
	out := t.TempDir()
	n := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		n++
		src := filepath.Join(saved, d.Name(), "report.json")
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		for tool, run := range map[string]*exec.Cmd{
			"jq":     exec.Command(jq, "-c", ".", src),
			"python": exec.Command("python3", "-c", "import json, sys; json.dump(json.load(open(sys.argv[1])), sys.stdout)", src),
		} {
			written, err := run.Output()
			require.NoError(t, err, tool)
			require.NotEqual(t, string(data), string(written))
			p := filepath.Join(out, tool, d.Name(), "report.json")
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, written, 0o644))
			emulate := map[string]func([]byte) ([]byte, error){"jq": reporttest.JQ, "python": reporttest.Python}[tool]
			mine, err := emulate(data)
			require.NoError(t, err)
			require.Equal(t, canonical(t, written), canonical(t, mine), "reporttest's %s writes numbers as %s does", tool, tool)
		}
	}
	for _, tool := range []string{"jq", "python"} {
		stdout, stderr, code := cli(t, nil, "check", filepath.Join(out, tool))
		require.Zero(t, code, "after %s:\n%s%s", tool, stdout, stderr)
		require.Contains(t, stdout, fmt.Sprintf("check: %d agree, 0 differ, 0 refused\n", n))
	}
}

// canonical is JSON data with its numbers as written and its keys sorted.
func canonical(t *testing.T, data []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return string(out)
}

// A report whose history lacks the evidence its figures stand on, or
// holds evidence that contradicts itself, is refused with one line that
// names what is missing: recomputing from what is left would agree with
// a forgery. Each case tampers with a real report of issue-556-fenced
// (the fenced lease, one leader r2 with 17 fenced writes); the forgeries
// rewrite the metrics, expectation and verdict to match what they left,
// so that every figure recomputes.
func TestCheckRefusesMissingEvidence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const name = "issue-556-fenced"
	notR2 := func(ivs []oracle.Interval) []oracle.Interval {
		return slices.DeleteFunc(ivs, func(iv oracle.Interval) bool { return iv.Replica == "r2" })
	}
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"NoTokenOperations", edited(t, dir, name, func(r map[string]any) {
			delete(r["metrics"].(map[string]any), "linearizability")
			delete(r["history"].(map[string]any), "token_ops")
		}), "evidence missing: history.token_ops is empty, yet strategy fenced has the runner record every grant of its token (table doublerun_leases); without them the fence cannot be checked"},
		{"FencedWritesOfACommandWithoutTokenOperations", forged(t, dir, name, func(r *scenarios.Report) {
			r.Scenario.Replica = &replica.Command{Command: []string{"my-lease"}}
			r.Protocol = &scenarios.ProtocolInfo{Mode: replica.ModeSQL}
			r.History.TokenOps = nil
		}), "evidence missing: history.token_ops is empty, yet 17 writes of the replica commands are marked fenced; a write is fenced only under a token granted in the strategy's token table, whose grants are missing"},
		{"AWriteOutsideWork", forged(t, dir, name, func(r *scenarios.Report) {
			r.History.Intervals = notR2(r.History.Intervals)
			r.Scenario.Expect = scenarios.ExpectReproduces
		}), "evidence missing: history.writes[0]: r2's write under token 1 at "},
		{"AGrantWithoutWork", forged(t, dir, name, func(r *scenarios.Report) {
			r.History.Intervals = notR2(r.History.Intervals)
			r.History.Writes = nil
			r.History.TokenOps = slices.DeleteFunc(r.History.TokenOps, func(op oracle.TokenOp) bool { return op.Kind == oracle.TokenRenewal })
		}), "evidence missing: history.grants[0]: r2's grant of token 1 at "},
		{"OverlappingPiecesOfOneReplica", forged(t, dir, name, func(r *scenarios.Report) {
			ivs := r.History.Intervals
			shift := ivs[1].Start.Sub(ivs[0].Start) / 2
			ivs[1].Start, ivs[1].End = ivs[1].Start.Add(-shift), ivs[1].End.Add(-shift)
		}), "evidence missing: history.intervals: r2's piece of work from "},
		{"ACountOfWritesWithNoWrites", edited(t, dir, name, func(r map[string]any) {
			r["history"].(map[string]any)["writes"] = []any{}
		}), "evidence missing: metrics.writes is 17, yet history holds no accepted writes to count"},
		{"ACountOfTermsWithNoGrants", edited(t, dir, name, func(r map[string]any) {
			r["history"].(map[string]any)["grants"] = []any{}
		}), "evidence missing: metrics.terms is 1, yet history holds no grants to count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, nil, "check", tc.path)
			require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			require.Len(t, lines, 2, stdout)
			require.True(t, strings.HasPrefix(lines[0], "REFUSED "+tc.path+": "+tc.want), "%s\nwant: %s", lines[0], tc.want)
			require.Equal(t, "check: 0 agree, 0 differ, 1 refused", lines[1])
		})
	}
	// A lease registered by the user's own binary may keep its tokens
	// where the runner cannot watch them: its fenced writes come without
	// token operations, and its fence is not checked, as the run says.
	own := forged(t, dir, name, func(r *scenarios.Report) {
		r.Scenario.Strategy = "my-lease"
		r.History.TokenOps = nil
	})
	stdout, stderr, code := cli(t, nil, "check", own)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "ok      "+own+": ")
	require.Contains(t, stdout, "fence not checked\n")
}

// forged writes the saved report name to dir after change, with its
// metrics and verdict recomputed from what change left, as a forger who
// knows the definitions would; it returns the file's path.
func forged(t *testing.T, dir, name string, change func(*scenarios.Report)) string {
	t.Helper()
	var rep scenarios.Report
	require.NoError(t, json.Unmarshal([]byte(mustRead(t, filepath.Join(saved, name, "report.json"))), &rep))
	change(&rep)
	rep.Metrics = oracle.Analyze(rep.History, rep.Analysis())
	rep.Verdict = rep.Protocol.Amend(scenarios.Judge(rep.Scenario.Expect, rep.Metrics, rep.Pieces()))
	out, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	f, err := os.CreateTemp(dir, name+"-*.json")
	require.NoError(t, err)
	_, err = f.Write(out)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}
