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
