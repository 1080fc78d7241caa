package failover

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/scenarios/reexec"
)

// leaderChild is the name under which a KILL_LEADER trial's leader is
// this binary started again (package reexec); its argument is the Spec
// as JSON. A binary that runs trials calls reexec.Main first.
const leaderChild = "failover-leader"

func init() { reexec.Register(leaderChild, runChild) }

// runChild is a replica in a process of its own: it calls its lease at the
// spec's pace, writes "leader TOKEN" to stdout once it leads, and keeps
// calling until it is killed or its stdin closes (the parent is gone). It
// returns the process's exit code.
func runChild(raw string) int {
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", leaderChild, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	l, err := spec.lease(ctx, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	announced := false
	for {
		started := time.Now()
		res, err := call(ctx, l)
		if err != nil {
			return 0
		}
		if res.Status != lease.Leader {
			fmt.Fprintf(os.Stderr, "child: %s %v\n", res.Status, res.Err)
		}
		if res.Status == lease.Leader && !announced {
			fmt.Printf("leader %d\n", res.Term.Token)
			announced = true
		}
		pause := time.NewTimer(spec.Poll - time.Since(started))
		select {
		case <-pause.C:
		case <-ctx.Done():
			return 0
		}
	}
}

// child is a replica running in a child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr lockedBuffer
	done   chan struct{}
}

// lockedBuffer is a bytes.Buffer that a child's stderr copy may write
// while an error message reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}

// startChild starts this binary again as a replica of spec and waits until
// it reports Leader. The child is killed when ctx ends or stop is called,
// dies with this process (SIGKILL as the parent's death signal), and exits
// by itself when its stdin closes.
func startChild(ctx context.Context, spec Spec) (*child, error) {
	encoded, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary to start the leader: %w", err)
	}
	c := &child{done: make(chan struct{})}
	c.cmd = reexec.Command(ctx, exe, leaderChild, string(encoded))
	c.cmd.Stderr = &c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	c.stdin = stdin
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the leader process: %w", err)
	}
	// The first line is the child's announcement; the rest, if any, is
	// read and dropped, so the child never blocks on a full pipe. Wait
	// comes after the last read, as exec requires.
	first := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		for sc.Scan() {
		}
		_ = c.cmd.Wait()
	}()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case line, ok := <-first:
		if ok && strings.HasPrefix(line, "leader ") {
			return c, nil
		}
		c.stop()
		if !ok {
			return nil, fmt.Errorf("the leader process exited before leading: %s", c.stderr.String())
		}
		return nil, fmt.Errorf("the leader process said %q", line)
	case <-timeout.C:
		c.stop()
		return nil, fmt.Errorf("the leader process did not lead within 30s: %s", c.stderr.String())
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
}

// kill sends SIGKILL and waits until the process is gone and reaped.
func (c *child) kill() error {
	err := c.cmd.Process.Kill()
	<-c.done
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// stop closes the child's stdin and kills it, whatever state it is in.
func (c *child) stop() {
	_ = c.stdin.Close()
	_ = c.kill()
}
