package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/doublerun/doublerun/lease"
)

// Health statuses.
const (
	StatusHealthy  = "healthy"
	StatusDegraded = "degraded"
)

// staleAfterIntervals is how many poll intervals may pass without a
// heartbeat before health degrades: the original's 3 ×. Caught by
// TestHealth/DegradesAfterThreeIntervalsAndRecovers.
const staleAfterIntervals = 3

// Health is the worker's health report, as the health handler serves it.
type Health struct {
	// Status is StatusHealthy or StatusDegraded.
	Status string `json:"status"`
	// Role is the lease status of the latest cycle ("leader", "follower",
	// "faulted"), or "unknown" before the first.
	Role string `json:"role"`
	// LastHeartbeat is the latest stamp; null if there has been none.
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	// Reason says why the status is degraded; empty when healthy.
	Reason string `json:"reason"`
}

// healthState is what the loop records for Health.
type healthState struct {
	mu        sync.Mutex
	everRun   bool
	running   bool
	startedAt time.Time
	last      time.Time // zero until the first stamp
	status    lease.Status
}

func (h *healthState) started(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.everRun, h.running, h.startedAt = true, true, now
}

func (h *healthState) stopped() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = false
}

func (h *healthState) stamp(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = now
}

func (h *healthState) role(s lease.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status = s
}

// Health reports whether the worker is alive: degraded if it never started,
// has stopped, or stamped no heartbeat for more than 3 × PollInterval (the
// start counts as a stamp, so a worker gets 3 intervals to make its first).
// A follower stamps, so it reads healthy; a lasting fault does not, so it
// reads degraded.
func (w *Worker) Health() Health {
	h := &w.health
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{Status: StatusHealthy, Role: "unknown"}
	if h.status != 0 {
		out.Role = h.status.String()
	}
	if !h.last.IsZero() {
		last := h.last
		out.LastHeartbeat = &last
	}
	threshold := staleAfterIntervals * w.config.PollInterval
	since := h.last
	if since.IsZero() {
		since = h.startedAt
	}
	switch {
	// Caught by TestHealth/NeverStartedIsDegraded.
	case !h.everRun:
		out.Status, out.Reason = StatusDegraded, "worker never started"
	// Caught by TestHealth/StoppedIsDegraded.
	case !h.running:
		out.Status, out.Reason = StatusDegraded, "worker stopped"
	// The stall threshold, strictly more than 3 intervals. Caught by
	// TestHealth/DegradesAfterThreeIntervalsAndRecovers.
	case w.now().Sub(since) > threshold:
		out.Status = StatusDegraded
		out.Reason = fmt.Sprintf("no heartbeat for %s, more than 3 × the poll interval (%s); the lease is faulted or polls fail, see the worker's log",
			w.now().Sub(since).Round(time.Millisecond), w.config.PollInterval)
	}
	return out
}

// HealthHandler serves Health as JSON. A healthy worker answers 200; a
// degraded one answers Config.DegradedStatusCode (200 unless set).
func (w *Worker) HealthHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		h := w.Health()
		code := http.StatusOK
		if h.Status != StatusHealthy {
			// Caught by TestHealth/DegradedAnswersTheConfiguredCode.
			code = w.config.DegradedStatusCode
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		rw.WriteHeader(code)
		_ = json.NewEncoder(rw).Encode(h)
	})
}
