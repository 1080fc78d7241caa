// Package mutationtest helps tests of the mutation runner and its command
// watch the go test processes they start: a test binary writes its PID to
// a file, and the test checks that the process is gone after a cancel.
package mutationtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// WaitForPID waits up to two minutes for file to hold a PID and returns it.
func WaitForPID(t testing.TB, file string) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(file); err == nil && len(data) > 0 {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			require.NoError(t, err)
			return pid
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no test binary wrote %s", file)
	return 0
}

// Alive reports whether pid is a live process; a zombie is not.
func Alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
