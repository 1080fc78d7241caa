package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The test binary's child modes (see TestMain).
const (
	// envSegmentChild makes the child create a System V segment and exit,
	// so that the segment's creator is a process that has ended, as a
	// killed postmaster's is.
	envSegmentChild = "DOUBLERUN_STACK_TEST_SEGMENT_CHILD"
	// envNativeChild makes the child start a native stack and a run's temp
	// dir, print where they are and wait to be killed.
	envNativeChild = "DOUBLERUN_STACK_TEST_NATIVE_CHILD"
)

// runTestChild runs the child mode its environment names, if any; it does
// not return then.
func runTestChild() {
	switch {
	case os.Getenv(envSegmentChild) != "":
		for {
			key := 0x10000000 + rand.IntN(0x6fffffff)
			id, err := unix.SysvShmGet(key, 56, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			fmt.Println(id, key, os.Getpid())
			os.Exit(0)
		}
	case os.Getenv(envNativeChild) != "":
		s, err := Start(context.Background(), Options{Provider: ProviderNative})
		if err != nil {
			fmt.Println("error:", firstLine(err))
			os.Exit(1)
		}
		run, err := TempDir()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready", s.backend.(*nativeBackend).dir, run)
		select {} // until SIGKILL
	}
}

// startStackChild starts the test binary in the child mode mode (a
// variable TestMain looks at), which starts a stack and prints one line
// saying where it is, and returns the child and that line. The child is
// killed when the test ends.
func startStackChild(t *testing.T, mode string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(append(os.Environ(), mode+"=1"), env...)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
	}()
	select {
	case ready := <-line:
		return child, ready
	case <-time.After(5 * time.Minute):
		t.Fatal("the child did not start its stack in 5 minutes")
	}
	return nil, ""
}

// segment is a System V segment a test made through a child process.
type segment struct {
	id      int
	key     int32
	creator int32
}

// makeSegment creates a segment whose creator has ended, and removes it
// when the test ends.
func makeSegment(t *testing.T) segment {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envSegmentChild+"=1")
	out, err := cmd.Output()
	require.NoError(t, err, "segment child: %s", out)
	var s segment
	_, err = fmt.Sscan(string(out), &s.id, &s.key, &s.creator)
	require.NoError(t, err, "segment child said %q", out)
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(s.id, unix.IPC_RMID, nil) })
	return s
}

// stat describes the segment, ok false once it is gone.
func (s segment) stat() (unix.SysvShmDesc, bool) {
	var d unix.SysvShmDesc
	_, err := unix.SysvShmCtl(s.id, unix.IPC_STAT, &d)
	return d, err == nil && d.Perm.Key == s.key
}

// segmentDetached reports whether no process is attached any more to the
// segment the Postgres of the native stack in dir made (or it is gone).
func segmentDetached(dir string) bool {
	pm, ok := readPostmasterPID(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if !ok {
		return true
	}
	d, present := segment{id: pm.shmID, key: pm.shmKey}.stat()
	return !present || d.Nattch == 0
}

// deadPID returns the PID of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	p := exec.Command("true")
	require.NoError(t, p.Run())
	return p.Process.Pid
}

// The sweep removes the segment a dead stack's postmaster left, and only
// that: each row forges the dir of a stack whose owner has died (or, in
// the last, runs), with a postmaster.pid as Postgres writes it, naming a
// real segment, and changes one thing the sweep relies on.
func TestSweepReleasesOnlyTheDeadStacksSharedMemory(t *testing.T) {
	t.Parallel()
	dead := strconv.Itoa(deadPID(t))
	for _, tc := range []struct {
		name string
		// pid and key say what postmaster.pid names, given the segment.
		pid     func(s segment) int32
		key     func(s segment) int32
		attach  bool   // a process is attached to the segment
		owner   string // the stack's owner file
		removed bool
	}{
		{name: "DeadPostmastersSegmentIsRemoved", removed: true},
		{name: "AnotherCreatorIsKept", pid: func(segment) int32 { n, _ := strconv.Atoi(dead); return int32(n) }},
		{name: "AnotherKeyIsKept", key: func(s segment) int32 { return s.key + 1 }},
		{name: "AttachedSegmentIsKept", attach: true},
		{name: "LiveOwnersSegmentIsKept", owner: self().encode()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg := makeSegment(t)
			var mem []byte
			if tc.attach {
				var err error
				mem, err = unix.SysvShmAttach(seg.id, 0, unix.SHM_RDONLY)
				require.NoError(t, err)
				t.Cleanup(func() { _ = unix.SysvShmDetach(mem) })
			}
			pid, key := seg.creator, seg.key
			if tc.pid != nil {
				pid = tc.pid(seg)
			}
			if tc.key != nil {
				key = tc.key(seg)
			}
			owner := "pid=" + dead + "\n"
			if tc.owner != "" {
				owner = tc.owner
			}
			root := t.TempDir()
			dir := forgeStackDir(t, root, owner, pid, key, seg.id)

			sweepStaleDirs(root, self(), slog.New(slog.DiscardHandler))

			_, present := seg.stat()
			require.Equal(t, !tc.removed, present, "segment %d present after the sweep", seg.id)
			_, err := os.Stat(dir)
			// The dir goes with a dead owner, whatever its segment, unless
			// the segment is the stack's own and still in use: the dir is
			// the record of whose it is.
			require.Equal(t, tc.owner == "" && !tc.attach, errors.Is(err, os.ErrNotExist), "dir removed")
			if tc.attach {
				// Once the last process detaches, the next sweep takes both.
				require.NoError(t, unix.SysvShmDetach(mem))
				sweepStaleDirs(root, self(), slog.New(slog.DiscardHandler))
				_, present := seg.stat()
				require.False(t, present, "the stack's segment, once detached")
				require.NoDirExists(t, dir)
			}
		})
	}
}

// A dead HA stack's dir holds a data directory per server (the oracle's
// pgdata, pgdata-pg1, pgdata-pg2); the sweep removes each server's
// segment, and keeps the dir while any one of them is still attached.
func TestSweepReleasesEverySegmentOfAnHAStack(t *testing.T) {
	t.Parallel()
	dead := "pid=" + strconv.Itoa(deadPID(t)) + "\n"
	for _, attached := range []int{-1, 0, 1, 2} {
		t.Run(fmt.Sprintf("Attached%d", attached), func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			segs := []segment{makeSegment(t), makeSegment(t), makeSegment(t)}
			dir := forgeStackDir(t, root, dead, segs[0].creator, segs[0].key, segs[0].id)
			for i, sub := range []string{"pgdata-pg1", "pgdata-pg2"} {
				forgePostmasterPID(t, dir, sub, segs[i+1].creator, segs[i+1].key, segs[i+1].id)
			}
			if attached >= 0 {
				mem, err := unix.SysvShmAttach(segs[attached].id, 0, unix.SHM_RDONLY)
				require.NoError(t, err)
				t.Cleanup(func() { _ = unix.SysvShmDetach(mem) })
			}
			sweepStaleDirs(root, self(), slog.New(slog.DiscardHandler))
			for i, seg := range segs {
				_, present := seg.stat()
				require.Equal(t, i == attached, present, "segment %d present", i)
			}
			_, err := os.Stat(dir)
			require.Equal(t, attached < 0, errors.Is(err, os.ErrNotExist), "dir removed")
		})
	}
}

// forgeStackDir makes under root the dir of a native stack with the given
// owner file and a postmaster.pid in Postgres's format naming the
// postmaster pid and the segment key / id.
func forgeStackDir(t *testing.T, root, owner string, pid, key int32, id int) string {
	t.Helper()
	dir, err := os.MkdirTemp(root, nativeDirPrefix)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644))
	forgePostmasterPID(t, dir, "pgdata", pid, key, id)
	return dir
}

// forgePostmasterPID makes the data directory sub of the stack in dir,
// with a postmaster.pid naming the postmaster pid and the segment.
func forgePostmasterPID(t *testing.T, dir, sub string, pid, key int32, id int) {
	t.Helper()
	pgdata := filepath.Join(dir, sub)
	require.NoError(t, os.Mkdir(pgdata, 0o700))
	// As Postgres writes it: %9lu %9lu for the key (a C int printed
	// unsigned) and the ID.
	pm := fmt.Sprintf("%d\n%s\n1796137886\n44897\n%s/sock\n127.0.0.1\n%9d %9d\nready   \n", pid, pgdata, dir, uint64(uint32(key)), id)
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "postmaster.pid"), []byte(pm), 0o600))
}

// A native stack whose owner is SIGKILLed leaves its temp dir and its
// Postgres's System V segment, and a run's temp dir beside it; the next
// stack removes all three, and leaves a segment no dead stack names, even
// one whose creator has ended and to which nothing is attached. Its
// dynamic shared memory never reaches /dev/shm.
//
// Not parallel: it points DOUBLERUN_STACK_DIR and TMPDIR at a dir of its
// own, so that no other process's sweep (other test binaries, other
// doublerun users of the machine) removes the dead stack before this
// test's next start does.
func TestKilledNativeStacksSharedMemoryIsReleased(t *testing.T) {
	// Not t.TempDir: as root the servers run as the postgres user, who
	// must be able to reach the stack's dir.
	root, err := os.MkdirTemp(nativeRoot(), "doublerun-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	t.Setenv(EnvStackDir, root)
	t.Setenv("TMPDIR", root)
	foreign := makeSegment(t)

	child, ready := startStackChild(t, envNativeChild)
	f := strings.Fields(ready)
	require.Len(t, f, 3, "child: %s", ready)
	stackDir, runDir := f[1], f[2]
	pm, ok := readPostmasterPID(filepath.Join(stackDir, "pgdata", "postmaster.pid"))
	require.True(t, ok, "postmaster.pid names the postmaster and its segment")
	seg := segment{id: pm.shmID, key: pm.shmKey, creator: pm.pid}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(seg.id, unix.IPC_RMID, nil) }) // should the sweep fail

	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pm.pid))
	require.NoError(t, err)
	require.Contains(t, string(maps), filepath.Join(stackDir, "pgdata", "pg_dynshmem", "mmap."), "the postmaster maps its dynamic shared memory from the stack's dir")
	require.NotContains(t, string(maps), "/dev/shm/PostgreSQL.", "nothing of it in /dev/shm, where no sweep could tell it from another server's")

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	// The servers die with it (Pdeathsig), and the backends with the
	// postmaster; each detaches as it exits.
	require.Eventually(t, func() bool {
		return segmentDetached(stackDir) && errors.Is(syscall.Kill(int(pm.pid), 0), syscall.ESRCH)
	}, 30*time.Second, 50*time.Millisecond, "the killed stack's postmaster and backends are gone")
	_, left := seg.stat()
	require.True(t, left, "the killed stack's segment stays")
	require.DirExists(t, stackDir)
	require.DirExists(t, runDir)

	ctx := context.Background()
	s, err := Start(ctx, Options{Provider: ProviderNative})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))

	_, left = seg.stat()
	require.False(t, left, "the dead stack's segment %d is removed", seg.id)
	require.NoDirExists(t, stackDir)
	require.NoDirExists(t, runDir)
	_, kept := foreign.stat()
	require.True(t, kept, "a segment no dead stack names is left alone")
}
