package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// ErrNotAReport is wrapped by Recompute's error for data that is not a
// report.json this doublerun can read: a check that passed such a file
// would be a check that cannot fail.
var ErrNotAReport = errors.New("not a doublerun report")

// reportKeys are the members every report.json has; a file without one of
// them is refused rather than recomputed from zero values.
var reportKeys = []string{"schema", "scenario", "metrics", "verdict", "history", "gap_tolerance_ms", "orphan_tolerance_ms", "check_timeout_ms"}

// notRecomputed is the one figure a history does not determine: how long
// porcupine took.
const notRecomputed = "metrics.linearizability.checked_in_ms"

// Recomputed is what Recompute found in one report.json.
type Recomputed struct {
	// Report is the report as the file has it.
	Report *scenarios.Report
	// Metrics and Verdict are recomputed from Report.History alone, with
	// the options the report names.
	Metrics oracle.Metrics
	Verdict scenarios.Verdict
	// Figures is how many figures were compared: every number, flag and
	// text under metrics and verdict but the check's time.
	Figures int
	// Diffs says, for each figure that differs, where it is and both
	// values, such as "metrics.double_run.total: report 120.000,
	// recomputed 130.000"; empty when the report holds.
	Diffs []string
}

// Recompute reads report.json data, refusing anything but a complete
// report of this doublerun's schema (an unknown member included), then
// recomputes every figure of its metrics and its verdict from its history
// with oracle.Analyze and scenarios.Judge, the linearizability check
// included, and compares them with the file's.
func Recompute(data []byte) (Recomputed, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Recomputed{}, fmt.Errorf("%w: %v", ErrNotAReport, err)
	}
	var schema string
	if err := json.Unmarshal(top["schema"], &schema); err != nil || schema != scenarios.ReportSchema {
		return Recomputed{}, fmt.Errorf("%w: schema %s, this doublerun reads %q", ErrNotAReport, cmpRaw(top["schema"]), scenarios.ReportSchema)
	}
	for _, k := range reportKeys {
		if _, ok := top[k]; !ok {
			return Recomputed{}, fmt.Errorf("%w: it has no %q", ErrNotAReport, k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var rep scenarios.Report
	if err := dec.Decode(&rep); err != nil {
		return Recomputed{}, fmt.Errorf("%w this doublerun understands: %v", ErrNotAReport, err)
	}
	if err := evidence(&rep); err != nil {
		return Recomputed{}, err
	}
	out := Recomputed{Report: &rep, Metrics: oracle.Analyze(rep.History, rep.Analysis())}
	out.Verdict = rep.Protocol.Amend(scenarios.Judge(rep.Scenario.Expect, out.Metrics, rep.Pieces()))
	for _, part := range []struct {
		name  string
		again any
	}{{"metrics", out.Metrics}, {"verdict", out.Verdict}} {
		js, err := json.Marshal(part.again)
		if err != nil {
			return Recomputed{}, err
		}
		out.diff(part.name, decode(top[part.name]), decode(js))
	}
	return out, nil
}

// ErrEvidence is wrapped by Recompute's error for a report whose history
// lacks evidence its figures stand on, or holds evidence that contradicts
// itself: figures recomputed from a history with a part deleted agree
// with a forgery, so such a report is refused rather than recomputed.
var ErrEvidence = errors.New("evidence missing")

// evidence refuses a history that cannot be the whole record of its run:
// a fence with no token operations, a replica whose pieces of work
// overlap, a write or a grant with no piece of work of its replica to
// have happened in, a count in the metrics with nothing in the history
// to count. Each says what is missing, on one line.
func evidence(rep *scenarios.Report) error {
	h := &rep.History
	fenced := 0
	for _, w := range h.Writes {
		if w.Fenced {
			fenced++
		}
	}
	command := rep.Scenario.Replica != nil
	if len(h.TokenOps) == 0 {
		table := strategy.TokenTable(rep.Scenario.Strategy)
		// A built-in replica's strategy with a token table has the runner
		// record every grant of it. Caught by
		// TestCheckRefusesMissingEvidence/NoTokenOperations. (A strategy
		// without one, or one registered by the user's own binary, has
		// fenced writes and no token operations by design: its fence is
		// not checked, and check says so.)
		if table != "" && !command {
			return fmt.Errorf("%w: history.token_ops is empty, yet strategy %s has the runner record every grant of its token (table %s); without them the fence cannot be checked", ErrEvidence, rep.Scenario.Strategy, table)
		}
		// A replica command marks a write fenced only when its lease's
		// tokens live in the strategy's token table (the protocol), where
		// the runner recorded none. Caught by
		// TestCheckRefusesMissingEvidence/FencedWritesOfACommandWithoutTokenOperations.
		if fenced > 0 && command {
			return fmt.Errorf("%w: history.token_ops is empty, yet %d writes of the replica commands are marked fenced; a write is fenced only under a token granted in the strategy's token table, whose grants are missing", ErrEvidence, fenced)
		}
	}
	work := map[string][]oracle.Interval{}
	for _, iv := range h.Intervals {
		work[iv.Replica] = append(work[iv.Replica], iv)
	}
	for _, id := range slices.Sorted(maps.Keys(work)) {
		ivs := work[id]
		slices.SortStableFunc(ivs, func(a, b oracle.Interval) int { return a.Start.Compare(b.Start) })
		for i := 1; i < len(ivs) && !command; i++ {
			// A built-in replica works one piece at a time, and a piece
			// whose end it logged is over; an open piece's end is the
			// history's guess (its death, or the run's end), and a
			// command may run pieces side by side. Caught by
			// TestCheckRefusesMissingEvidence/OverlappingPiecesOfOneReplica.
			if !ivs[i-1].Open && ivs[i].Start.Before(ivs[i-1].End) {
				return fmt.Errorf("%w: history.intervals: %s's piece of work from %s begins before its piece from %s ended (%s); a replica works one piece at a time, so one of them is not its record",
					ErrEvidence, id, stamp(ivs[i].Start), stamp(ivs[i-1].Start), stamp(ivs[i-1].End))
			}
		}
	}
	for i, w := range h.Writes {
		// Caught by TestCheckRefusesMissingEvidence/AWriteOutsideWork.
		if !slices.ContainsFunc(work[w.Replica], func(iv oracle.Interval) bool { return !w.At.Before(iv.Start) && !w.At.After(iv.End) }) {
			return fmt.Errorf("%w: history.writes[%d]: %s's write under token %d at %s falls in no work interval of %s; the piece of work it was made in is not in history.intervals",
				ErrEvidence, i, w.Replica, w.Token, stamp(w.At), w.Replica)
		}
	}
	// A term is granted and worked in at once by a built-in replica. A
	// fault may cut one short in between, before any work (beside two CPU
	// hogs a PGBOUNCER_PAUSE run had a replica granted a term whose first
	// piece never began), and a replica command may lead without working:
	// there a grant asks for nothing more.
	faulted := command || slices.ContainsFunc(h.Events, func(e oracle.Event) bool { return e.Kind == oracle.EventFault })
	for i, g := range h.Grants {
		// Caught by TestCheckRefusesMissingEvidence/AGrantWithoutWork.
		if !faulted && !slices.ContainsFunc(work[g.Replica], func(iv oracle.Interval) bool { return iv.Token == g.Token }) {
			return fmt.Errorf("%w: history.grants[%d]: %s's grant of token %d at %s has no work interval of %s under it; its pieces of work are not in history.intervals",
				ErrEvidence, i, g.Replica, g.Token, stamp(g.At), g.Replica)
		}
	}
	return counted(rep)
}

// counted refuses a count in the report's metrics that has nothing in its
// history to count. Caught by TestCheckRefusesMissingEvidence/ACountWithNothingToCount.
func counted(rep *scenarios.Report) error {
	m, h := rep.Metrics, rep.History
	accepted, rejected := 0, 0
	for _, w := range h.Writes {
		if w.Accepted {
			accepted++
		} else {
			rejected++
		}
	}
	lin := 0
	if m.Linearizability != nil {
		lin = m.Linearizability.Operations
	}
	for _, c := range []struct {
		metric  string
		count   int
		history string
		backing int
	}{
		{"writes", m.Writes, "accepted writes", accepted},
		{"stale_writes.accepted", m.StaleWrites.Accepted, "accepted writes", accepted},
		{"stale_writes.rejected", m.StaleWrites.Rejected, "rejected writes", rejected},
		{"terms", m.Terms, "grants", len(h.Grants)},
		{"leadership_changes", m.LeadershipChanges, "grants", len(h.Grants)},
		{"max_concurrent_leaders", m.MaxConcurrentLeaders, "intervals", len(h.Intervals)},
		{"double_run.episodes", m.DoubleRun.Episodes, "intervals", len(h.Intervals)},
		{"orphaned.episodes", m.Orphaned.Episodes, "locks", len(h.Locks)},
		{"linearizability.operations", lin, "token_ops", len(h.TokenOps)},
	} {
		if c.count > 0 && c.backing == 0 {
			return fmt.Errorf("%w: metrics.%s is %d, yet history holds no %s to count", ErrEvidence, c.metric, c.count, c.history)
		}
	}
	return nil
}

// stamp is a history's instant as the report writes it.
func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }

// cmpRaw shows a raw JSON value in a message, or says it is missing.
func cmpRaw(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	return string(raw)
}

// decode reads JSON with numbers kept as written, so that figures compare
// exactly as the report gives them.
func decode(raw []byte) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return v
}

// diff compares the report's value at path with the recomputed one,
// counting the figures and noting each one that differs.
func (r *Recomputed) diff(path string, file, again any) {
	if path == notRecomputed {
		return
	}
	fm, fok := file.(map[string]any)
	am, aok := again.(map[string]any)
	if fok && aok {
		keys := maps.Collect(maps.All(fm))
		maps.Copy(keys, am)
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			r.diff(path+"."+k, fm[k], am[k])
		}
		return
	}
	fl, fok := file.([]any)
	al, aok := again.([]any)
	if fok && aok {
		if len(fl) != len(al) {
			r.Figures++
			r.Diffs = append(r.Diffs, fmt.Sprintf("%s: report has %d, recomputed %d", path, len(fl), len(al)))
		}
		for i := range min(len(fl), len(al)) {
			r.diff(fmt.Sprintf("%s[%d]", path, i), fl[i], al[i])
		}
		return
	}
	r.Figures++
	if !same(file, again) {
		r.Diffs = append(r.Diffs, fmt.Sprintf("%s: report %s, recomputed %s", path, show(file), show(again)))
	}
}

// same reports whether the report's value is the recomputed one: numbers
// as numbers, at the precision the report stores them (the recomputed
// text's decimals: "0" and "0.0" are the 0.000 of a duration, as jq and
// Python write it back), times as instants, anything else as JSON. A
// figure reformatted by a tool a user post-processes reports with is the
// same figure. Caught by TestCheckComparesValuesNotText.
func same(file, again any) bool {
	switch a := again.(type) {
	case json.Number:
		f, ok := file.(json.Number)
		return ok && sameNumber(string(f), string(a))
	case string:
		f, ok := file.(string)
		if !ok {
			return false
		}
		tf, errF := time.Parse(time.RFC3339Nano, f)
		ta, errA := time.Parse(time.RFC3339Nano, a)
		if errF == nil && errA == nil {
			return tf.Equal(ta)
		}
		return f == a
	}
	return show(file) == show(again)
}

// sameNumber compares the report's number with the recomputed one,
// rounded (half away from zero) to the recomputed one's decimals.
func sameNumber(file, again string) bool {
	f, okF := new(big.Rat).SetString(file)
	a, okA := new(big.Rat).SetString(again)
	if !okF || !okA {
		return file == again
	}
	decimals := 0
	if i := strings.IndexByte(again, '.'); i >= 0 && !strings.ContainsAny(again, "eE") {
		decimals = len(again) - i - 1
	} else if strings.ContainsAny(again, "eE") {
		return f.Cmp(a) == 0
	}
	return roundTo(f, decimals).Cmp(a) == 0
}

// roundTo is r rounded half away from zero to decimals places.
func roundTo(r *big.Rat, decimals int) *big.Rat {
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimals)), nil)
	x := new(big.Rat).Mul(r, new(big.Rat).SetInt(scale))
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Abs(m).Lsh(m, 1).Cmp(x.Denom()) >= 0 {
		q.Add(q, big.NewInt(int64(x.Sign())))
	}
	return new(big.Rat).SetFrac(q, scale)
}

// show is a JSON value as the report would write it; "none" for a
// missing one.
func show(v any) string {
	if v == nil {
		return "none"
	}
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(js)
}
