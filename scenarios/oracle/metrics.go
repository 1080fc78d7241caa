package oracle

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"time"
)

// Interval is one piece of leader work, as the replica that did it logged
// it: from the moment it started working as leader to the moment it
// finished.
type Interval struct {
	Replica string    `json:"replica"`
	Token   int64     `json:"token"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	// Open means the replica never logged the end (it was killed, or was
	// still frozen when the run ended); End was then taken from the
	// replica's death or the end of the run.
	Open bool `json:"open,omitempty"`
	// BackendPID is the Postgres backend that held the replica's lease, when
	// the strategy can tell (the advisory lease can).
	BackendPID int32 `json:"backend_pid,omitempty"`
}

// Grant is the first time a replica reported Leader under a token.
type Grant struct {
	Replica string    `json:"replica"`
	Token   int64     `json:"token"`
	At      time.Time `json:"at"`
}

// Write is one side-effect write a leader attempted through its work
// endpoint. Accepted writes are read back from the table they landed in;
// rejected ones are those the fence refused.
type Write struct {
	Replica string `json:"replica"`
	Token   int64  `json:"token"`
	// Call is when the write's transaction began and At when its row was
	// written (or the fence's refusal was read back), both from one
	// statement on the server's clock; the fence's check ran between them.
	Call     time.Time `json:"call"`
	At       time.Time `json:"at"`
	Accepted bool      `json:"accepted"`
	// Fenced says the write's transaction checked the fence first: the
	// lease fences and the scenario did not turn it off. Only fenced
	// writes are part of the linearizability check.
	Fenced bool `json:"fenced"`
}

// Event is something the runner did or saw: a replica started or died, a
// fault was injected or healed.
type Event struct {
	Kind    string    `json:"kind"`
	Replica string    `json:"replica,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	At      time.Time `json:"at"`
}

// Event kinds.
const (
	EventReplicaStarted = "replica-started"
	EventReplicaStopped = "replica-stopped"
	EventReplicaKilled  = "replica-killed"
	EventFault          = "fault"
	EventInjected       = "injected"
	EventHealed         = "healed"
	EventMeasureStart   = "measure-start"
	EventMeasureEnd     = "measure-end"
)

// History is everything one run logged, with every time from the one
// clock (Postgres clock_timestamp()).
type History struct {
	Start     time.Time  `json:"start"`
	End       time.Time  `json:"end"`
	Intervals []Interval `json:"intervals"`
	Grants    []Grant    `json:"grants"`
	Writes    []Write    `json:"writes"`
	Events    []Event    `json:"events"`
	// Locks are the runner's samples of the lease's advisory lock, kept
	// when they change; empty for a lease that holds none.
	Locks []LockSample `json:"locks,omitempty"`
	// Backends are the replicas' server connections the runner saw, with
	// the path each arrived by (validity.go).
	Backends []Backend `json:"backends,omitempty"`
	// PathWatched says the runner sampled every replica's backends, the
	// built-in replicas' too; a report written before it did has only a
	// replica command's, and the traffic-path condition of its built-in
	// replicas held by construction.
	PathWatched bool `json:"path_watched,omitempty"`
	// TokenOps are every grant and renewal of the lease's token, as the
	// server recorded them in the statements that made them
	// (RecordTokens); empty for a strategy whose token table is unknown.
	TokenOps []TokenOp `json:"token_ops,omitempty"`
	// Acks, JobRuns and Survivors are a failover's (loss.go): what the
	// replicas were acknowledged and their jobs' starts, both as they told
	// the oracle, and what the pair's primary held after the run. A nil
	// Survivors says nothing was read back: no failover.
	Acks      []Ack      `json:"acks,omitempty"`
	JobRuns   []JobRun   `json:"job_runs,omitempty"`
	Survivors *Survivors `json:"survivors,omitempty"`
}

// Options tune Analyze.
type Options struct {
	// GapTolerance is the longest gap between two pieces of leader work that
	// still counts as continuous leadership: a leader's own pause between
	// cycles (poll interval plus the lease call). Longer gaps are
	// leaderless time.
	GapTolerance time.Duration
	// OrphanTolerance is the longest orphaned-lock stretch that is left
	// out: the time a server takes to notice that a holder's socket
	// closed, and the resolution of the runner's lock samples.
	OrphanTolerance time.Duration
	// CheckTimeout bounds the linearizability check (fence.go); zero
	// means DefaultCheckTimeout.
	CheckTimeout time.Duration
	// TTL is the lease's: the contention condition asks for contenders
	// until a TTL after the fault healed (validity.go).
	TTL time.Duration
	// Commands says the replicas are the user's command, whose backends
	// the traffic-path condition checks in every report (validity.go);
	// built-in replicas' are checked where the history was watched
	// (History.PathWatched).
	Commands bool
	// StaleWritesOnly says the run is judged by its accepted stale writes
	// alone (the expectation fenced), and FaultHold how long its fault
	// holds the leader out (zero for one that acts once): under such a
	// fault it could fail only if a newer term was granted after the fault
	// began (validity.go).
	StaleWritesOnly bool
	FaultHold       time.Duration
	// Regression says the run is judged by a token regression (the
	// expectation regresses): it could show one only if the failover lost
	// an acknowledged grant (validity_loss.go).
	Regression bool
}

// Metrics are the figures a run is judged by.
type Metrics struct {
	// DoubleRun is time during which two or more replicas did leader work
	// at the same instant.
	DoubleRun Window `json:"double_run"`
	// Leaderless is time inside the measured span during which no replica
	// did leader work, counting only gaps longer than GapTolerance.
	Leaderless Window `json:"leaderless"`
	// FailoverLatency is the time from the first fault's injection until
	// leader work resumed under a term granted after it; nil when there
	// was no fault or no new term. FailoverFrom says which instant it is
	// measured from (see failover.go).
	FailoverLatency *Duration `json:"failover_latency,omitempty"`
	FailoverFrom    string    `json:"failover_from,omitempty"`
	// MaxConcurrentLeaders is the most replicas working at one instant.
	MaxConcurrentLeaders int `json:"max_concurrent_leaders"`
	// LeadershipChanges counts grants whose holder differs from the
	// previous grant's.
	LeadershipChanges int `json:"leadership_changes"`
	// Terms is the number of distinct tokens granted.
	Terms int `json:"terms"`
	// StaleWrites counts side-effect writes made under a token older than
	// the newest granted at the time: Accepted ones are safety violations,
	// Rejected ones are the fence doing its job.
	StaleWrites StaleWrites `json:"stale_writes"`
	// Writes is the number of accepted side-effect writes.
	Writes int `json:"writes"`
	// Orphaned is the time the lease's advisory lock stayed on a backend
	// after its holder let go of it or died; see locks.go.
	Orphaned Orphaned `json:"orphaned"`
	// Linearizability is porcupine's judgement of the fence: whether the
	// grants, renewals and fenced writes have a legal order (fence.go);
	// nil when the run had no fenced write or no recorded token.
	Linearizability *Linearizability `json:"linearizability,omitempty"`
	// Validity says whether the run could have shown a double-run at all
	// (validity.go); a run that could not is INCONCLUSIVE.
	Validity Validity `json:"validity"`
	// Loss is what a failover lost (loss.go); nil when nothing was read
	// back after one.
	Loss *Loss `json:"loss,omitempty"`
}

// Window is a set of episodes: maximal stretches of time during which a
// condition held.
type Window struct {
	Episodes int      `json:"episodes"`
	Total    Duration `json:"total"`
	Longest  Duration `json:"longest"`
	// Spans are the episodes themselves, so the figures can be recomputed.
	Spans []Span `json:"spans,omitempty"`
}

// Span is one episode.
type Span struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// StaleWrites counts writes under a superseded token.
type StaleWrites struct {
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
}

// Duration is a time.Duration that reads well in JSON (milliseconds as a
// number, field names say the unit) and in text.
type Duration time.Duration

// MarshalJSON writes the duration in milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(d)/float64(time.Millisecond), 'f', 3, 64), nil
}

// UnmarshalJSON reads milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	ms, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	// Rounded: 1.005 ms times 1e6 is 1004999.9999999999 in floating
	// point, and a tolerance read back a nanosecond short would count a
	// gap of exactly the tolerance.
	*d = Duration(time.Duration(math.Round(ms * float64(time.Millisecond))))
	return nil
}

func (d Duration) String() string { return time.Duration(d).Round(time.Millisecond).String() }

// Analyze computes the metrics of h. It is the one place where the windows
// are defined; reports carry h so anyone can recompute them.
func Analyze(h History, opts Options) Metrics {
	ivs := clip(h.Intervals, h.Start, h.End)
	var m Metrics
	m.DoubleRun, m.MaxConcurrentLeaders = overlaps(ivs)
	m.Leaderless = gaps(ivs, h.Start, h.End, opts.GapTolerance)
	m.Terms, m.LeadershipChanges = terms(h.Grants)
	m.StaleWrites, m.Writes = staleWrites(h.Writes, h.Grants)
	m.FailoverLatency, m.FailoverFrom = failover(h, ivs)
	m.Orphaned = orphaned(h, opts.OrphanTolerance)
	m.Linearizability = checkFence(h, opts.CheckTimeout)
	m.Validity = validity(h, opts)
	m.Loss = loss(h)
	return m
}

// clip keeps the part of each interval inside [start, end].
func clip(ivs []Interval, start, end time.Time) []Interval {
	out := make([]Interval, 0, len(ivs))
	for _, iv := range ivs {
		if !start.IsZero() && iv.Start.Before(start) {
			iv.Start = start
		}
		if !end.IsZero() && iv.End.After(end) {
			iv.End = end
		}
		if iv.End.After(iv.Start) {
			out = append(out, iv)
		}
	}
	return out
}

type edge struct {
	at    time.Time
	delta int
}

// edges returns +1 at each start and -1 at each end, in time order; at the
// same instant ends come first, so intervals that only touch do not
// overlap.
func edges(ivs []Interval) []edge {
	es := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		es = append(es, edge{iv.Start, +1}, edge{iv.End, -1})
	}
	slices.SortFunc(es, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta)) })
	return es
}

// overlaps returns the window during which two or more intervals of
// different replicas are open, and the most open at once. A replica's own
// intervals never overlap each other in a well-behaved replica; if they do,
// they are merged first so a replica cannot double-run with itself.
//
// The depth is judged once per instant, after all of its edges: when one
// replica stops at the very instant another starts while a third works on,
// two replicas work throughout, and that is one episode, not two.
func overlaps(ivs []Interval) (Window, int) {
	var w Window
	depth, most, settled := 0, 0, 0
	var open time.Time
	es := edges(mergePerReplica(ivs))
	for i, e := range es {
		depth += e.delta
		most = max(most, depth)
		if i+1 < len(es) && es[i+1].at.Equal(e.at) {
			continue
		}
		wasDouble, isDouble := settled >= 2, depth >= 2
		if isDouble && !wasDouble {
			open = e.at
		}
		if wasDouble && !isDouble {
			w.add(open, e.at)
		}
		settled = depth
	}
	return w, most
}

// gaps returns the stretches inside [start, end] covered by no interval and
// longer than tolerance. The span starts at the first piece of work when
// start is zero.
func gaps(ivs []Interval, start, end time.Time, tolerance time.Duration) Window {
	var w Window
	if len(ivs) == 0 {
		if !start.IsZero() && end.After(start) {
			w.add(start, end)
		}
		return w
	}
	es := edges(ivs)
	if start.IsZero() {
		start = es[0].at
	}
	if end.IsZero() {
		end = es[len(es)-1].at
	}
	depth := 0
	idleSince := start
	for _, e := range es {
		// With no work open the next edge is a start (clip drops empty
		// and reversed intervals): the idle stretch ends here.
		if depth == 0 && e.at.Sub(idleSince) > tolerance {
			w.add(idleSince, e.at)
		}
		depth += e.delta
		if depth == 0 {
			idleSince = e.at
		}
	}
	if depth == 0 && end.Sub(idleSince) > tolerance {
		w.add(idleSince, end)
	}
	return w
}

func (w *Window) add(start, end time.Time) {
	d := Duration(end.Sub(start))
	if d <= 0 {
		return
	}
	w.Episodes++
	w.Total += d
	w.Longest = max(w.Longest, d)
	w.Spans = append(w.Spans, Span{Start: start, End: end})
}

func mergePerReplica(ivs []Interval) []Interval {
	by := map[string][]Interval{}
	for _, iv := range ivs {
		by[iv.Replica] = append(by[iv.Replica], iv)
	}
	var out []Interval
	for _, list := range by {
		slices.SortFunc(list, func(a, b Interval) int { return a.Start.Compare(b.Start) })
		cur := list[0]
		for _, iv := range list[1:] {
			if !iv.Start.After(cur.End) {
				if iv.End.After(cur.End) {
					cur.End = iv.End
				}
				continue
			}
			out = append(out, cur)
			cur = iv
		}
		out = append(out, cur)
	}
	return out
}

func terms(grants []Grant) (distinct, changes int) {
	gs := slices.Clone(grants)
	slices.SortFunc(gs, func(a, b Grant) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return int(a.Token - b.Token)
	})
	seen := map[int64]bool{}
	prev := ""
	for _, g := range gs {
		if !seen[g.Token] {
			seen[g.Token] = true
			distinct++
		}
		if prev != "" && g.Replica != prev {
			changes++
		}
		prev = g.Replica
	}
	return distinct, changes
}

// staleWrites classifies each write against the grants known at its time.
func staleWrites(writes []Write, grants []Grant) (StaleWrites, int) {
	var s StaleWrites
	accepted := 0
	for _, w := range writes {
		if !w.Accepted {
			s.Rejected++
			continue
		}
		accepted++
		for _, g := range grants {
			if g.Token > w.Token && g.At.Before(w.At) {
				s.Accepted++
				break
			}
		}
	}
	return s, accepted
}
