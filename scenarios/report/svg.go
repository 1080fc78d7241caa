package report

import (
	"fmt"
	"html"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// SVG renders the timeline: one lane per replica with its pieces of leader
// work (open-ended ones hatched), double-run episodes in red across every
// lane, leaderless episodes in grey, and faults as vertical lines.
func SVG(r *scenarios.Report) string {
	h := r.History
	start, end := h.Start, h.End
	for _, iv := range h.Intervals {
		if start.IsZero() || iv.Start.Before(start) {
			start = iv.Start
		}
		if iv.End.After(end) {
			end = iv.End
		}
	}
	span := end.Sub(start)
	if span <= 0 {
		span = time.Second
	}
	var replicas []string
	for _, rp := range r.Replicas {
		replicas = append(replicas, rp.ID)
	}
	for _, iv := range h.Intervals {
		if !slices.Contains(replicas, iv.Replica) {
			replicas = append(replicas, iv.Replica)
		}
	}
	const (
		left, right, top = 70.0, 20.0, 64.0
		width, lane      = 1000.0, 34.0
	)
	orphans := orphanLanes(r.Metrics.Orphaned.Orphans)
	height := top + lane*float64(len(replicas)+len(orphans)) + 60
	x := func(t time.Time) float64 {
		return left + (width-left-right)*float64(t.Sub(start))/float64(span)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	b.WriteString(`<defs><pattern id="open" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#4a7bd0"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	m := r.Metrics
	// The name, then the figures on a line of their own: on one line a
	// long name with long figures ran past the right edge.
	figures := fmt.Sprintf("double-run %s (%d episodes), leaderless %s, orphaned lock %s (%d, longest %s), stale writes accepted %d / rejected %d",
		m.DoubleRun.Total, m.DoubleRun.Episodes, m.Leaderless.Total, m.Orphaned.Total, m.Orphaned.Episodes, m.Orphaned.Longest, m.StaleWrites.Accepted, m.StaleWrites.Rejected)
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14">%s</text>`+"\n", html.EscapeString(r.Scenario.Name))
	// At about 6.5px a character, figures wider than the page are
	// squeezed into it.
	fit := ""
	if room := width - 10 - right; 6.5*float64(len(figures)) > room {
		fit = fmt.Sprintf(` textLength="%.0f" lengthAdjust="spacingAndGlyphs"`, room)
	}
	fmt.Fprintf(&b, `<text x="10" y="36"%s font-size="12">%s</text>`+"\n", fit, html.EscapeString(figures))
	laneBottom := top + lane*float64(len(replicas)+len(orphans))
	band := func(spans []oracle.Span, fill, label string) {
		for _, s := range spans {
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%.0f" fill="%s" opacity="0.35"><title>%s %s</title></rect>`+"\n",
				x(s.Start), top-5, max(x(s.End)-x(s.Start), 1), laneBottom-top+10, fill, label, s.End.Sub(s.Start).Round(time.Millisecond))
		}
	}
	band(m.Leaderless.Spans, "#999999", "leaderless")
	band(m.DoubleRun.Spans, "#e02020", "double-run")
	for i, id := range replicas {
		y := top + lane*float64(i)
		fmt.Fprintf(&b, `<text x="10" y="%.0f">%s</text>`+"\n", y+lane/2+4, html.EscapeString(id))
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ddd"/>`+"\n", left, y+lane/2, width-right, y+lane/2)
		for _, iv := range h.Intervals {
			if iv.Replica != id {
				continue
			}
			fill := "#4a7bd0"
			if iv.Open {
				fill = "url(#open)"
			}
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%.0f" fill="%s"><title>%s token %d pid %d %s</title></rect>`+"\n",
				x(iv.Start), y+6, max(x(iv.End)-x(iv.Start), 1), lane-12, fill, id, iv.Token, iv.BackendPID, iv.End.Sub(iv.Start).Round(time.Millisecond))
		}
	}
	// A lane per orphaned backend: the stretches its lock outlived its
	// holder, labelled with who re-entered it.
	for i, pid := range orphans {
		y := top + lane*float64(len(replicas)+i)
		fmt.Fprintf(&b, `<text x="10" y="%.0f" fill="#7a3db8">pid %d</text>`+"\n", y+lane/2+4, pid)
		for _, o := range m.Orphaned.Orphans {
			if o.BackendPID != pid {
				continue
			}
			label := fmt.Sprintf("orphaned lock on backend %d after %s %s, %s", pid, o.After, o.Cause, o.End.Sub(o.Start).Round(time.Millisecond))
			if o.ReenteredBy != "" {
				label += ", re-entered by " + o.ReenteredBy
			}
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%.0f" fill="#7a3db8" opacity="0.7"><title>%s</title></rect>`+"\n",
				x(o.Start), y+6, max(x(o.End)-x(o.Start), 1), lane-12, html.EscapeString(label))
			if o.ReenteredBy != "" {
				fmt.Fprintf(&b, `<text x="%.2f" y="%.0f" fill="#7a3db8">re-entrant: %s</text>`+"\n", x(o.End)+3, y+lane/2+4, html.EscapeString(o.ReenteredBy))
			}
		}
	}
	for _, e := range h.Events {
		if e.Kind != oracle.EventFault && e.Kind != oracle.EventHealed && e.Kind != oracle.EventReplicaKilled {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.2f" y1="%.0f" x2="%.2f" y2="%.0f" stroke="black" stroke-dasharray="4 3"/><text x="%.2f" y="%.0f">%s</text>`+"\n",
			x(e.At), top-10, x(e.At), laneBottom+5, x(e.At)+3, top-12, html.EscapeString(e.Kind+" "+e.Replica))
	}
	// Time axis in seconds from the start.
	for i := 0; i <= 10; i++ {
		t := start.Add(span * time.Duration(i) / 10)
		fmt.Fprintf(&b, `<text x="%.2f" y="%.0f" text-anchor="middle">%.1fs</text>`+"\n", x(t), laneBottom+25, t.Sub(start).Seconds())
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#555">blue: leader work (hatched: never ended) · red: double-run · grey: leaderless · purple: orphaned lock</text>`+"\n", left, laneBottom+45)
	b.WriteString("</svg>\n")
	return b.String()
}

// orphanLanes lists the backends that had an orphaned lock, in order.
func orphanLanes(os []oracle.Orphan) []int32 {
	var out []int32
	for _, o := range os {
		if !slices.Contains(out, o.BackendPID) {
			out = append(out, o.BackendPID)
		}
	}
	return out
}
