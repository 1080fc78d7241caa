package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/replica"
)

// The parent side of a replica that is the user's command
// (Scenario.Replica): started with the protocol's variables in a process
// group of its own, its group killed on every way out, its output matched
// against the log patterns in log mode.

// leaderWait is how long a run waits for the first piece of leader work.
const leaderWait = 30 * time.Second

// errSilent is waitForLeader's answer when replica commands ran for
// leaderWait and none reported any leader work: the run gets a verdict
// that says so (silentReport) rather than an error.
var errSilent = errors.New("no leader work reported")

// groupGrace is how long a command's process group may outlive the
// command before the runner counts what is left as left behind: children
// signalled with it take a moment to exit.
const groupGrace = time.Second

// startCommand starts one replica as the scenario's command.
func (r *run) startCommand(ctx context.Context, spec replica.Spec) error {
	c := r.sc.Replica
	logPath := filepath.Join(r.dir, "replicas", spec.Replica+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.Command[0], c.Command[1:]...)
	cmd.Env = c.Environ(spec)
	// Own process group: the faults signal it, and every way out kills it.
	// Pdeathsig reaches the command itself if the runner is killed
	// outright, and its keeper (keeper.go) the rest of its group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	rp := &proc{id: spec.Replica, cmd: cmd, log: logPath, done: make(chan struct{}), command: true}
	var pr, pw *os.File
	if c.Log != nil {
		if pr, pw, err = os.Pipe(); err != nil {
			logf.Close()
			return err
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		rec, err := oracle.NewRecorder(ctx, r.direct.DSN, spec.Replica)
		if err != nil {
			logf.Close()
			pr.Close()
			pw.Close()
			return err
		}
		rp.lines = replica.NewLogMatcher(c.Log, rec, &r.tokens)
	} else {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		if pr != nil {
			pr.Close()
			pw.Close()
			rp.lines.Close()
		}
		return fmt.Errorf("replica %s: start %s: %w; check \"replica.command\"", spec.Replica, c.Command[0], err)
	}
	var read sync.WaitGroup
	if pr != nil {
		pw.Close() // the command holds the write end now
		read.Go(func() { rp.lines.Read(context.WithoutCancel(ctx), pr, logf) })
	}
	pid := cmd.Process.Pid
	release, err := keepGroup(r.exe, pid)
	if err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
		read.Wait()
		if pr != nil {
			pr.Close()
			rp.lines.Close()
		}
		logf.Close()
		return err
	}
	_, _ = oracle.LogEvent(ctx, r.conn, oracle.EventReplicaStarted, spec.Replica, fmt.Sprintf("pid %d: %s", pid, strings.Join(c.Command, " ")))
	go func() {
		rp.err = cmd.Wait()
		rp.leftBehind = groupOutlives(pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		release()
		if pr != nil {
			// Every writer is gone with the group; a process that left it
			// (setsid) may still hold the pipe, so do not wait for ever.
			readDone := make(chan struct{})
			go func() { read.Wait(); close(readDone) }()
			select {
			case <-readDone:
			case <-time.After(2 * time.Second):
				pr.Close()
				<-readDone
			}
			pr.Close()
			rp.lines.Close()
		}
		logf.Close()
		// Its open work ends here (oracle.Load), whatever it reported.
		ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		detail := "exited"
		if rp.err != nil {
			detail = "exited: " + rp.err.Error()
		}
		if !r.stopping.Load() {
			detail = r.exitDetail(rp)
		}
		_, _ = oracle.LogEvent(ectx, r.conn, oracle.EventReplicaStopped, rp.id, detail)
		cancel()
		close(rp.done)
	}()
	r.mu.Lock()
	r.replicas = append(r.replicas, rp)
	r.mu.Unlock()
	if r.opts.onReplica != nil {
		r.opts.onReplica(pid)
	}
	return nil
}

// groupOutlives reports whether process group pgid still has a live
// member groupGrace after its leader exited.
func groupOutlives(pgid int) bool {
	deadline := time.Now().Add(groupGrace)
	for {
		if !groupAlive(pgid) {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitedAtOnce is the one line for a command that exited before any
// leader work was reported: its status and the last line it printed.
func (r *run) exitedAtOnce(rp *proc) error {
	status := "exit status 0" // what a shell says of a command that succeeded
	if rp.err != nil {
		status = rp.err.Error()
	}
	last := " with no output"
	if l := lastLine(rp.log); l != "" {
		last = fmt.Sprintf(", its last line: %q", l)
	}
	return fmt.Errorf("replica %s: command %q exited before any leader work was reported (%s)%s; fix the command so that it keeps running as a replica (its output: %s)",
		rp.id, strings.Join(r.sc.Replica.Command, " "), status, last, rp.log)
}

// lastLine is the last non-empty line of the file at path.
func lastLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// silentReport judges a run whose replica commands reported no leader
// work within leaderWait: the measured span is from the first command's
// start to now, and the verdict says what reported nothing and how to
// fix it. Judge fails any run without work (Caught by
// TestJudgeSilentReplicaIsNotSafe); the reason here names the mode.
func (r *run) silentReport(ctx context.Context, start time.Time) (*Report, error) {
	end, err := oracle.LogEvent(ctx, r.conn, oracle.EventMeasureEnd, "", "")
	if err != nil {
		return nil, err
	}
	r.stopping.Store(true)
	r.stopReplicas(ctx)
	locks := r.lockWatch.stop(ctx)
	h, err := oracle.Load(ctx, r.conn, start, end)
	if err != nil {
		return nil, err
	}
	h.Locks, h.Backends = locks, r.lockWatch.backends()
	return r.report(h, oracle.Analyze(h, r.analysis())), nil
}

// silentReason says why no work was measured from replica commands.
func (r *run) silentReason() string {
	wait := r.leaderWait()
	c := r.sc.Replica
	if c.Log == nil {
		return fmt.Sprintf("no leader work was reported: in %s no replica command called doublerun.work_begin; make the lease call it (on %s) when it leads and doublerun.work_end after, or judge an unchanged program by \"replica.log\" patterns", wait, replica.EnvOracleDSN)
	}
	var lines, matched int
	r.mu.Lock()
	for _, rp := range r.replicas {
		if rp.lines != nil {
			l, m := rp.lines.Counts()
			lines, matched = lines+l, matched+m
		}
	}
	r.mu.Unlock()
	if lines == 0 {
		return fmt.Sprintf("no leader work was reported: in %s the replica commands printed nothing; make the program log when it leads and works (and flush: PYTHONUNBUFFERED=1 for Python), see %s", wait, filepath.Join(r.dir, "replicas"))
	}
	return fmt.Sprintf("no leader work was reported: in %s the replica commands printed %d lines and %d matched a pattern, none of them starting work or leadership; check \"replica.log\" against their output in %s", wait, lines, matched, filepath.Join(r.dir, "replicas"))
}

func (r *run) leaderWait() time.Duration {
	if r.opts.leaderWait > 0 {
		return r.opts.leaderWait
	}
	return leaderWait
}

// oracleTime is local instant t on the oracle's clock: the server's now
// less the time elapsed since t on the local monotonic clock.
func (r *run) oracleTime(ctx context.Context, t time.Time) time.Time {
	var now time.Time
	if err := r.conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return t
	}
	return now.Add(-time.Since(t))
}

// groupAlive reports whether process group pgid has a member that is not
// a zombie: one that has exited waits in the group until its parent (init,
// for an orphan) reaps it, and runs nothing.
func groupAlive(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		rest := string(data[strings.LastIndexByte(string(data), ')')+1:])
		f := strings.Fields(rest)
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}
