package lease

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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
	l, err := newBenchLease(ctx, spec)
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
	stderr bytes.Buffer
	done   chan struct{}
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
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	go func() {
		defer close(c.done)
		for range lines { // drain, so Wait's pipe close is the only end
		}
		_ = c.cmd.Wait()
	}()
	b.Cleanup(func() {
		_ = stdin.Close()
		c.kill()
	})
	select {
	case line, ok := <-lines:
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
