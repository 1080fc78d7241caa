package reporttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The report as this package reads it: plain JSON, its own types.
type file struct {
	Schema          string   `json:"schema"`
	GapTolerance    *float64 `json:"gap_tolerance_ms"`
	OrphanTolerance *float64 `json:"orphan_tolerance_ms"`
	Scenario        struct {
		Expect  string
		Fault   string          `json:"fault"`
		TTL     int64           `json:"ttl"`
		Replica json.RawMessage `json:"replica"`
	}
	Metrics json.RawMessage `json:"metrics"`
	Verdict *struct {
		Pass bool `json:"pass"`
	} `json:"verdict"`
	History  *history `json:"history"`
	Protocol *struct {
		LeftBehind []string `json:"left_behind"`
	} `json:"protocol"`
}

type history struct {
	Start, End time.Time
	Intervals  []struct {
		Replica    string
		Token      int64
		Start, End time.Time
	}
	Grants []struct {
		Replica string
		Token   int64
		At      time.Time
	}
	Writes []struct {
		Replica          string
		Token            int64
		Call, At         time.Time
		Accepted, Fenced bool
	}
	Events []struct {
		Kind, Replica, Detail string
		At                    time.Time
	}
	Locks []struct {
		At   time.Time
		Held []struct {
			PID          int32 `json:"pid"`
			ClientLinked *bool `json:"client_linked"`
		}
	}
	Backends []struct {
		Replica, Via string
	}
	PathWatched bool `json:"path_watched"`
	TokenOps    []struct {
		Kind, Replica string
		Token         int64
		Call, Return  time.Time
	} `json:"token_ops"`
	Acks      []ack      `json:"acks"`
	JobRuns   []jobRun   `json:"job_runs"`
	Survivors *survivors `json:"survivors"`
}

// figures maps a figure's place in report.json, such as
// "metrics.double_run.spans[0].start", to its value as the file writes it.
type figures map[string]string

// Recompute parses data as report.json and recomputes every figure of its
// metrics (but linearizability.checked_in_ms, which no history
// determines) and its verdict's pass; it returns one line per figure that
// differs from the file's, or an error for data that is not a report.
func Recompute(data []byte) ([]string, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.History == nil || f.Metrics == nil || f.Verdict == nil || f.GapTolerance == nil || f.OrphanTolerance == nil {
		return nil, errors.New("not a report: history, metrics, verdict or a tolerance is missing")
	}
	want := figures{}
	dec := json.NewDecoder(bytes.NewReader(f.Metrics))
	dec.UseNumber()
	var metrics any
	if err := dec.Decode(&metrics); err != nil {
		return nil, err
	}
	want.flatten("metrics", metrics)
	delete(want, "metrics.linearizability.checked_in_ms")
	for k := range want {
		// The validity conditions' words; whether each holds is a figure.
		if strings.HasPrefix(k, "metrics.validity.conditions[") && !strings.HasSuffix(k, ".holds") {
			delete(want, k)
		}
	}
	want["verdict.pass"] = strconv.FormatBool(f.Verdict.Pass)

	got := recompute(f)
	var diffs []string
	keys := maps.Collect(maps.All(want))
	maps.Copy(keys, got)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		w, wok := want[k]
		g, gok := got[k]
		if !same(w, g) || wok != gok {
			diffs = append(diffs, fmt.Sprintf("%s: report %s, recomputed %s", k, orNone(w, wok), orNone(g, gok)))
		}
	}
	return diffs, nil
}

// same compares two figures as the file writes them; numbers by value,
// since a report edited by another JSON writer may spell 10.000 as 10.
func same(a, b string) bool {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	if errA == nil && errB == nil {
		return x == y
	}
	return a == b
}

func orNone(v string, ok bool) string {
	if !ok {
		return "none"
	}
	return v
}

// flatten puts every leaf of v under path; nulls and empty lists are
// absent, as the report's omitempty fields are.
func (fs figures) flatten(path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			fs.flatten(path+"."+k, x)
		}
	case []any:
		for i, x := range v {
			fs.flatten(fmt.Sprintf("%s[%d]", path, i), x)
		}
	case nil:
	case string:
		fs[path] = v
	default:
		fs[path] = fmt.Sprint(v)
	}
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }

func msDuration(v float64) time.Duration {
	return time.Duration(math.Round(v * float64(time.Millisecond)))
}

// span is a stretch of time; episodes are kept as spans.
type span struct{ from, to time.Time }

// window puts a list of episodes under path as the report writes a
// Window: episodes, total, longest, spans.
func (fs figures) window(path string, eps []span) {
	var total, longest time.Duration
	for i, e := range eps {
		d := e.to.Sub(e.from)
		total += d
		longest = max(longest, d)
		fs[fmt.Sprintf("%s.spans[%d].start", path, i)] = stamp(e.from)
		fs[fmt.Sprintf("%s.spans[%d].end", path, i)] = stamp(e.to)
	}
	fs[path+".episodes"] = strconv.Itoa(len(eps))
	fs[path+".total"] = ms(total)
	fs[path+".longest"] = ms(longest)
}

// piece is a piece of leader work inside the measured span.
type piece struct {
	replica  string
	token    int64
	from, to time.Time
}

func recompute(f file) figures {
	h := f.History
	got := figures{}
	var pieces []piece
	for _, iv := range h.Intervals {
		p := piece{iv.Replica, iv.Token, iv.Start, iv.End}
		if !h.Start.IsZero() && p.from.Before(h.Start) {
			p.from = h.Start
		}
		if !h.End.IsZero() && p.to.After(h.End) {
			p.to = h.End
		}
		if p.to.After(p.from) {
			pieces = append(pieces, p)
		}
	}
	doubleRun, most := working(pieces, h.Start, h.End, msDuration(*f.GapTolerance), got)
	got["metrics.max_concurrent_leaders"] = strconv.Itoa(most)
	failover(h, pieces, got)
	grants(h, got)
	failoverLoss(h, got)
	orphanedFigures(h, msDuration(*f.OrphanTolerance), got)
	ops, legal := linearizable(h)
	if ops > 0 {
		got["metrics.linearizability.operations"] = strconv.Itoa(ops)
		got["metrics.linearizability.linearizable"] = map[bool]string{true: "yes", false: "no"}[legal]
	}
	// A replica command that left processes running fails whatever the
	// figures say: they ran unmeasured.
	leftBehind := f.Protocol != nil && len(f.Protocol.LeftBehind) > 0
	valid := validity(f, got)
	got["verdict.pass"] = strconv.FormatBool(!leftBehind && valid && pass(f.Scenario.Expect, len(h.Intervals), doubleRun, got, ops > 0 && !legal))
	return got
}

// working cuts the span at every start and end of a piece and counts the
// distinct replicas at work in each cut: two or more is double-run, none
// is leaderless (kept when longer than the tolerance). It returns the
// double-run time and the most replicas at work at once.
func working(pieces []piece, start, end time.Time, tolerance time.Duration, got figures) (time.Duration, int) {
	var cuts []time.Time
	for _, p := range pieces {
		cuts = append(cuts, p.from, p.to)
	}
	if len(pieces) == 0 {
		var gaps []span
		if !start.IsZero() && end.After(start) {
			gaps = append(gaps, span{start, end})
		}
		got.window("metrics.double_run", nil)
		got.window("metrics.leaderless", gaps)
		return 0, 0
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
	if start.IsZero() {
		start = cuts[0]
	}
	if end.IsZero() {
		end = cuts[len(cuts)-1]
	}
	cuts = append(cuts, start, end)
	sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
	cuts = slices.CompactFunc(cuts, func(a, b time.Time) bool { return a.Equal(b) })
	var double, idle []span
	most := 0
	var total time.Duration
	for k := 0; k+1 < len(cuts); k++ {
		from, to := cuts[k], cuts[k+1]
		who := map[string]bool{}
		for _, p := range pieces {
			if !p.from.After(from) && !p.to.Before(to) {
				who[p.replica] = true
			}
		}
		most = max(most, len(who))
		extend := func(list []span) []span {
			if n := len(list); n > 0 && list[n-1].to.Equal(from) {
				list[n-1].to = to
				return list
			}
			return append(list, span{from, to})
		}
		if len(who) >= 2 {
			double = extend(double)
			total += to.Sub(from)
		}
		if len(who) == 0 && !from.Before(start) && !to.After(end) {
			idle = extend(idle)
		}
	}
	var gaps []span
	for _, g := range idle {
		if g.to.Sub(g.from) > tolerance {
			gaps = append(gaps, g)
		}
	}
	got.window("metrics.double_run", double)
	got.window("metrics.leaderless", gaps)
	return total, most
}

// failover: from the first fault (or the first injection or kill between
// it and the heal after it) to the first piece begun at or after it under
// a token newer than every token granted by then.
func failover(h *history, pieces []piece, got figures) {
	var fault, healed, injected time.Time
	for _, e := range h.Events {
		if e.Kind == "fault" && (fault.IsZero() || e.At.Before(fault)) {
			fault = e.At
		}
	}
	if fault.IsZero() {
		return
	}
	for _, e := range h.Events {
		if e.Kind == "healed" && !e.At.Before(fault) && (healed.IsZero() || e.At.Before(healed)) {
			healed = e.At
		}
	}
	for _, e := range h.Events {
		if (e.Kind == "injected" || e.Kind == "replica-killed") && !e.At.Before(fault) && (healed.IsZero() || !e.At.After(healed)) &&
			(injected.IsZero() || e.At.Before(injected)) {
			injected = e.At
		}
	}
	from, kind := injected, "injection"
	if injected.IsZero() {
		from, kind = fault, "fault"
	}
	var newest int64
	for _, g := range h.Grants {
		if !g.At.After(from) && g.Token > newest {
			newest = g.Token
		}
	}
	var first time.Time
	for _, p := range pieces {
		if p.token > newest && !p.from.Before(from) && (first.IsZero() || p.from.Before(first)) {
			first = p.from
		}
	}
	if first.IsZero() {
		return
	}
	got["metrics.failover_latency"] = ms(first.Sub(from))
	got["metrics.failover_from"] = kind
}

// grants: distinct tokens, changes of holder in time order, and the
// writes: accepted ones under a token older than one granted before them
// are stale, rejected ones are the fence's.
func grants(h *history, got figures) {
	type grant struct {
		replica string
		token   int64
		at      time.Time
	}
	var gs []grant
	tokens := map[int64]bool{}
	for _, g := range h.Grants {
		gs = append(gs, grant{g.Replica, g.Token, g.At})
		tokens[g.Token] = true
	}
	sort.SliceStable(gs, func(i, j int) bool {
		if !gs[i].at.Equal(gs[j].at) {
			return gs[i].at.Before(gs[j].at)
		}
		return gs[i].token < gs[j].token
	})
	changes := 0
	for k := 1; k < len(gs); k++ {
		if gs[k].replica != gs[k-1].replica {
			changes++
		}
	}
	accepted, stale, rejected := 0, 0, 0
	for _, w := range h.Writes {
		if !w.Accepted {
			rejected++
			continue
		}
		accepted++
		if slices.ContainsFunc(gs, func(g grant) bool { return g.token > w.Token && g.at.Before(w.At) }) {
			stale++
		}
	}
	got["metrics.terms"] = strconv.Itoa(len(tokens))
	got["metrics.leadership_changes"] = strconv.Itoa(changes)
	got["metrics.writes"] = strconv.Itoa(accepted)
	got["metrics.stale_writes.accepted"] = strconv.Itoa(stale)
	got["metrics.stale_writes.rejected"] = strconv.Itoa(rejected)
}

// pass is the verdict from the figures: no replica ever leading fails,
// and so does a fence with no legal order; then each expectation.
func pass(expect string, pieces int, doubleRun time.Duration, got figures, illegal bool) bool {
	if pieces == 0 {
		return false
	}
	if expect == "regresses" {
		// A token granted again is what it asks for, and no legal order
		// comes with it.
		_, regressed := got["metrics.loss.token_regressions[0].why"]
		return regressed
	}
	if illegal {
		return false
	}
	episodes, stale, orphaned := got["metrics.double_run.episodes"], got["metrics.stale_writes.accepted"], got["metrics.orphaned.total"]
	switch expect {
	case "safe":
		return episodes == "0" && stale == "0"
	case "reproduces":
		return doubleRun > 0
	case "fenced":
		return stale == "0"
	case "reproduces-or-orphans":
		return doubleRun > 0 || orphaned != ms(0)
	}
	return false
}
