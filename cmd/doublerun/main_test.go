package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/reexec"
)

// The test binary doubles as the CLI: with DOUBLERUN_TEST_CLI=1 it runs
// main's logic on its arguments, so tests exercise real exit codes and
// output without building a separate binary.
func TestMain(m *testing.M) {
	if os.Getenv("DOUBLERUN_TEST_CLI") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// cliCommand runs the CLI as a child: the doublerun binary that
// reexec.EnvBinary names when it is set (make test builds it from this
// checkout, without the race detector), else this test binary. The tests
// start the CLI about 370 times in one make test, and as this
// race-instrumented binary those children cost 40.9 core-seconds of
// about 560 (process accounting of a warm run at 9933973); a start of the
// race-built test binary costs 0.106 core-seconds, of the plain binary
// 0.035 (`version`, 50 runs each). The mutation gate removes the variable
// for a mutant's tests, so a guard's test still runs the mutated CLI.
func cliCommand(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := reexec.Executable(true)
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), "DOUBLERUN_TEST_CLI=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func cli(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := cliCommand(t, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if code < 0 {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

func TestBadInputGetsOneLineAndNonZeroExit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"UnknownProvider", []string{"DOUBLERUN_PROVIDER=kubernetes"}, []string{"stack", "up"},
			`doublerun stack: DOUBLERUN_PROVIDER="kubernetes" is not a provider; use auto, docker, native or external, or unset it for auto`},
		{"MalformedDSN", []string{
			"DOUBLERUN_POSTGRES_DSN=postgres://u:p@127.0.0.1:1/db",
			"DOUBLERUN_SESSION_DSN=postgres://u:p@127.0.0.1:notaport/db",
			"DOUBLERUN_SESSION_ADMIN_DSN=postgres://u:p@127.0.0.1:1/pgbouncer",
			"DOUBLERUN_TRANSACTION_DSN=postgres://u:p@127.0.0.1:1/db",
			"DOUBLERUN_TRANSACTION_ADMIN_DSN=postgres://u:p@127.0.0.1:1/pgbouncer",
		}, []string{"stack", "check"},
			"doublerun stack: external provider: DOUBLERUN_SESSION_DSN is not a valid DSN"},
		{"MissingPostgresBinaries", []string{"DOUBLERUN_PROVIDER=native", "DOUBLERUN_POSTGRES_BINDIR=/nonexistent"}, []string{"stack", "up"},
			"doublerun stack: initdb not found in DOUBLERUN_POSTGRES_BINDIR=/nonexistent; install package postgresql-15"},
		{"MissingPgBouncerBinary", []string{"DOUBLERUN_PROVIDER=native", "DOUBLERUN_PGBOUNCER_BIN=/nonexistent/pgbouncer"}, []string{"stack", "up"},
			"doublerun stack: pgbouncer binary not found at DOUBLERUN_PGBOUNCER_BIN=/nonexistent/pgbouncer; install package pgbouncer"},
		{"DockerNotAnswering", []string{"DOUBLERUN_PROVIDER=docker", "DOCKER_HOST=tcp://127.0.0.1:1"}, []string{"stack", "up"},
			"doublerun stack: docker engine not answering"},
		{"NoProviderCanStart", []string{"DOUBLERUN_PROVIDER=auto", "DOCKER_HOST=tcp://127.0.0.1:1", "DOUBLERUN_PGBOUNCER_BIN=/nonexistent/pgbouncer"}, []string{"stack", "up"},
			"doublerun stack: no provider can start a stack: docker: "},
		{"UnknownCommand", nil, []string{"stak"}, `doublerun: unknown command "stak"; valid commands: `},
		{"UnknownSubcommand", nil, []string{"stack", "down"}, `doublerun stack: unknown subcommand "down": use up or check`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := cli(t, tc.env, tc.args...)
			require.NotZero(t, code)
			require.Empty(t, stdout)
			stderr = messages(stderr)
			first, _, _ := strings.Cut(stderr, "\n")
			require.True(t, strings.HasPrefix(first, tc.want), "stderr: %q\nwant prefix: %q", stderr, tc.want)
			if !strings.Contains(stderr, "\nUsage") {
				require.Equal(t, first+"\n", stderr, "exactly one line")
			}
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := cli(t, nil, "version")
	require.Zero(t, code)
	require.Empty(t, stderr)
	require.True(t, strings.HasPrefix(stdout, "doublerun "), stdout)
}

// stack up prints export lines that stack check can use, and on Ctrl-C
// removes everything: afterwards no endpoint port answers.
func TestStackUpExportsAndCleansUpOnInterrupt(t *testing.T) {
	t.Parallel()
	cmd := cliCommand(t, nil, "stack", "up")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var exports []string
	sc := bufio.NewScanner(stdout)
	for len(exports) < 6 && sc.Scan() {
		exports = append(exports, sc.Text())
	}
	require.Len(t, exports, 6, "stderr: %s", stderr.String())
	var env, hosts []string
	for _, line := range exports {
		kv := strings.TrimPrefix(line, "export ")
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(v, "'")
		env = append(env, k+"="+v)
		if strings.HasSuffix(k, "_DSN") {
			u, err := url.Parse(v)
			require.NoError(t, err)
			hosts = append(hosts, u.Host)
		}
	}

	out, errOut, code := cli(t, env, "stack", "check")
	require.Zero(t, code, errOut)
	require.Regexp(t, `(?m)^postgres\s+direct\s.*\sdirect \(the cancel key's PID equals pg_backend_pid\(\)`, out)
	require.Regexp(t, `(?m)^transaction\s+transaction\s+1\s.*\stransaction-pooled \(backend \d+ served clients`, out, "a transaction pool of one, proven by behaviour")

	// A transaction DSN (and its admin DSN) that is really the session
	// bouncer: the table shows it, and check says so and exits 1.
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	swapped := append(slices.Clone(env),
		"DOUBLERUN_TRANSACTION_DSN="+vars["DOUBLERUN_SESSION_DSN"],
		"DOUBLERUN_TRANSACTION_ADMIN_DSN="+vars["DOUBLERUN_SESSION_ADMIN_DSN"])
	out, errOut, code = cli(t, swapped, "stack", "check")
	require.Equal(t, 1, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Regexp(t, `(?m)^transaction\s+session\s+20\s.*\spinned \(`, out)
	u, err := url.Parse(vars["DOUBLERUN_SESSION_DSN"])
	require.NoError(t, err)
	require.Equal(t, "doublerun stack: DOUBLERUN_TRANSACTION_DSN's bouncer has pool_mode=session on its admin console (DOUBLERUN_TRANSACTION_ADMIN_DSN), not transaction; "+
		"point DOUBLERUN_TRANSACTION_DSN and DOUBLERUN_TRANSACTION_ADMIN_DSN at the transaction-pooling bouncer\n", lastLine(errOut), "session endpoint %s", u.Host)

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		require.Equal(t, 130, cmd.ProcessState.ExitCode(), "stack up exits 130 after Ctrl-C, as every command; stderr: %s", stderr.String())
		require.Equal(t, "doublerun stack: interrupted; the stack is stopped and removed\n", lastLine(stderr.String()))
	case <-time.After(2 * time.Minute):
		t.Fatal("stack up did not exit after SIGINT")
	}
	for _, h := range hosts {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", h)
		if err == nil {
			c.Close()
		}
		require.Error(t, err, "%s still answers after stack up exited", h)
	}
}

// messages is stderr without its log lines (slog's "time=..."): a stack's
// start logs what its sweep of dead processes' leftovers removed, if any,
// before whatever error ends the command.
func messages(stderr string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if !strings.HasPrefix(l, "time=") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// lastLine is the last line of s, with its newline.
func lastLine(s string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1] + "\n"
}

// syncBuffer is a bytes.Buffer that a child process writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
