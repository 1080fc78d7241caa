package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/replica"
)

// The parent side of a replica that is the user's command
// (Scenario.Replica): started with the protocol's variables in a process
// group of its own, its group killed on every way out, its output matched
// against the log patterns in log mode.

// DefaultLeaderWait is how long a run waits for the first piece of leader
// work unless RunOptions.LeaderWait says otherwise.
const DefaultLeaderWait = 30 * time.Second

// errSilent is waitForLeader's answer when replica commands ran for
// RunOptions.LeaderWait and none reported any leader work: the run gets a verdict
// that says so (finish, silentReason) rather than an error.
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
	// outright, and its keeper (below) the rest of its group.
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

// A replica command's process group dies with the runner, however the
// runner ends. Pdeathsig reaches the command alone; its children would
// live on. So beside each command the runner starts a keeper: this
// binary again, in a group of its own, reading a pipe whose only writer
// is the runner. When the runner exits, even by SIGKILL, the kernel
// closes that pipe, and the keeper kills the command's whole group. When
// the runner has killed the group itself it writes keeperDone first, and
// the keeper exits without a signal that a reused group id could catch.

// keeperChild is the name under which a keeper is this binary started
// again (package reexec); its argument is the process group it watches.
const keeperChild = "group-keeper"

func init() { reexec.Register(keeperChild, runKeeper) }

// keeperDone is the byte that tells a keeper the group is gone.
const keeperDone = 'd'

// runKeeper is a keeper process, watching over process group raw; it
// returns the process's exit code.
func runKeeper(raw string) int {
	pgid, err := strconv.Atoi(raw)
	if err != nil || pgid <= 1 {
		fmt.Fprintf(os.Stderr, "keeper: %q is not a process group; it is set by the runner only\n", raw)
		return 2
	}
	// The runner's terminal and its faults never signal the keeper's own
	// group, but a stray SIGTERM or Ctrl-C must not end the watch.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	var b [1]byte
	if n, _ := io.ReadFull(os.Stdin, b[:]); n == 1 && b[0] == keeperDone {
		return 0
	}
	// EOF: the runner is gone. Caught by TestAKilledRunnerTakesTheCommandsChildren.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return 0
}

// keepGroup starts a keeper of process group pgid, which exe (this
// binary) runs; release tells it the group is gone, once the runner
// killed it, and reaps it.
func keepGroup(exe string, pgid int) (release func(), err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	k := reexec.Command(context.Background(), exe, keeperChild, strconv.Itoa(pgid))
	k.Stdin = pr
	k.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = k.Start()
	pr.Close() // the keeper holds the read end now
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("start the keeper of process group %d: %w", pgid, err)
	}
	return func() {
		_, _ = pw.Write([]byte{keeperDone})
		pw.Close()
		_ = k.Wait()
	}, nil
}
