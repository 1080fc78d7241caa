package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// ProcessState returns the one-letter state of process pid from
// /proc/<pid>/stat: R running, S sleeping, T stopped, Z zombie, ... It
// fails where there is no /proc.
func ProcessState(pid int) (byte, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, data)
	}
	return data[i+2], nil
}

// waitState waits until pid's state satisfies ok. Without /proc it
// trusts the signal and returns at once.
func waitState(ctx context.Context, pid int, ok func(byte) bool) error {
	for {
		s, err := ProcessState(pid)
		if errors.Is(err, os.ErrNotExist) {
			if _, statErr := os.Stat("/proc/self/stat"); statErr != nil {
				return nil // no /proc on this system
			}
			return fmt.Errorf("process %d is gone", pid)
		}
		if err != nil {
			return err
		}
		if ok(s) {
			return nil
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("process %d still in state %c: %w", pid, s, err)
		}
	}
}

// waitGone waits until process pid has exited (a zombie counts as gone:
// its parent, the runner, reaps it).
func waitGone(ctx context.Context, pid int) error {
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if s, err := ProcessState(pid); err == nil && s == 'Z' {
			return nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("process %d still running: %w", pid, err)
		}
	}
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
