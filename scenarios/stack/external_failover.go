package stack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Your own cluster: an external stack (EnvProvider=external) whose
// Postgres is an HA setup of the user's (Patroni, CloudNativePG, a
// managed database) runs the failover faults through a command the user
// gives (EnvFailoverCommand), against the address in EnvPostgresDSN. The
// oracle's history must survive the failover, so it lives on a server no
// fault touches (EnvOracleDSN); without one the failover faults are
// refused (FailoverReady). What doublerun cannot do there it does not
// pretend to: it owns neither server, so it times only what a client
// sees (the command's start and exit, the first failed statement, the
// timeline's change, the first statement on the new primary).

// The external failover's variables.
const (
	// EnvFailoverCommand is a shell command (sh -c) that fails the
	// user's cluster over, such as `patronictl failover --force ...`; it
	// runs with the stack's environment (Stack.Env) added.
	EnvFailoverCommand = "DOUBLERUN_FAILOVER_COMMAND"
	// EnvOracleDSN is a Postgres server that no failover touches, where
	// the oracle keeps the run's history.
	EnvOracleDSN = "DOUBLERUN_ORACLE_DSN"
)

// externalFailover is the failover side of an external stack.
type externalFailover struct {
	command string
	// oracle is EnvOracleDSN's server; its DSN is empty when unset.
	oracle Endpoint
}

// readExternalFailover reads the external failover's variables, and
// checks the oracle's server answers when one is named.
func readExternalFailover(ctx context.Context, opts Options) (*externalFailover, error) {
	f := &externalFailover{command: strings.TrimSpace(opts.getenv(EnvFailoverCommand))}
	dsn := opts.getenv(EnvOracleDSN)
	if dsn == "" {
		return f, nil
	}
	version, err := probe(ctx, dsn)
	if err != nil {
		return nil, &EnvError{Var: EnvOracleDSN, msg: fmt.Sprintf("external provider: %s (%s) does not answer: %s; set it to a Postgres server that no failover touches", EnvOracleDSN, hostPort(dsn), connectCause(err))}
	}
	f.oracle = Endpoint{Name: OracleName, DSN: dsn, PostgresVersion: version}
	return f, nil
}

// FailoverCommand is the external stack's EnvFailoverCommand, "" when it
// has none (or is not external).
func (s *Stack) FailoverCommand() string {
	if s.ext == nil {
		return ""
	}
	return s.ext.command
}

// FailoverReady says whether the failover faults can run on this external
// stack, or what to set: a command that fails the cluster over, and a
// server for the oracle that the failover does not take with it. A stack
// that is not external is ready as far as this goes (Replication says the
// rest).
func (s *Stack) FailoverReady() error {
	if s.provider != ProviderExternal {
		return nil
	}
	switch {
	case s.ext == nil || s.ext.command == "":
		return fmt.Errorf("the failover faults on the external provider need %s: a shell command that fails your cluster over (see README, \"Your own cluster\")", EnvFailoverCommand)
	case s.ext.oracle.DSN == "":
		// Caught by TestExternalFailoverNeedsAnOracle.
		return fmt.Errorf("the failover faults on the external provider need %s: a Postgres server your failover does not touch, where the oracle keeps the run's history", EnvOracleDSN)
	}
	return nil
}

// CommandRun is how a failover command ran.
type CommandRun struct {
	Start, End time.Time
	// Err is nil for an exit status of 0.
	Err error
	// LastLine is the last non-empty line of its output, stdout and
	// stderr together.
	LastLine string
}

// Status is the command's exit as one phrase: "exit 0", "exit status 1".
func (c CommandRun) Status() string {
	if c.Err == nil {
		return "exit 0"
	}
	return c.Err.Error()
}

// RunFailoverCommand runs EnvFailoverCommand with sh -c, with this
// stack's environment added, in a process group of its own that is
// killed when ctx ends, and says how it ran. started is called once it
// has started.
func (s *Stack) RunFailoverCommand(ctx context.Context, started func(time.Time)) (CommandRun, error) {
	if err := s.FailoverReady(); err != nil {
		return CommandRun{}, err
	}
	cmd := exec.Command("/bin/sh", "-c", s.ext.command)
	cmd.Env = append(os.Environ(), s.Env()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	run := CommandRun{Start: time.Now()}
	if err := cmd.Start(); err != nil {
		return run, fmt.Errorf("start %s: %w", EnvFailoverCommand, err)
	}
	if started != nil {
		started(run.Start)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case run.Err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		run.Err = fmt.Errorf("killed when the fault's time ran out (%w)", <-done)
	}
	run.End = time.Now()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	run.LastLine = strings.TrimSpace(lines[len(lines)-1])
	return run, nil
}

// TimelineAt is the timeline of the server that dsn leads to now: a
// client's view of the promotions behind the user's address.
func TimelineAt(ctx context.Context, dsn string) (int64, error) {
	var tl int64
	if err := queryOn(ctx, dsn, timelineSQL, &tl); err != nil {
		return 0, err
	}
	return tl, nil
}
