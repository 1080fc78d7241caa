package scenarios

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/doublerun/doublerun/scenarios/reexec"
)

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
