package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/doublerun/doublerun/lease"
)

// completeLinger is the longest a finished job's outcome waits for others
// to share its completion transaction, unless max(BatchSize,
// completeAtLeast) are waiting. Its visibility timeout runs meanwhile, so
// the wait stays short; a transaction per handful of jobs would cost
// Postgres far more than the jobs themselves.
const (
	completeLinger  = 5 * time.Millisecond
	completeAtLeast = 100
)

// rescanEvery is how often, at most, a claim reads the due index from its
// start while claims keep coming back full. In between, claims read from
// where the last one stopped, so a job whose key lies behind that point (a
// job enqueued with a run_at in the past, or one whose visibility timeout
// passed) waits for the next rescan, at most this long.
const rescanEvery = time.Second

// pipeline runs the jobs of one lease term: the loop claims, up to
// MaxHandlers goroutines run the jobs' handlers, and a completer records
// their outcomes in batches as they finish, so that claiming, running and
// recording overlap. It outlives a cycle whose last claim came back full,
// and ends (its jobs run out and their outcomes recorded) when a claim
// comes back short, the lease no longer answers Leader of its term, a
// recording fails, or the worker stops.
type pipeline struct {
	w    *Worker
	term lease.Term
	// ctx is the base of every handler's context: the loop's, so that Stop
	// reaches the handlers, and cancelled when the lease is lost.
	ctx    context.Context
	cancel context.CancelFunc
	slots  *slots

	tasks    chan task // jobs for the handler goroutines
	workers  int       // handler goroutines started; only the loop touches it
	handlers sync.WaitGroup
	outcomes chan outcome
	recorded chan struct{} // closed when the completer has returned

	errMu sync.Mutex
	err   error // the first failed recording

	// Only the loop's goroutine touches these.
	cursor   claimKey  // where the next claim starts
	rescanAt time.Time // when a claim last read from the start
}

// outcome is what one attempt came to.
type outcome struct {
	job *Job
	err error
}

func (w *Worker) newPipeline(ctx context.Context, term lease.Term) *pipeline {
	p := &pipeline{
		w:        w,
		term:     term,
		slots:    newSlots(w.config.MaxHandlers),
		tasks:    make(chan task, w.config.MaxHandlers),
		outcomes: make(chan outcome, w.config.MaxHandlers),
		recorded: make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(ctx)
	go p.complete()
	return p
}

// work claims batches under term and hands their jobs to the pipeline of
// term. It stops claiming when a claim comes back short (it then waits for
// the pipeline to end, so that the cycle's heartbeat means its work is
// recorded, and returns more = false), when PollInterval has passed since
// the lease answered, or half the time the lease's answer may be trusted
// (it returns more = true: the pipeline goes on, and the loop asks the
// lease again at once), or when something fails.
//
// loopCtx is the loop's context, the base of the handlers' contexts; ctx is
// the cycle's, which carries the term and ends at the lease's deadline.
func (w *Worker) work(loopCtx, ctx context.Context, term lease.Term) (more bool, err error) {
	if w.pipe == nil {
		w.pipe = w.newPipeline(loopCtx, term)
	}
	p := w.pipe
	until := claimUntil(ctx, w.now(), w.config.PollInterval)
	limit := w.config.BatchSize
	for {
		if err := p.failed(); err != nil {
			return false, w.endPipeline(false)
		}
		// A claim takes jobs only for free handlers, so that no claimed
		// job waits for one with its visibility timeout running. Caught by
		// TestPipeline/ClaimsOnlyForFreeHandlers. (With the MaxHandlers
		// goroutines of start, it also bounds the handlers running at once,
		// which TestPipeline/NoMoreThanMaxHandlersRunAtOnce checks.)
		if !p.slots.take(ctx, limit, until) {
			return true, nil // out of time with the handlers busy, or stopping
		}
		from := p.cursor
		// Caught by TestClaim/RescansFromTheStartWhileClaimsStayFull.
		if w.now().Sub(p.rescanAt) >= w.rescanEvery {
			from, p.rescanAt = claimKey{}, w.now()
		}
		c, err := w.claimFrom(ctx, term, limit, from)
		p.slots.give(limit - len(c.jobs))
		if err != nil {
			w.endPipelineAfter(err)
			return false, err
		}
		p.cursor = c.last
		p.start(ctx, c.jobs)
		if c.rows < limit {
			// The queue ran dry.
			return false, w.endPipeline(false)
		}
		if !w.now().Before(until) {
			return true, nil
		}
	}
}

// claimUntil is when a leader's cycle that began at now stops claiming
// and asks the lease again: poll after now, or halfway to ctx's deadline
// (the end of the lease's answer) when that is sooner. The half left over
// is a late batch's time to finish before the answer runs out. Caught by
// TestClaimUntil.
func claimUntil(ctx context.Context, now time.Time, poll time.Duration) time.Time {
	until := now.Add(poll)
	if d, ok := ctx.Deadline(); ok {
		until = minTime(until, now.Add(d.Sub(now)/2))
	}
	return until
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// batch is the jobs of one claim: they share a context, which carries the
// term and ends at the claiming cycle's deadline or at the jobs' visibility
// timeout, whichever is first, and is released when the last of them ends.
type batch struct {
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int64
}

// task is one job for a handler goroutine.
type task struct {
	job   *Job
	batch *batch
}

// start hands jobs, just claimed under cycleCtx, to the handler
// goroutines, starting more of them while fewer than MaxHandlers exist. A
// handler's context is cancelled when the pipeline is.
func (p *pipeline) start(cycleCtx context.Context, jobs []*Job) {
	if len(jobs) == 0 {
		return
	}
	deadline := p.w.now().Add(p.w.config.VisibilityTimeout)
	if d, ok := cycleCtx.Deadline(); ok {
		deadline = minTime(deadline, d)
	}
	b := &batch{}
	b.ctx, b.cancel = context.WithDeadline(withLeader(p.ctx, p.term, p.w.fencer), deadline)
	b.left.Store(int64(len(jobs)))
	for _, job := range jobs {
		p.tasks <- task{job: job, batch: b}
	}
	for want := min(p.workers+len(jobs), p.w.config.MaxHandlers); p.workers < want; p.workers++ {
		p.handlers.Go(p.handle)
	}
}

// handle is one handler goroutine: it runs jobs until the pipeline ends.
func (p *pipeline) handle() {
	for t := range p.tasks {
		err := p.w.runJob(t.batch.ctx, t.job)
		if t.batch.left.Add(-1) == 0 {
			t.batch.cancel()
		}
		p.outcomes <- outcome{job: t.job, err: err}
		p.slots.give(1)
	}
}

// complete is the completer: it records outcomes in batches, each
// transaction taking every outcome that is waiting once flushAt have
// arrived or completeLinger has passed since the first. It returns once the
// outcomes channel is closed and drained.
func (p *pipeline) complete() {
	defer close(p.recorded)
	flushAt := min(max(p.w.config.BatchSize, completeAtLeast), maxBatchSize)
	linger := time.NewTimer(completeLinger)
	defer linger.Stop()
	for {
		o, open := <-p.outcomes
		if !open {
			return
		}
		linger.Reset(completeLinger)
		batch, open := p.gather([]outcome{o}, flushAt, linger.C)
		if open {
			batch, open = p.gather(batch, maxBatchSize, nil)
		}
		p.record(batch)
		if !open {
			return
		}
	}
}

// gather adds outcomes to batch until it holds limit, the channel is
// closed (open is then false), or until fires; with until nil, it takes
// only the outcomes already waiting.
func (p *pipeline) gather(batch []outcome, limit int, until <-chan time.Time) (_ []outcome, open bool) {
	for len(batch) < limit {
		var o outcome
		select {
		case o, open = <-p.outcomes:
		default:
			if until == nil {
				return batch, true
			}
			select {
			case o, open = <-p.outcomes:
			case <-until:
				return batch, true
			}
		}
		if !open {
			return batch, false
		}
		batch = append(batch, o)
	}
	return batch, true
}

// record records one batch of outcomes, remembering the first failure.
func (p *pipeline) record(batch []outcome) {
	jobs := make([]*Job, len(batch))
	errs := make([]error, len(batch))
	for i, o := range batch {
		jobs[i], errs[i] = o.job, o.err
	}
	if err := p.w.complete(p.ctx, p.term, jobs, errs); err != nil {
		p.errMu.Lock()
		defer p.errMu.Unlock()
		if p.err == nil {
			p.err = err
		}
	}
}

func (p *pipeline) failed() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.err
}

// finish waits for every handler, cancelling them first if cancel is set,
// then for the completer to record their outcomes, and returns the first
// recording that failed.
func (p *pipeline) finish(cancel bool) error {
	if cancel {
		p.cancel()
	}
	close(p.tasks)
	p.handlers.Wait()
	close(p.outcomes)
	<-p.recorded
	p.cancel()
	return p.failed()
}

// endPipeline ends the pipeline, if there is one; see pipeline.finish.
func (w *Worker) endPipeline(cancel bool) error {
	if w.pipe == nil {
		return nil
	}
	err := w.pipe.finish(cancel)
	w.pipe = nil
	return err
}

// endPipelineAfter ends the pipeline after err failed the cycle: the jobs
// in flight still run out and have their outcomes recorded, and a failure
// to record them is only logged, as err is what the cycle reports.
func (w *Worker) endPipelineAfter(err error) {
	if endErr := w.endPipeline(false); endErr != nil {
		w.config.Logger.Warn("worker: recording the outcomes of the jobs in flight failed", "err", endErr, "after", err)
	}
}

// slots count the free handlers.
type slots struct {
	mu    sync.Mutex
	free  int
	freed chan struct{} // a token when slots were given back
}

func newSlots(n int) *slots { return &slots{free: n, freed: make(chan struct{}, 1)} }

// take takes n slots once n are free. It gives up, taking none, when until
// passes or ctx ends.
func (s *slots) take(ctx context.Context, n int, until time.Time) bool {
	var timer *time.Timer
	for {
		s.mu.Lock()
		if s.free >= n {
			s.free -= n
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(time.Until(until))
			defer timer.Stop()
		}
		select {
		case <-s.freed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// give gives n slots back.
func (s *slots) give(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.free += n
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}
