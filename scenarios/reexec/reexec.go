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

// Command is the command that starts exe, this binary, again as the child
// called name with arg, in this process's environment; the end of ctx
// kills it, as exec.CommandContext does. In a go test binary it passes
// -test.run=^$ too, so that a TestMain that does not call Main runs no
// test in the child. The caller sets the rest (output, process group,
// death signal) and starts it.
func Command(ctx context.Context, exe, name, arg string) *exec.Cmd {
	var args []string
	if IsTestBinary() {
		args = []string{"-test.run=^$"}
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), envName+"="+name, envArg+"="+arg)
	return cmd
}

// IsTestBinary reports whether this process is a go test binary, whose
// children must not run its tests.
func IsTestBinary() bool { return flag.Lookup("test.run") != nil }
