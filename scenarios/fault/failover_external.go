package fault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// A failover of the user's own cluster (stack.EnvFailoverCommand on the
// external provider): doublerun runs the user's command instead of
// killing and promoting servers it does not own, and logs what a client
// sees, each step on the oracle's clock, the oracle being a server the
// failover does not touch (stack.EnvOracleDSN):
//
//	injected  failover command started: <command>
//	chaos     first failed statement through <endpoint>: <error>
//	chaos     failover command exited: exit 0; its last line: "..."
//	chaos     the server behind <endpoint> promoted, timeline 2 (was 1)
//	chaos     first statement on the new primary through <endpoint>
//
// A command that exits non-zero fails the fault, and so the run, with its
// status and last line: a failover that did not happen must not pass as
// one survived. So does one whose command exits 0 while the timeline
// behind the address never changes: it never struck.

// probeEvery is how often the work endpoint is tried while the command
// runs, for the first failed statement.
const probeEvery = 10 * time.Millisecond

// timelineWait bounds the wait for the timeline to change once the
// command exited 0: a command that waits for its promotion has one behind
// it, and one that only starts it (kubectl cnpg promote) is followed
// within seconds; the built-in promotions took 0.1 to 5.1 s (FINDINGS,
// finding 14).
const timelineWait = 30 * time.Second

// externalFailOver runs the stack's failover command for the fault struck
// at leader.
func externalFailOver(ctx context.Context, t Target, leader string) error {
	s := t.Stack()
	if err := s.FailoverReady(); err != nil {
		return err
	}
	ep := t.WorkEndpoint()
	before, err := stack.TimelineAt(ctx, ep.DSN)
	if err != nil {
		return fmt.Errorf("read the timeline through %s before the failover: %w", ep.Name, err)
	}
	pctx, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	run, err := s.RunFailoverCommand(ctx, func(at time.Time) {
		injected(ctx, t, leader, "failover command started: %s", s.FailoverCommand())
		go func() {
			defer close(probed)
			firstFailure(pctx, t, ep, at)
		}()
	})
	if err != nil {
		stopProbe()
		return err
	}
	event(ctx, t, "", "failover command exited: %s, %s after its start; its last line: %q", run.Status(), run.End.Sub(run.Start).Round(time.Millisecond), run.LastLine)
	// Caught by TestExternalFailover/ACommandThatFailsFailsTheRun.
	if run.Err != nil {
		stopProbe()
		<-probed
		return fmt.Errorf("%s %s (its last line: %q); the failover did not happen as asked, so the run shows nothing about it: fix the command", stack.EnvFailoverCommand, run.Status(), run.LastLine)
	}
	var after int64
	tctx, cancel := context.WithTimeout(ctx, timelineWait)
	defer cancel()
	err = pollFor(tctx, func(ctx context.Context) error {
		tl, err := stack.TimelineAt(ctx, ep.DSN)
		if err == nil && tl == before {
			err = fmt.Errorf("still timeline %d", tl)
		}
		after = tl
		return err
	})
	stopProbe()
	<-probed
	if err != nil {
		return fmt.Errorf("%s exited 0, and the server behind %s is still on timeline %d (%v): no promotion happened, so the fault never struck; make the command wait for the promotion", stack.EnvFailoverCommand, ep.Name, before, oneLine(err))
	}
	// Worded as the built-in failover's step, which the run's validity
	// reads (package oracle): " promoted, timeline ".
	event(ctx, t, "", "the server behind %s promoted, timeline %d (was %d), %s after the command's start", ep.Name, after, before, since(run.Start))
	at, err := s.WaitPrimary(ctx, ep.DSN)
	if err != nil {
		return fmt.Errorf("no statement through %s reached the new primary: %w", ep.Name, err)
	}
	event(ctx, t, "", "first statement on the new primary through %s, %s after the command's start", ep.Name, at.Sub(run.Start).Round(time.Millisecond))
	return nil
}

// firstFailure tries a statement through ep every probeEvery until one
// fails or ctx ends, and logs the first failure.
func firstFailure(ctx context.Context, t Target, ep stack.Endpoint, start time.Time) {
	for {
		_, err := stack.TimelineAt(ctx, ep.DSN)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			event(ctx, t, "", "first failed statement through %s, %s after the command's start: %s", ep.Name, since(start), oneLine(err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(probeEvery):
		}
	}
}

// pollFor calls try every probeEvery until it returns nil or ctx ends.
func pollFor(ctx context.Context, try func(context.Context) error) error {
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(probeEvery):
		}
	}
}

func oneLine(err error) string {
	s := err.Error()
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
