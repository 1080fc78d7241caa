// Command prepare picks the route a doublerun stack takes on this machine
// and prints it in one line, building local images or installing packages
// on first use (stack.Prepare).
//
//	prepare                 prepare, print the route, exit
//	prepare [-warm W]... -- CMD ARGS...
//	                        also start one stack, run CMD with its DSNs and
//	                        DOUBLERUN_SHARED_STACK=1 in the environment,
//	                        then remove the stack; exit with CMD's status.
//	                        Each W, a command line split at spaces, runs in
//	                        turn while the stack starts
//	prepare -child-binary PKG [-warm W]... -- CMD ARGS...
//	                        also build PKG (a main package of this module)
//	                        without the race detector while the stack
//	                        starts, and name it in DOUBLERUN_CHILD_BINARY
//	                        for CMD (reexec.EnvBinary)
//
// `make test` passes `-warm "go list -race -deps -test -export ./..."`,
// which compiles every package the tests need: on a machine with no
// images that compile overlaps their build, which waits mostly on the
// network and the disk, instead of following it. A second `-warm "make
// -s replicas"` builds the golang-migrate and River replica programs,
// whose tests then find them in the build cache: compiled during a run,
// on a first run of make test beside two CPU hogs, they starved the
// scenarios running beside them until their leases' grants timed out.
//
// `make test` also passes `-child-binary ./cmd/doublerun`: the replicas
// of the built-in strategies that the tests start, and the CLI that
// cmd/doublerun's tests run, are then that binary, built once without the
// race detector, rather than the race-instrumented test binary started
// again (reexec.Executable). A build that fails is said in one line and
// the tests run as before.
//
// `make test` runs `prepare -- go test ./...`: the test binaries, which run
// in parallel and show their output only when they fail, share that one
// stack (stacktest.Shared) instead of starting one each, while the tests of
// the providers and those that restart servers still start their own.
// Ctrl-C and SIGTERM reach CMD, and the stack is removed after it exits; if
// prepare itself is killed, the next stack started on the machine removes
// this one (its servers carry prepare's PID as their owner).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/stack"
)

func main() {
	level := slog.LevelInfo
	if os.Getenv("DOUBLERUN_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(lineHandler{w: os.Stderr, level: level})
	tclog.SetDefault(stdlog.New(io.Discard, "", 0)) // its banner is not the route
	args := os.Args[1:]
	if len(args) == 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := stack.Prepare(ctx, stack.Options{Logger: log}); err != nil {
			fmt.Fprintln(os.Stderr, "doublerun:", err)
			os.Exit(1)
		}
		return
	}
	var warm [][]string
	var child string
	for len(args) > 1 && (args[0] == "-warm" || args[0] == "-child-binary") {
		if args[0] == "-child-binary" {
			child = args[1]
		} else {
			warm = append(warm, strings.Fields(args[1]))
		}
		args = args[2:]
	}
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "usage: prepare [-child-binary PKG] [-warm COMMAND]... [-- COMMAND ARGS...]")
		os.Exit(2)
	}
	var childEnv []string
	if child != "" {
		dir, err := stack.TempDir() // swept by the next stack if prepare is killed
		if err != nil {
			fmt.Fprintln(os.Stderr, "doublerun:", err)
			os.Exit(1)
		}
		bin := filepath.Join(dir, "doublerun")
		warm = append([][]string{{"go", "build", "-o", bin, child}}, warm...)
		childEnv = []string{reexec.EnvBinary + "=" + bin}
		code := runShared(log, warm, args[1:], childEnv)
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(runShared(log, warm, args[1:], nil))
}

// runShared starts one stack, runs argv with the stack's DSNs and
// DOUBLERUN_SHARED_STACK=1 added to the environment, removes the stack and
// returns argv's exit status. Ctrl-C and SIGTERM are passed to argv, which
// decides when to stop; the stack outlives it until it has.
func runShared(log *slog.Logger, warm [][]string, argv, childEnv []string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	warmed := warmUp(ctx, warm)
	var mu sync.Mutex
	var child *os.Process
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for sig := range sigs {
			cancel() // a stack still starting stops
			mu.Lock()
			if child != nil {
				_ = child.Signal(sig)
			}
			mu.Unlock()
		}
	}()

	s, err := stack.Start(ctx, stack.Options{Logger: log})
	if err != nil {
		if ctx.Err() != nil {
			return 130
		}
		fmt.Fprintln(os.Stderr, "doublerun:", err)
		return 1
	}
	defer func() {
		if err := s.Shutdown(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "doublerun: remove the shared stack:", err)
		}
	}()
	log.Info("one stack shared by the test binaries; tests of the providers and tests that restart servers start their own",
		"provider", s.Provider())
	<-warmed

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = sharedEnv(os.Environ(), s.Env())
	for _, kv := range childEnv {
		if bin, _ := strings.CutPrefix(kv, reexec.EnvBinary+"="); fileExists(bin) {
			cmd.Env = append(cmd.Env, kv)
			log.Info("the built-in strategies' replicas and the CLI's tests run a doublerun binary built without the race detector", "binary", bin)
		} else {
			log.Info("the doublerun binary did not build; replicas and the CLI's tests run the test binaries themselves", "binary", bin)
		}
	}
	// If prepare is killed outright, the command goes too; the stack is
	// then removed by the next stack started on the machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	mu.Lock()
	if ctx.Err() != nil {
		mu.Unlock()
		return 130
	}
	err = cmd.Start()
	if err == nil {
		child = cmd.Process
	}
	mu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "doublerun: run %s: %v\n", argv[0], err)
		return 1
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	case errors.As(err, &exit):
		return 130 // ended by a signal
	}
	fmt.Fprintf(os.Stderr, "doublerun: %s: %v\n", argv[0], err)
	return 1
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// warmUp runs each command of cmds in turn in the background, its output
// discarded: a failure shows again, with its message, in the command
// that follows. The channel closes when the last has ended.
func warmUp(ctx context.Context, cmds [][]string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, argv := range cmds {
			if len(argv) == 0 {
				continue
			}
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			_ = cmd.Run()
		}
	}()
	return done
}

// sharedEnv is environ with the shared stack's variables added. The
// provider the user chose (or auto) stays in force for the stacks tests
// start themselves; DOUBLERUN_SHARED_STACK names the shared one instead.
func sharedEnv(environ, stackEnv []string) []string {
	env := slices.Clone(environ)
	for _, kv := range stackEnv {
		if !strings.HasPrefix(kv, stack.EnvProvider+"=") {
			env = append(env, kv)
		}
	}
	return append(env, stack.EnvSharedStack+"=1")
}

// lineHandler prints "doublerun: message key=value ..." lines.
type lineHandler struct {
	w     io.Writer
	level slog.Level
	attrs []slog.Attr
}

func (h lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("doublerun: " + r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteString("\n")
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return h
}

func (h lineHandler) WithGroup(string) slog.Handler { return h }
