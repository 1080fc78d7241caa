package scenarios

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
)

// A replica command's process group dies with the runner, however the
// runner ends. Pdeathsig reaches the command alone; its children would
// live on. So beside each command the runner starts a keeper: this
// binary again, in a group of its own, reading a pipe whose only writer
// is the runner. When the runner exits, even by SIGKILL, the kernel
// closes that pipe, and the keeper kills the command's whole group. When
// the runner has killed the group itself it writes keeperDone first, and
// the keeper exits without a signal that a reused group id could catch.

// envKeeper names the process group a keeper watches over.
const envKeeper = "DOUBLERUN_GROUP_KEEPER"

// keeperDone is the byte that tells a keeper the group is gone.
const keeperDone = 'd'

// maybeRunKeeper runs this process as a keeper, and exits, when the
// runner started it as one.
func maybeRunKeeper() {
	raw, ok := os.LookupEnv(envKeeper)
	if !ok {
		return
	}
	pgid, err := strconv.Atoi(raw)
	if err != nil || pgid <= 1 {
		fmt.Fprintf(os.Stderr, "%s=%q is not a process group; it is set by the runner only\n", envKeeper, raw)
		os.Exit(2)
	}
	// The runner's terminal and its faults never signal the keeper's own
	// group, but a stray SIGTERM or Ctrl-C must not end the watch.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	var b [1]byte
	if n, _ := io.ReadFull(os.Stdin, b[:]); n == 1 && b[0] == keeperDone {
		os.Exit(0)
	}
	// EOF: the runner is gone. Caught by TestAKilledRunnerTakesTheCommandsChildren.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	os.Exit(0)
}

// keepGroup starts a keeper of process group pgid, which exe (this
// binary) runs; release tells it the group is gone, once the runner
// killed it, and reaps it.
func keepGroup(exe string, pgid int) (release func(), err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	var args []string
	if isTestBinary() {
		args = []string{"-test.run=^$"}
	}
	k := exec.Command(exe, args...)
	k.Env = append(os.Environ(), envKeeper+"="+strconv.Itoa(pgid))
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
