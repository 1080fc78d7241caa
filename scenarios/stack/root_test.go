package stack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The image root's PID comes from the engine; only its own sleep may lend
// a filesystem, never another process that happens to have that PID here.
func TestImageRootProcessIsTheContainersSleep(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	for pid, cmdline := range map[string]string{"10": "sleep\x00infinity\x00", "11": "bash\x00", "12": "sleep\x00infinity\x00x\x00"} {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(cmdline), 0o644))
	}
	require.True(t, isImageRootProcess(proc, 10))
	require.False(t, isImageRootProcess(proc, 11), "another program")
	require.False(t, isImageRootProcess(proc, 12), "other arguments")
	require.False(t, isImageRootProcess(proc, 13), "no such process here")
	require.False(t, isImageRootProcess(proc, os.Getpid()), "this test is no sleep")
}

// rootUser reads the root's own passwd, which the servers' libc reads.
func TestRootUserReadsTheRootsPasswd(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/passwd"),
		[]byte("root:x:0:0:root:/root:/bin/bash\npostgres:x:100:102:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\nbad:x:y:1::/:/bin/sh\n"), 0o644))
	uid, gid, err := rootUser(root, "postgres")
	require.NoError(t, err)
	require.Equal(t, []int{100, 102}, []int{uid, gid})
	_, _, err = rootUser(root, "bad")
	require.EqualError(t, err, "etc/passwd: bad entry for bad")
	_, _, err = rootUser(root, "nobody")
	require.EqualError(t, err, "etc/passwd has no nobody user")
	_, _, err = rootUser(t.TempDir(), "postgres")
	require.Error(t, err, "no passwd")
}

// The engine may report the container running before its first process
// executes sleep: the wait sees it become sleep, and gives up on a
// process that never does.
func TestAwaitImageRootProcessWaitsForTheExec(t *testing.T) {
	t.Parallel()
	// sh waits for a line before it becomes sleep.
	later := exec.Command("sh", "-c", "read x; exec sleep infinity")
	in, err := later.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, later.Start())
	t.Cleanup(func() { _ = later.Process.Kill(); _ = later.Wait() })
	require.False(t, isImageRootProcess("/proc", later.Process.Pid), "still sh")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = in.Write([]byte("go\n"))
	}()
	require.True(t, awaitImageRootProcess(t.Context(), "/proc", later.Process.Pid))

	other := exec.Command("sleep", "3600")
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	require.False(t, awaitImageRootProcess(ctx, "/proc", other.Process.Pid))

	// A PID that names no process here fails at once, not at the bound.
	start := time.Now()
	require.False(t, awaitImageRootProcess(t.Context(), t.TempDir(), 1))
	require.Less(t, time.Since(start), imageRootExecWait/2, "the wait ended before its bound")
}
