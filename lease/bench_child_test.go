package lease

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchChildEnv carries a benchSpec to a child process: TestMain runs
// runBenchChild instead of the tests when it is set.
const benchChildEnv = "DOUBLERUN_LEASE_BENCH_CHILD"

// runBenchChild is a replica in a process of its own: it calls its lease
// at the spec's pace, writes "leader TOKEN" to stdout once it leads, and
// keeps calling until it is killed or its stdin closes (the parent is
// gone). It returns the process's exit code.
func runBenchChild(specJSON string) int {
	var spec benchSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", benchChildEnv, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	l, err := newBenchLease(ctx, spec, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	announced := false
	for {
		started := time.Now()
		res, err := spec.call(ctx, l)
		if err != nil {
			return 0
		}
		if res.Status != Leader {
			fmt.Fprintf(os.Stderr, "child: %s %v\n", res.Status, res.Err)
		}
		if res.Status == Leader && !announced {
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

// benchChild is a replica running in a child process.
type benchChild struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{}
}

// lockedBuffer is a bytes.Buffer that a child's stderr copy may write
// while a failing benchmark reads it.
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
	return l.b.String()
}

// startBenchChild starts this test binary again as a replica of spec and
// waits until it reports Leader. The child is killed when ctx ends or b
// finishes, and exits by itself if this process dies (its stdin closes).
func startBenchChild(b testing.TB, ctx context.Context, spec benchSpec) *benchChild {
	b.Helper()
	encoded, err := json.Marshal(spec)
	require.NoError(b, err)
	c := &benchChild{done: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), benchChildEnv+"="+string(encoded))
	c.cmd.Stderr = &c.stderr
	stdin, err := c.cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := c.cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, c.cmd.Start())
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
	b.Cleanup(func() {
		_ = stdin.Close()
		c.kill()
	})
	select {
	case line, ok := <-first:
		require.True(b, ok, "the child exited before leading: %s", c.stderr.String())
		require.True(b, strings.HasPrefix(line, "leader "), "child said %q", line)
	case <-time.After(30 * time.Second):
		b.Fatalf("the child did not lead within 30s: %s", c.stderr.String())
	}
	return c
}

// kill sends SIGKILL and waits until the process is gone and reaped.
func (c *benchChild) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}
