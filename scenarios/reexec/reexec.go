// Package reexec starts this binary again as a child process of a kind
// that a package registered: a scenario's replica (package
// scenarios/replica), the keeper of a replica command's process group
// (package scenarios), a failover trial's leader (package
// chaos/failover). A child is a real process, so SIGKILL and SIGSTOP are
// real, and a user's own go test binary can be one, with the leases it
// registered.
//
// Every child goes through the one entry: a package registers its
// children with [Register] in an init function, the parent starts one with
// [Command], and the binary's main, or the TestMain of a package whose
// tests start children, calls [Main] first:
//
//	func TestMain(m *testing.M) {
//		strategy.Register("mine", strategy.Strategy{New: newMyLease})
//		reexec.Main()
//		os.Exit(m.Run())
//	}
//
// The child's kind and its argument travel in two environment variables,
// DOUBLERUN_CHILD and DOUBLERUN_CHILD_ARG; Main runs the registered
// function with the argument and exits with its code.
//
// # A stand-in for a test binary
//
// A child that doublerun's own packages register (a built-in strategy's
// replica) runs the same in any binary built from this module. [EnvBinary]
// may name one, built without the race detector, to be started in its
// place ([Executable]): make test builds it, because its race-instrumented
// test binaries' replicas spent a fifth of those binaries' CPU on the
// detector (a chaos test: 25.0 core-seconds with race-instrumented
// replicas, 20.4 without). The detector stays on in the test binaries
// themselves, where the runner's concurrent code is. A child of the
// caller's own registering (a strategy of its own) is always this binary.
package reexec

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

// EnvBinary names a binary built from this module that [Executable] may
// start in place of this one, for a child that doublerun's own packages
// register. The mutation gate removes it from the environment of a
// mutant's tests, which must start the mutant's code.
const EnvBinary = "DOUBLERUN_CHILD_BINARY"

// Executable is the binary to start a child with: the one EnvBinary names
// when standIn says the child is doublerun's own and the variable is set,
// else this one. A name that is no executable file is an error that says
// so, never this binary in its place.
func Executable(standIn bool) (string, error) {
	if bin := os.Getenv(EnvBinary); standIn && bin != "" {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file; unset it, or build it with go build -o %s ./cmd/doublerun", EnvBinary, bin, bin)
		}
		return bin, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary to start a child: %w", err)
	}
	return exe, nil
}

// The environment of a child: which one it is, and its argument.
const (
	envName = "DOUBLERUN_CHILD"
	envArg  = "DOUBLERUN_CHILD_ARG"
)

var children = struct {
	sync.Mutex
	m map[string]func(arg string) int
}{m: map[string]func(string) int{}}

// Register makes fn the child called name: in a process that Command
// started as name, Main runs fn with Command's arg and exits with what it
// returns. Register in an init function of the package whose child it is,
// so that every binary that imports the package can be its child;
// registering a name twice panics.
func Register(name string, fn func(arg string) int) {
	children.Lock()
	defer children.Unlock()
	if _, dup := children.m[name]; dup {
		panic(fmt.Sprintf("reexec: child %q registered twice", name))
	}
	children.m[name] = fn
}

// Main runs this process as the child that Command started it as, and
// exits with the child's code; in any other process it returns at once.
// Call it first in main, and first in the TestMain of a package whose
// tests start children (after registering a strategy of your own), so
// that a child never runs the program or the tests.
func Main() {
	name, ok := os.LookupEnv(envName)
	if !ok {
		return
	}
	children.Lock()
	fn, ok := children.m[name]
	children.Unlock()
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%q names no child this binary knows (%s); it is set only by the process that starts one\n", envName, name, strings.Join(names(), ", "))
		os.Exit(2)
	}
	os.Exit(fn(os.Getenv(envArg)))
}

// names lists the registered children, sorted.
func names() []string {
	children.Lock()
	defer children.Unlock()
	return slices.Sorted(maps.Keys(children.m))
}

// Command is the command that starts exe (this binary, or the one
// Executable gave) as the child called name with arg, in this process's
// environment; the end of ctx kills it, as exec.CommandContext does. When
// exe is this go test binary it passes -test.run=^$ too, so that a
// TestMain that does not call Main runs no test in the child. The caller
// sets the rest (output, process group, death signal) and starts it.
func Command(ctx context.Context, exe, name, arg string) *exec.Cmd {
	var args []string
	if self, _ := os.Executable(); IsTestBinary() && exe == self {
		args = []string{"-test.run=^$"}
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), envName+"="+name, envArg+"="+arg)
	return cmd
}

// IsTestBinary reports whether this process is a go test binary, whose
// children must not run its tests.
func IsTestBinary() bool { return flag.Lookup("test.run") != nil }
